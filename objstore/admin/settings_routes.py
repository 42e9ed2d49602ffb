"""Runtime settings of the admin API (Klein, mounted by `AdminApi` under /admin):
GET /settings, and GET/PUT/DELETE /settings/{key} for the keys of `SETTINGS` only.

Bodies: PUT takes {"value": V} (a "key" field, if sent, must name the same key) and
answers 200 {"key", "value"} with the value as stored; GET answers the same shape; DELETE
answers 204 and the built-in behaviour returns (for lifecycle_evaluation_interval:
[lifecycle] interval_seconds). An unknown key or an invalid value is 400, an unset key is
404 on GET and DELETE, a read-only key is 400 on PUT and DELETE.

Authorization: reading needs svc:ViewServerInfo; changing needs root or a grant allowing
the action `*` (AdministratorAccess): the policy language has no settings action.

Settings live in the metadata database and, for `objstore recover`, in the control record
on the data volume. `node_local` keys belong to one node and are never exported or
imported (the export/import code reads this table); the setting node_id is also read-only.
`on_change(key)` tells the node's services (the lifecycle worker) that a value changed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from objstore.admin.api import json_body
from objstore.admin.gate import ADMINISTRATOR, VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.views import JsonObject, install_json_errors, no_content, read_json
from objstore.blobs.control import ControlRecord
from objstore.errors import AdminError
from objstore.http.shield import ShieldedKlein
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

FAMILIES = ("settings",)
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class InvalidSetting(ValueError):
    """A value a setting does not accept; the message says why."""


def _region(value: Any) -> str:
    if not isinstance(value, str) or not _REGION.match(value):
        raise InvalidSetting("region must be lower-case letters, digits and hyphens "
                             "(at most 63), e.g. us-east-1")
    return value


def _interval(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InvalidSetting("lifecycle_evaluation_interval must be a number of "
                                 "seconds") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSetting("lifecycle_evaluation_interval must be a number of seconds")
    if not math.isfinite(value) or value < 1:
        raise InvalidSetting("lifecycle_evaluation_interval must be at least 1 second")
    return format(value, "g") if isinstance(value, float) else str(value)


def _read_only(value: Any) -> str:
    raise InvalidSetting("this setting is read-only")


def _number(text: str) -> Any:
    value = float(text)
    return int(value) if value.is_integer() else value


@dataclass(frozen=True)
class SettingSpec:
    description: str
    parse: Callable[[Any], str]  # JSON value -> stored text (raises InvalidSetting)
    render: Callable[[str], Any]  # stored text -> JSON value
    node_local: bool = False  # belongs to one node: never exported or imported
    writable: bool = True


SETTINGS: dict[str, SettingSpec] = {
    # Stored and carried by export/import; a running node serves its [server] region.
    "region": SettingSpec("The service's region name.", _region, str),
    "lifecycle_evaluation_interval": SettingSpec(
        "Seconds between lifecycle evaluations (at least 1); overrides [lifecycle] "
        "interval_seconds.", _interval, _number),
    "node_id": SettingSpec("This node's identity in a cluster.", _read_only, str,
                           node_local=True, writable=False),
}


def exportable_settings() -> tuple[str, ...]:
    """The keys a configuration export may carry (node-local ones never)."""
    return tuple(key for key, spec in SETTINGS.items() if not spec.node_local)


def setting_spec(key: str) -> SettingSpec:
    spec = SETTINGS.get(key)
    if spec is None:
        raise AdminError("BadRequest", f"Unknown setting {key!r}; known settings: "
                         f"{', '.join(sorted(SETTINGS))}.")
    return spec


def parse_value(key: str, value: Any) -> str:
    """The stored text of a PUT value of `key` (400 when the key or value is invalid)."""
    spec = setting_spec(key)
    try:
        return spec.parse(value)
    except InvalidSetting as error:
        raise AdminError("BadRequest", str(error)) from None


class SettingsRoutes:
    app = ShieldedKlein()  # changes complete even when the client leaves
    install_json_errors(app)

    def __init__(
        self,
        *,
        gate: AdminGate,
        meta: MetaStore,
        control: ControlRecord,
        io: Runner,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self._gate = gate
        self._meta = meta
        self._control = control
        self._io = io
        self._on_change = on_change or (lambda _key: None)

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/settings", methods=["GET"], action=VIEW_SERVER_INFO)
    async def list_settings(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        entries = []
        for key, spec in sorted(SETTINGS.items()):
            stored = await self._meta.get_setting(key)
            entries.append({"key": key, "value": None if stored is None else spec.render(stored),
                            "node_local": spec.node_local, "writable": spec.writable,
                            "description": spec.description})
        return json_body(request, 200, entries)

    @authorized_route(app, "/settings/<key>", methods=["GET"], action=VIEW_SERVER_INFO)
    async def get_setting(self, request: ObjstoreRequest, _caller: Principal, key: str) -> bytes:
        spec = setting_spec(key)
        stored = await self._meta.get_setting(key)
        if stored is None:
            raise AdminError("NotFound", f"The setting {key} is not set.")
        return json_body(request, 200, _view(key, spec, stored))

    @authorized_route(app, "/settings/<key>", methods=["PUT"], action=ADMINISTRATOR)
    async def put_setting(self, request: ObjstoreRequest, _caller: Principal, key: str) -> bytes:
        body = read_json(request)
        spec = setting_spec(key)
        if body.get("key", key) != key:
            raise AdminError("BadRequest", "The body's key does not match the path.")
        if "value" not in body:
            raise AdminError("BadRequest", "value is required.")
        text = parse_value(key, body["value"])
        await self._meta.put_setting(key, text)
        await self._io.run(self._control.write, "settings", key, {"value": text})
        self._on_change(key)
        return json_body(request, 200, _view(key, spec, text))

    @authorized_route(app, "/settings/<key>", methods=["DELETE"], action=ADMINISTRATOR)
    async def delete_setting(self, request: ObjstoreRequest, _caller: Principal, key: str) -> bytes:
        spec = setting_spec(key)
        if not spec.writable:
            raise AdminError("BadRequest", f"The setting {key} is read-only.")
        if not await self._meta.delete_setting(key):
            raise AdminError("NotFound", f"The setting {key} is not set.")
        await self._io.run(self._control.remove, "settings", key)
        self._on_change(key)
        return no_content(request)


def _view(key: str, spec: SettingSpec, text: str) -> JsonObject:
    return {"key": key, "value": spec.render(text)}


__all__ = ["FAMILIES", "SETTINGS", "SettingSpec", "SettingsRoutes", "exportable_settings",
           "parse_value"]
