"""Runtime settings of the admin API (Klein, mounted by `AdminApi` under /admin):
GET /settings, and GET/PUT/DELETE /settings/{key} for the keys of `SETTINGS` only.

Bodies: PUT takes {"value": V} (a "key" field, if sent, must name the same key) and
answers 200 {"key", "value"} with the value as stored; GET answers the same shape; DELETE
answers 204 and the built-in behaviour returns (for lifecycle_evaluation_interval:
[lifecycle] interval_seconds). An unknown key or an invalid value is 400, an unset key is
404 on GET and DELETE, a read-only key is 400 on PUT and DELETE.

Authorization: reading needs svc:ViewServerInfo; changing needs root or a grant allowing
the action `*` (AdministratorAccess): the policy language has no settings action.

The table of settings and their rules, and how a change is stored and announced, are
`objstore.engine.settings`'s; these routes only read the request and render the answer.
"""

from __future__ import annotations

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import ADMINISTRATOR, VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.views import JsonObject, no_content, read_json
from objstore.engine.settings import SettingsService, SettingView, setting_spec
from objstore.errors import AdminError
from objstore.http.caller import client_caller
from objstore.http.shield import ShieldedKlein
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal

FAMILIES = ("settings",)


class SettingsRoutes:
    app = ShieldedKlein()  # changes complete even when the client leaves
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, settings: SettingsService) -> None:
        self._gate = gate
        self._settings = settings

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/settings", methods=["GET"], action=VIEW_SERVER_INFO)
    async def list_settings(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        return json_body(request, 200, [
            {"key": view.key, "value": view.value, "node_local": view.spec.node_local,
             "writable": view.spec.writable, "description": view.spec.description}
            for view in await self._settings.list()])

    @authorized_route(app, "/settings/<key>", methods=["GET"], action=VIEW_SERVER_INFO)
    async def get_setting(self, request: ObjstoreRequest, _caller: Principal, key: str) -> bytes:
        return json_body(request, 200, _view(await self._settings.get(key)))

    @authorized_route(app, "/settings/<key>", methods=["PUT"], action=ADMINISTRATOR)
    async def put_setting(self, request: ObjstoreRequest, caller: Principal, key: str) -> bytes:
        body = read_json(request)
        setting_spec(key)
        if body.get("key", key) != key:
            raise AdminError("BadRequest", "The body's key does not match the path.")
        if "value" not in body:
            raise AdminError("BadRequest", "value is required.")
        view = await self._settings.put(client_caller(request, caller), key, body["value"])
        return json_body(request, 200, _view(view))

    @authorized_route(app, "/settings/<key>", methods=["DELETE"], action=ADMINISTRATOR)
    async def delete_setting(self, request: ObjstoreRequest, caller: Principal, key: str) -> bytes:
        await self._settings.delete(client_caller(request, caller), key)
        return no_content(request)


def _view(view: SettingView) -> JsonObject:
    return {"key": view.key, "value": view.value}


__all__ = ["FAMILIES", "SettingsRoutes"]
