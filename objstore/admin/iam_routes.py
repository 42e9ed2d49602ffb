"""The IAM endpoints of the admin API (Klein, mounted by `AdminApi` under /admin):
/credentials, /users, /teams, /grants and /me.

Each route declares the svc:* action its family needs (`authorized_route`: the gate
authenticates, rate-limits and authorizes before the handler runs; /me needs only
authentication); the handler parses the body, calls the IAM engine and shapes the JSON.
Statuses are exactly those of the admin table: 201 with the created resource, 204 with no
body for changes, 200 for reads.
"""

from __future__ import annotations

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import (
    AUTHENTICATED,
    MANAGE_CREDENTIALS,
    MANAGE_GRANTS,
    MANAGE_TEAMS,
    MANAGE_USERS,
    AdminGate,
    authorized_route,
)
from objstore.admin.views import (
    credential_view,
    effective_view,
    grant_list_view,
    grant_ref_view,
    grant_view,
    identity_view,
    member_view,
    no_content,
    optional_bool,
    optional_str,
    read_json,
    required_str,
    team_ref_view,
    team_summary_view,
    team_view,
    user_summary_view,
    user_view,
)
from objstore.engine.iam import IamService, NewCredential
from objstore.errors import AdminError
from objstore.http.caller import client_caller
from objstore.http.shield import ShieldedKlein
from objstore.http.site import ObjstoreRequest
from objstore.iam.authorizer import Authorizer
from objstore.iam.identity import Principal

FAMILIES = ("credentials", "users", "teams", "grants", "me")


class IamRoutes:
    app = ShieldedKlein()  # changes complete even when the client leaves
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, iam: IamService, authorizer: Authorizer) -> None:
        self._gate = gate
        self._iam = iam
        self._authorizer = authorizer

    def resource(self) -> object:
        return self.app.resource()

    # -- /me -----------------------------------------------------------------------------
    @authorized_route(app, "/me", methods=["GET"], action=AUTHENTICATED)
    async def me(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        actions = await self._authorizer.effective_actions(caller)
        return json_body(request, 200, identity_view(caller, actions))

    # -- /credentials: the caller's own ------------------------------------------------
    @authorized_route(app, "/credentials", methods=["GET"], action=MANAGE_CREDENTIALS)
    async def list_own_credentials(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        found = await self._iam.list_credentials(caller.user_id)
        return json_body(request, 200, [credential_view(c) for c in found])

    @authorized_route(app, "/credentials", methods=["POST"], action=MANAGE_CREDENTIALS)
    async def create_own_credential(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        body = read_json(request)
        wanted = NewCredential(description=optional_str(body, "description") or "")
        created = await self._iam.create_credential(client_caller(request, caller), caller.user_id,
                                                    wanted)
        return json_body(request, 201, credential_view(created, with_secret=True))

    @authorized_route(app, "/credentials/<access_key_id>", methods=["PUT"],
                      action=MANAGE_CREDENTIALS)
    async def update_credential(self, request: ObjstoreRequest, caller: Principal,
                                access_key_id: str) -> bytes:
        body = read_json(request)
        await self._iam.update_credential(
            client_caller(request, caller), access_key_id, optional_bool(body, "active"),
            optional_str(body, "description"),
        )
        return no_content(request)

    @authorized_route(app, "/credentials/<access_key_id>", methods=["DELETE"],
                      action=MANAGE_CREDENTIALS)
    async def delete_credential(self, request: ObjstoreRequest, caller: Principal,
                                access_key_id: str) -> bytes:
        await self._iam.delete_credential(client_caller(request, caller), access_key_id)
        return no_content(request)

    # -- /users --------------------------------------------------------------------------
    @authorized_route(app, "/users", methods=["GET"], action=MANAGE_USERS)
    async def list_users(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        users = await self._iam.list_users()
        return json_body(request, 200, [user_summary_view(u) for u in users])

    @authorized_route(app, "/users", methods=["POST"], action=MANAGE_USERS)
    async def create_user(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        body = read_json(request)
        user = await self._iam.create_user(
            client_caller(request, caller),
            required_str(body, "username"),
            optional_str(body, "description") or ""
        )
        return json_body(request, 201, user_view(user))

    @authorized_route(app, "/users/<user_id>", methods=["GET"], action=MANAGE_USERS)
    async def get_user(self, request: ObjstoreRequest, _caller: Principal, user_id: str) -> bytes:
        return json_body(request, 200, user_summary_view(await self._iam.get_user(user_id)))

    @authorized_route(app, "/users/<user_id>", methods=["PUT"], action=MANAGE_USERS)
    async def update_user(self, request: ObjstoreRequest, caller: Principal,
                          user_id: str) -> bytes:
        body = read_json(request)
        await self._iam.update_user(
            client_caller(request, caller), user_id,
            optional_str(body, "username"),
            optional_str(body, "description")
        )
        return no_content(request)

    @authorized_route(app, "/users/<user_id>", methods=["DELETE"], action=MANAGE_USERS)
    async def delete_user(self, request: ObjstoreRequest, caller: Principal,
                          user_id: str) -> bytes:
        await self._iam.delete_user(client_caller(request, caller), user_id)
        return no_content(request)

    @authorized_route(app, "/users/<user_id>/credentials", methods=["GET"],
                      action=MANAGE_CREDENTIALS)
    async def list_user_credentials(self, request: ObjstoreRequest, _caller: Principal,
                                    user_id: str) -> bytes:
        found = await self._iam.list_credentials(user_id)
        return json_body(request, 200, [credential_view(c, with_user=False) for c in found])

    @authorized_route(app, "/users/<user_id>/credentials", methods=["POST"],
                      action=MANAGE_CREDENTIALS)
    async def create_user_credential(self, request: ObjstoreRequest, caller: Principal,
                                     user_id: str) -> bytes:
        body = read_json(request)
        wanted = NewCredential(
            description=optional_str(body, "description") or "",
            access_key_id=optional_str(body, "access_key_id"),
            secret_access_key=optional_str(body, "secret_access_key"),
        )
        created = await self._iam.create_credential(client_caller(request, caller), user_id, wanted)
        return json_body(request, 201, credential_view(created, with_secret=True))

    @authorized_route(app, "/users/<user_id>/grants", methods=["GET"], action=MANAGE_USERS)
    async def list_user_grants(self, request: ObjstoreRequest, _caller: Principal,
                               user_id: str) -> bytes:
        grants = await self._iam.user_grants(user_id)
        return json_body(request, 200, [grant_ref_view(g) for g in grants])

    @authorized_route(app, "/users/<user_id>/grants/<grant_id>", methods=["PUT"],
                      action=MANAGE_USERS)
    async def attach_user_grant(self, request: ObjstoreRequest, caller: Principal,
                                user_id: str, grant_id: str) -> bytes:
        await self._iam.attach_user_grant(client_caller(request, caller), user_id, grant_id)
        return no_content(request)

    @authorized_route(app, "/users/<user_id>/grants/<grant_id>", methods=["DELETE"],
                      action=MANAGE_USERS)
    async def detach_user_grant(self, request: ObjstoreRequest, caller: Principal,
                                user_id: str, grant_id: str) -> bytes:
        await self._iam.detach_user_grant(client_caller(request, caller), user_id, grant_id)
        return no_content(request)

    @authorized_route(app, "/users/<user_id>/teams", methods=["GET"], action=MANAGE_USERS)
    async def list_user_teams(self, request: ObjstoreRequest, _caller: Principal,
                              user_id: str) -> bytes:
        teams = await self._iam.list_user_teams(user_id)
        return json_body(request, 200, [team_ref_view(t) for t in teams])

    @authorized_route(app, "/users/<user_id>/effective-grants", methods=["GET"],
                      action=MANAGE_USERS)
    async def effective_grants(self, request: ObjstoreRequest, _caller: Principal,
                               user_id: str) -> bytes:
        found = await self._iam.effective_grants(user_id)
        return json_body(request, 200, [effective_view(e) for e in found])

    # -- /teams --------------------------------------------------------------------------
    @authorized_route(app, "/teams", methods=["GET"], action=MANAGE_TEAMS)
    async def list_teams(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        teams = await self._iam.list_teams()
        return json_body(request, 200, [team_summary_view(t) for t in teams])

    @authorized_route(app, "/teams", methods=["POST"], action=MANAGE_TEAMS)
    async def create_team(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        body = read_json(request)
        team = await self._iam.create_team(
            client_caller(request, caller),
            required_str(body, "name"),
            optional_str(body, "description") or ""
        )
        return json_body(request, 201, team_view(team))

    @authorized_route(app, "/teams/<team_id>", methods=["GET"], action=MANAGE_TEAMS)
    async def get_team(self, request: ObjstoreRequest, _caller: Principal, team_id: str) -> bytes:
        return json_body(request, 200, team_summary_view(await self._iam.get_team(team_id)))

    @authorized_route(app, "/teams/<team_id>", methods=["PUT"], action=MANAGE_TEAMS)
    async def update_team(self, request: ObjstoreRequest, caller: Principal,
                          team_id: str) -> bytes:
        body = read_json(request)
        await self._iam.update_team(
            client_caller(request, caller), team_id,
            optional_str(body, "name"),
            optional_str(body, "description")
        )
        return no_content(request)

    @authorized_route(app, "/teams/<team_id>", methods=["DELETE"], action=MANAGE_TEAMS)
    async def delete_team(self, request: ObjstoreRequest, caller: Principal,
                          team_id: str) -> bytes:
        await self._iam.delete_team(client_caller(request, caller), team_id)
        return no_content(request)

    @authorized_route(app, "/teams/<team_id>/members", methods=["GET"], action=MANAGE_TEAMS)
    async def list_members(self, request: ObjstoreRequest, _caller: Principal,
                           team_id: str) -> bytes:
        members = await self._iam.list_members(team_id)
        return json_body(request, 200, [member_view(m) for m in members])

    @authorized_route(app, "/teams/<team_id>/members/<user_id>", methods=["PUT"],
                      action=MANAGE_TEAMS)
    async def add_member(self, request: ObjstoreRequest, caller: Principal,
                         team_id: str, user_id: str) -> bytes:
        await self._iam.add_member(client_caller(request, caller), team_id, user_id)
        return no_content(request)

    @authorized_route(app, "/teams/<team_id>/members/<user_id>", methods=["DELETE"],
                      action=MANAGE_TEAMS)
    async def remove_member(self, request: ObjstoreRequest, caller: Principal,
                            team_id: str, user_id: str) -> bytes:
        await self._iam.remove_member(client_caller(request, caller), team_id, user_id)
        return no_content(request)

    @authorized_route(app, "/teams/<team_id>/grants", methods=["GET"], action=MANAGE_TEAMS)
    async def list_team_grants(self, request: ObjstoreRequest, _caller: Principal,
                               team_id: str) -> bytes:
        grants = await self._iam.team_grants(team_id)
        return json_body(request, 200, [grant_ref_view(g) for g in grants])

    @authorized_route(app, "/teams/<team_id>/grants/<grant_id>", methods=["PUT"],
                      action=MANAGE_TEAMS)
    async def attach_team_grant(self, request: ObjstoreRequest, caller: Principal,
                                team_id: str, grant_id: str) -> bytes:
        await self._iam.attach_team_grant(client_caller(request, caller), team_id, grant_id)
        return no_content(request)

    @authorized_route(app, "/teams/<team_id>/grants/<grant_id>", methods=["DELETE"],
                      action=MANAGE_TEAMS)
    async def detach_team_grant(self, request: ObjstoreRequest, caller: Principal,
                                team_id: str, grant_id: str) -> bytes:
        await self._iam.detach_team_grant(client_caller(request, caller), team_id, grant_id)
        return no_content(request)

    # -- /grants -------------------------------------------------------------------------
    @authorized_route(app, "/grants", methods=["GET"], action=MANAGE_GRANTS)
    async def list_grants(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        grants = await self._iam.list_grants()
        return json_body(request, 200, [grant_list_view(g) for g in grants])

    @authorized_route(app, "/grants", methods=["POST"], action=MANAGE_GRANTS)
    async def create_grant(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        body = read_json(request)
        if body.get("document") is None:
            raise AdminError("BadRequest", "document is required.")
        grant = await self._iam.create_grant(
            client_caller(request, caller),
            required_str(body, "name"),
            optional_str(body, "description") or "",
            body["document"],
        )
        return json_body(request, 201, grant_view(grant))

    @authorized_route(app, "/grants/<grant_id>", methods=["GET"], action=MANAGE_GRANTS)
    async def get_grant(self, request: ObjstoreRequest, _caller: Principal, grant_id: str) -> bytes:
        return json_body(request, 200, grant_view(await self._iam.get_grant(grant_id)))

    @authorized_route(app, "/grants/<grant_id>", methods=["PUT"], action=MANAGE_GRANTS)
    async def update_grant(self, request: ObjstoreRequest, caller: Principal,
                           grant_id: str) -> bytes:
        body = read_json(request)
        await self._iam.update_grant(
            client_caller(request, caller), grant_id,
            optional_str(body, "name"),
            optional_str(body, "description"),
            body.get("document"),
        )
        return no_content(request)

    @authorized_route(app, "/grants/<grant_id>", methods=["DELETE"], action=MANAGE_GRANTS)
    async def delete_grant(self, request: ObjstoreRequest, caller: Principal,
                           grant_id: str) -> bytes:
        await self._iam.delete_grant(client_caller(request, caller), grant_id)
        return no_content(request)
