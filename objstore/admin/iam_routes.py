"""The IAM endpoints of the admin API (Klein, mounted by `AdminApi` under /admin):
/credentials, /users, /teams, /grants and /me.

Each handler first passes the admin gate with the svc:* action its family needs (the gate
authenticates, rate-limits and authorizes; /me needs only authentication), then parses the
body, calls the IAM engine and shapes the JSON. Statuses are exactly those of the admin
table: 201 with the created resource, 204 with no body for changes, 200 for reads.
"""

from __future__ import annotations

from objstore.admin.api import json_body
from objstore.admin.views import (
    AdminGate,
    credential_view,
    effective_view,
    grant_list_view,
    grant_ref_view,
    grant_view,
    identity_view,
    install_json_errors,
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
from objstore.http.shield import ShieldedKlein
from objstore.http.site import ObjstoreRequest
from objstore.iam.authorizer import Authorizer

MANAGE_USERS = "svc:ManageUsers"
MANAGE_TEAMS = "svc:ManageTeams"
MANAGE_GRANTS = "svc:ManageGrants"
MANAGE_CREDENTIALS = "svc:ManageCredentials"

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
    @app.route("/me", methods=["GET"])
    async def me(self, request: ObjstoreRequest) -> bytes:
        caller = await self._gate(request, None)
        actions = await self._authorizer.effective_actions(caller)
        return json_body(request, 200, identity_view(caller, actions))

    # -- /credentials: the caller's own ------------------------------------------------
    @app.route("/credentials", methods=["GET"])
    async def list_own_credentials(self, request: ObjstoreRequest) -> bytes:
        caller = await self._gate(request, MANAGE_CREDENTIALS)
        found = await self._iam.list_credentials(caller.user_id)
        return json_body(request, 200, [credential_view(c) for c in found])

    @app.route("/credentials", methods=["POST"])
    async def create_own_credential(self, request: ObjstoreRequest) -> bytes:
        caller = await self._gate(request, MANAGE_CREDENTIALS)
        body = read_json(request)
        wanted = NewCredential(description=optional_str(body, "description") or "")
        created = await self._iam.create_credential(caller, caller.user_id, wanted)
        return json_body(request, 201, credential_view(created, with_secret=True))

    @app.route("/credentials/<access_key_id>", methods=["PUT"])
    async def update_credential(self, request: ObjstoreRequest, access_key_id: str) -> bytes:
        caller = await self._gate(request, MANAGE_CREDENTIALS)
        body = read_json(request)
        await self._iam.update_credential(
            caller, access_key_id, optional_bool(body, "active"),
            optional_str(body, "description"),
        )
        return no_content(request)

    @app.route("/credentials/<access_key_id>", methods=["DELETE"])
    async def delete_credential(self, request: ObjstoreRequest, access_key_id: str) -> bytes:
        caller = await self._gate(request, MANAGE_CREDENTIALS)
        await self._iam.delete_credential(caller, access_key_id)
        return no_content(request)

    # -- /users --------------------------------------------------------------------------
    @app.route("/users", methods=["GET"])
    async def list_users(self, request: ObjstoreRequest) -> bytes:
        await self._gate(request, MANAGE_USERS)
        users = await self._iam.list_users()
        return json_body(request, 200, [user_summary_view(u) for u in users])

    @app.route("/users", methods=["POST"])
    async def create_user(self, request: ObjstoreRequest) -> bytes:
        await self._gate(request, MANAGE_USERS)
        body = read_json(request)
        user = await self._iam.create_user(
            required_str(body, "username"), optional_str(body, "description") or ""
        )
        return json_body(request, 201, user_view(user))

    @app.route("/users/<user_id>", methods=["GET"])
    async def get_user(self, request: ObjstoreRequest, user_id: str) -> bytes:
        await self._gate(request, MANAGE_USERS)
        return json_body(request, 200, user_summary_view(await self._iam.get_user(user_id)))

    @app.route("/users/<user_id>", methods=["PUT"])
    async def update_user(self, request: ObjstoreRequest, user_id: str) -> bytes:
        await self._gate(request, MANAGE_USERS)
        body = read_json(request)
        await self._iam.update_user(
            user_id, optional_str(body, "username"), optional_str(body, "description")
        )
        return no_content(request)

    @app.route("/users/<user_id>", methods=["DELETE"])
    async def delete_user(self, request: ObjstoreRequest, user_id: str) -> bytes:
        await self._gate(request, MANAGE_USERS)
        await self._iam.delete_user(user_id)
        return no_content(request)

    @app.route("/users/<user_id>/credentials", methods=["GET"])
    async def list_user_credentials(self, request: ObjstoreRequest, user_id: str) -> bytes:
        await self._gate(request, MANAGE_CREDENTIALS)
        found = await self._iam.list_credentials(user_id)
        return json_body(request, 200, [credential_view(c, with_user=False) for c in found])

    @app.route("/users/<user_id>/credentials", methods=["POST"])
    async def create_user_credential(self, request: ObjstoreRequest, user_id: str) -> bytes:
        caller = await self._gate(request, MANAGE_CREDENTIALS)
        body = read_json(request)
        wanted = NewCredential(
            description=optional_str(body, "description") or "",
            access_key_id=optional_str(body, "access_key_id"),
            secret_access_key=optional_str(body, "secret_access_key"),
        )
        created = await self._iam.create_credential(caller, user_id, wanted)
        return json_body(request, 201, credential_view(created, with_secret=True))

    @app.route("/users/<user_id>/grants", methods=["GET"])
    async def list_user_grants(self, request: ObjstoreRequest, user_id: str) -> bytes:
        await self._gate(request, MANAGE_USERS)
        grants = await self._iam.user_grants(user_id)
        return json_body(request, 200, [grant_ref_view(g) for g in grants])

    @app.route("/users/<user_id>/grants/<grant_id>", methods=["PUT"])
    async def attach_user_grant(
        self, request: ObjstoreRequest, user_id: str, grant_id: str
    ) -> bytes:
        await self._gate(request, MANAGE_USERS)
        await self._iam.attach_user_grant(user_id, grant_id)
        return no_content(request)

    @app.route("/users/<user_id>/grants/<grant_id>", methods=["DELETE"])
    async def detach_user_grant(
        self, request: ObjstoreRequest, user_id: str, grant_id: str
    ) -> bytes:
        await self._gate(request, MANAGE_USERS)
        await self._iam.detach_user_grant(user_id, grant_id)
        return no_content(request)

    @app.route("/users/<user_id>/teams", methods=["GET"])
    async def list_user_teams(self, request: ObjstoreRequest, user_id: str) -> bytes:
        await self._gate(request, MANAGE_USERS)
        teams = await self._iam.list_user_teams(user_id)
        return json_body(request, 200, [team_ref_view(t) for t in teams])

    @app.route("/users/<user_id>/effective-grants", methods=["GET"])
    async def effective_grants(self, request: ObjstoreRequest, user_id: str) -> bytes:
        await self._gate(request, MANAGE_USERS)
        found = await self._iam.effective_grants(user_id)
        return json_body(request, 200, [effective_view(e) for e in found])

    # -- /teams --------------------------------------------------------------------------
    @app.route("/teams", methods=["GET"])
    async def list_teams(self, request: ObjstoreRequest) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        teams = await self._iam.list_teams()
        return json_body(request, 200, [team_summary_view(t) for t in teams])

    @app.route("/teams", methods=["POST"])
    async def create_team(self, request: ObjstoreRequest) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        body = read_json(request)
        team = await self._iam.create_team(
            required_str(body, "name"), optional_str(body, "description") or ""
        )
        return json_body(request, 201, team_view(team))

    @app.route("/teams/<team_id>", methods=["GET"])
    async def get_team(self, request: ObjstoreRequest, team_id: str) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        return json_body(request, 200, team_summary_view(await self._iam.get_team(team_id)))

    @app.route("/teams/<team_id>", methods=["PUT"])
    async def update_team(self, request: ObjstoreRequest, team_id: str) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        body = read_json(request)
        await self._iam.update_team(
            team_id, optional_str(body, "name"), optional_str(body, "description")
        )
        return no_content(request)

    @app.route("/teams/<team_id>", methods=["DELETE"])
    async def delete_team(self, request: ObjstoreRequest, team_id: str) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        await self._iam.delete_team(team_id)
        return no_content(request)

    @app.route("/teams/<team_id>/members", methods=["GET"])
    async def list_members(self, request: ObjstoreRequest, team_id: str) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        members = await self._iam.list_members(team_id)
        return json_body(request, 200, [member_view(m) for m in members])

    @app.route("/teams/<team_id>/members/<user_id>", methods=["PUT"])
    async def add_member(self, request: ObjstoreRequest, team_id: str, user_id: str) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        await self._iam.add_member(team_id, user_id)
        return no_content(request)

    @app.route("/teams/<team_id>/members/<user_id>", methods=["DELETE"])
    async def remove_member(self, request: ObjstoreRequest, team_id: str, user_id: str
                            ) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        await self._iam.remove_member(team_id, user_id)
        return no_content(request)

    @app.route("/teams/<team_id>/grants", methods=["GET"])
    async def list_team_grants(self, request: ObjstoreRequest, team_id: str) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        grants = await self._iam.team_grants(team_id)
        return json_body(request, 200, [grant_ref_view(g) for g in grants])

    @app.route("/teams/<team_id>/grants/<grant_id>", methods=["PUT"])
    async def attach_team_grant(
        self, request: ObjstoreRequest, team_id: str, grant_id: str
    ) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        await self._iam.attach_team_grant(team_id, grant_id)
        return no_content(request)

    @app.route("/teams/<team_id>/grants/<grant_id>", methods=["DELETE"])
    async def detach_team_grant(
        self, request: ObjstoreRequest, team_id: str, grant_id: str
    ) -> bytes:
        await self._gate(request, MANAGE_TEAMS)
        await self._iam.detach_team_grant(team_id, grant_id)
        return no_content(request)

    # -- /grants -------------------------------------------------------------------------
    @app.route("/grants", methods=["GET"])
    async def list_grants(self, request: ObjstoreRequest) -> bytes:
        await self._gate(request, MANAGE_GRANTS)
        grants = await self._iam.list_grants()
        return json_body(request, 200, [grant_list_view(g) for g in grants])

    @app.route("/grants", methods=["POST"])
    async def create_grant(self, request: ObjstoreRequest) -> bytes:
        await self._gate(request, MANAGE_GRANTS)
        body = read_json(request)
        if body.get("document") is None:
            raise AdminError("BadRequest", "document is required.")
        grant = await self._iam.create_grant(
            required_str(body, "name"), optional_str(body, "description") or "",
            body["document"],
        )
        return json_body(request, 201, grant_view(grant))

    @app.route("/grants/<grant_id>", methods=["GET"])
    async def get_grant(self, request: ObjstoreRequest, grant_id: str) -> bytes:
        await self._gate(request, MANAGE_GRANTS)
        return json_body(request, 200, grant_view(await self._iam.get_grant(grant_id)))

    @app.route("/grants/<grant_id>", methods=["PUT"])
    async def update_grant(self, request: ObjstoreRequest, grant_id: str) -> bytes:
        await self._gate(request, MANAGE_GRANTS)
        body = read_json(request)
        await self._iam.update_grant(
            grant_id, optional_str(body, "name"), optional_str(body, "description"),
            body.get("document"),
        )
        return no_content(request)

    @app.route("/grants/<grant_id>", methods=["DELETE"])
    async def delete_grant(self, request: ObjstoreRequest, grant_id: str) -> bytes:
        await self._gate(request, MANAGE_GRANTS)
        await self._iam.delete_grant(grant_id)
        return no_content(request)
