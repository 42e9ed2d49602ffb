"""Server settings: the table of runtime settings (their validation, rendering, which are
node-local or read-only) and `SettingsService`, the one way a setting is changed.

A change is written to the metadata database and then, for `objstore recover`, to the
control record on the data volume; then `on_change(key)` tells the node's services (the
lifecycle worker) and the change hook reports it (SETTING_CHANGED, subject: the key).
`node_local` keys belong to one node and are never exported or imported; `node_id` is also
read-only. The admin settings routes and the configuration import both come through here.
No HTTP here: errors are AdminError (400 for an unknown key or an invalid value, 404 for an
unset key).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from objstore.blobs.control import ControlRecord
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind
from objstore.errors import AdminError
from objstore.replication import credentials as replication_credentials
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

CONTROL_FAMILY = "settings"
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


def _credentials(value: Any) -> str:
    try:
        return replication_credentials.parse_setting(value)
    except replication_credentials.InvalidCredential as error:
        raise InvalidSetting(str(error)) from None


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
    # Holds secrets: the text an export without secrets (and any reading) shows instead.
    masked: Callable[[str], str] | None = None


SETTINGS: dict[str, SettingSpec] = {
    # Replaces [server] region while set, without a restart (engine/region.py).
    "region": SettingSpec("The service's region name.", _region, str),
    "lifecycle_evaluation_interval": SettingSpec(
        "Seconds between lifecycle evaluations (at least 1); overrides [lifecycle] "
        "interval_seconds.", _interval, _number),
    # Replication credentials (replication/credentials.py): set through
    # POST/DELETE /admin/replication/credentials/{name}; secrets never shown.
    replication_credentials.CREDENTIALS_SETTING: SettingSpec(
        "Credentials of replication destinations (name -> access key); secrets masked.",
        _credentials, replication_credentials.masked,
        masked=replication_credentials.masked_text),
    "node_id": SettingSpec("This node's identity in a cluster.", _read_only, str,
                           node_local=True, writable=False),
}


def exportable_settings() -> tuple[str, ...]:
    """The keys a configuration export may carry (node-local ones never)."""
    return tuple(key for key, spec in SETTINGS.items() if not spec.node_local)


def replicated_setting(key: str) -> bool:
    """Whether a cluster peer's value of `key` travels (rule 13): known keys that are not
    node-local (a key this version does not know stays where it is)."""
    spec = SETTINGS.get(key)
    return spec is not None and not spec.node_local


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


@dataclass(frozen=True)
class SettingView:
    key: str
    value: Any  # the JSON value (None when unset)
    spec: SettingSpec


class SettingsService:
    def __init__(
        self,
        meta: MetaStore,
        control: ControlRecord,
        io: Runner,
        *,
        on_change: Callable[[str], None] | None = None,
        changes: ChangeHook | None = None,
    ) -> None:
        self._meta = meta
        self._control = control
        self._io = io
        self._on_change = on_change or (lambda _key: None)
        self._changes = changes or ChangeHook()

    @staticmethod
    def exportable(key: str) -> bool:
        return key in exportable_settings()

    @staticmethod
    def parse(key: str, value: Any) -> str:
        return parse_value(key, value)

    async def list(self) -> list[SettingView]:
        views = []
        for key, spec in sorted(SETTINGS.items()):
            stored = await self._meta.get_setting(key)
            views.append(SettingView(key, None if stored is None else spec.render(stored), spec))
        return views

    async def get(self, key: str) -> SettingView:
        spec = setting_spec(key)
        stored = await self._meta.get_setting(key)
        if stored is None:
            raise AdminError("NotFound", f"The setting {key} is not set.")
        return SettingView(key, spec.render(stored), spec)

    async def put(self, caller: Caller, key: str, value: Any) -> SettingView:
        """Validate and store a JSON value; the view of the value as stored."""
        spec = setting_spec(key)
        text = parse_value(key, value)
        await self.put_text(caller, key, text)
        return SettingView(key, spec.render(text), spec)

    async def put_text(self, caller: Caller, key: str, text: str) -> None:
        """Store a value already validated by `parse_value` (the import's path)."""
        await self._meta.put_setting(key, text)
        await self._io.run(self._control.write, CONTROL_FAMILY, key, {"value": text})
        await self._changed(caller, key)

    async def delete(self, caller: Caller, key: str) -> None:
        """Unset a setting: its built-in behaviour returns."""
        spec = setting_spec(key)
        if not spec.writable:
            raise AdminError("BadRequest", f"The setting {key} is read-only.")
        if not await self._meta.delete_setting(key):
            raise AdminError("NotFound", f"The setting {key} is not set.")
        await self._io.run(self._control.remove, CONTROL_FAMILY, key)
        await self._changed(caller, key)

    async def _changed(self, caller: Caller, key: str) -> None:
        """The one place this service reports a committed change."""
        self._on_change(key)
        await self._changes.committed(Change(ChangeKind.SETTING_CHANGED, caller, subject=key))


__all__ = ["SETTINGS", "SettingSpec", "SettingView", "SettingsService", "exportable_settings",
           "parse_value", "replicated_setting", "setting_spec"]
