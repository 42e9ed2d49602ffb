"""Configuration import (POST /admin/import): applying an export document to this node.

Identifiers are preserved: an imported user, team or grant keeps its exported id, so
attachments, scripts and audit trails that name ids keep working. Timestamps are not: an
imported entity is created now. An entry matches an existing entity by id, else by name
(unique); an id and a name naming two different entities is an error for that entry.
References (a user's grants, a team's members and grants, a credential's or bucket's
owner) resolve the same way, through the ids this import mapped first.

Modes: `skip` (default) creates what is missing and leaves what exists alone; `overwrite`
also makes existing entities as the document says (attachments and bucket configuration
keys included, extra ones removed; a credential's secret is never changed); `dry_run`
changes nothing and reports what `overwrite` would do (a `dry_run` flag previews the other
modes the same way). Never imported: root users and their credentials, built-in grants,
node-local settings, and credentials whose secret is masked (unless the credential exists).

Entries are applied one by one in dependency order (grants, users, teams, credentials,
buckets, settings); a failing entry becomes an error entry of the report and the run goes
on. Every change goes through the use cases: IAM through `IamService` (cache invalidation,
control record), new buckets through `BucketService`, bucket state and configuration keys
through `BucketStateWriter` (`BucketConfigService`), settings through `SettingsWriter` (the
validated settings table). No HTTP here.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from objstore.engine.changes import Caller
from objstore.engine.iam import IamService, NewCredential, check_document
from objstore.errors import AdminError, S3Error
from objstore.iam.bootstrap import BUILTIN_GRANT_IDS, builtin_grant_id
from objstore.iam.identity import Principal
from objstore.iam.policy import BUILTIN_GRANTS
from objstore.meta.iam_records import GrantRecord, TeamRecord
from objstore.meta.node_identity import NODE_ID_SETTING
from objstore.meta.records import BucketRecord, CredentialRecord, UserRecord
from objstore.replication.credentials import CREDENTIALS_SETTING, holds_mask

if TYPE_CHECKING:
    from objstore.engine.buckets import BucketService
    from objstore.meta.async_store import MetaStore

IMPORT_ORDER = ("grants", "users", "teams", "credentials", "buckets", "settings")
SKIP, OVERWRITE, DRY_RUN = "skip", "overwrite", "dry_run"
MODES = (SKIP, OVERWRITE, DRY_RUN)
MASK = "****"
NODE_LOCAL_SETTINGS = frozenset({NODE_ID_SETTING})
VERSIONING_STATES = ("Disabled", "Enabled", "Suspended")
REF_FIELDS = {"users": ("user_id", "username"), "teams": ("team_id", "name"),
              "grants": ("grant_id", "name")}

Step = Callable[[], Awaitable[Any]]
JsonObject = dict[str, Any]


def is_node_local(key: str) -> bool:
    """Never exported nor imported, whatever the settings table says."""
    return key in NODE_LOCAL_SETTINGS


class BucketStateWriter(Protocol):
    """Changes to a bucket that an import makes (`transfer.BucketDocuments`)."""

    def check_config(self, key: str, value: str, bucket: str = "") -> None:
        """Raise AdminError or S3Error when `value` is not a valid document for `key`
        (of `bucket`: a bucket policy names its bucket)."""
        ...

    async def set_versioning(self, caller: Caller, name: str, status: str) -> Any: ...

    async def put_config(self, caller: Caller, bucket: str, key: str, value: str) -> None: ...

    async def delete_config(self, caller: Caller, bucket: str, key: str) -> Any: ...


class SettingsWriter(Protocol):
    """The settings table: which keys travel, and the validated write of one."""

    def exportable(self, key: str) -> bool: ...

    def parse(self, key: str, value: str) -> str:
        """The stored text of `value`; AdminError when the value is invalid."""
        ...

    async def put_text(self, caller: Caller, key: str, text: str) -> None: ...


@dataclass(frozen=True)
class ImportTargets:
    """The use cases an import goes through."""

    meta: MetaStore
    iam: IamService
    buckets: BucketService
    bucket_state: BucketStateWriter
    settings: SettingsWriter


# -- import: the report and the view of what exists ---------------------------------------


@dataclass
class ImportReport:
    mode: str
    dry_run: bool
    sections: tuple[str, ...]
    outcomes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    errors: list[JsonObject] = field(default_factory=list)

    def add(self, outcome: str, section: str, item: str) -> None:
        self.outcomes.setdefault(outcome, {}).setdefault(section, []).append(item)

    def error(self, section: str, item: str, message: str) -> None:
        self.errors.append({"section": section, "item": item, "message": message})

    def to_json(self) -> JsonObject:
        body: JsonObject = {"mode": self.mode, "dry_run": self.dry_run}
        for outcome in ("created", "updated", "skipped"):
            found = self.outcomes.get(outcome, {})
            body[outcome] = {name: found.get(name, []) for name in self.sections}
        body["errors"] = self.errors
        return body


NAME_OF: dict[str, Callable[[Any], str]] = {
    "users": lambda record: str(record.username),
    "teams": lambda record: str(record.name),
    "grants": lambda record: str(record.name),
}


@dataclass
class Snapshot:
    """What exists (and, during a dry run, what would exist): entities by id and by name."""

    records: dict[str, dict[str, Any]]  # kind -> id -> record
    credentials: dict[str, CredentialRecord]
    buckets: dict[str, BucketRecord]
    settings: dict[str, str]
    names: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> name -> id
    fresh: set[str] = field(default_factory=set)  # ids created by this import

    def __post_init__(self) -> None:
        for kind, records in self.records.items():
            self.names[kind] = {NAME_OF[kind](r): ident for ident, r in records.items()}

    def put(self, kind: str, ident: str, record: Any) -> None:
        old = self.records[kind].get(ident)
        if old is not None:
            self.names[kind].pop(NAME_OF[kind](old), None)
        self.records[kind][ident] = record
        self.names[kind][NAME_OF[kind](record)] = ident

    def match(self, kind: str, ident: str | None, name: str) -> str | None:
        by_id = ident if ident is not None and ident in self.records[kind] else None
        by_name = self.names[kind].get(name)
        if by_id and by_name and by_id != by_name:
            raise AdminError("Conflict", f"id {ident} and name {name!r} belong to two "
                                         "different existing entities.")
        return by_id or by_name


async def load_snapshot(meta: MetaStore) -> Snapshot:
    users: list[UserRecord] = await meta.list_users()
    teams = [summary.team for summary in await meta.list_team_summaries()]
    grants: list[GrantRecord] = await meta.list_grants()
    credentials: list[CredentialRecord] = await meta.list_credentials(None)
    buckets: list[BucketRecord] = await meta.list_buckets()
    return Snapshot(
        records={"users": {u.user_id: u for u in users}, "teams": {t.team_id: t for t in teams},
                 "grants": {g.grant_id: g for g in grants}},
        credentials={c.access_key_id: c for c in credentials},
        buckets={b.name: b for b in buckets},
        settings=await meta.list_settings(),
    )


# -- import: entry fields ------------------------------------------------------------------


def text(entry: Mapping[str, Any], name: str, *, default: str | None = None) -> str:
    value = entry.get(name, default)
    if not isinstance(value, str) or (default is None and not value):
        raise AdminError("BadRequest", f"{name} must be a non-empty string.")
    return value


def optional_id(entry: Mapping[str, Any], name: str) -> str | None:
    value = entry.get(name)
    if value is None:
        return None
    try:
        if isinstance(value, str) and str(uuid.UUID(value)) == value:
            return value
    except ValueError:
        pass
    raise AdminError("BadRequest", f"{name} must be a UUID string.")


def ref_parts(kind: str, ref: Any) -> tuple[str | None, str | None]:
    """(id, name) of a reference: an object with the id and/or name field, or a string
    that is an id or a name."""
    id_field, name_field = REF_FIELDS[kind]
    if isinstance(ref, str):
        return ref, ref
    if isinstance(ref, dict):
        ident, name = ref.get(id_field), ref.get(name_field)
        return (ident if isinstance(ident, str) else None,
                name if isinstance(name, str) and name else None)
    return None, None


LABEL_FIELDS = {"users": "username", "teams": "name", "grants": "name",
                "credentials": "access_key_id", "buckets": "name", "settings": "key"}


def entry_label(section: str, entry: Any) -> str:
    """How the report names an entry: its name (or access key, or setting key)."""
    if not isinstance(entry, dict):
        return str(entry)[:80]
    value = entry.get(LABEL_FIELDS[section])
    return value if isinstance(value, str) and value else "?"


# -- import ----------------------------------------------------------------------------------


class Importer:
    """One import run: entries are applied in dependency order (grants, users, teams,
    credentials, buckets, settings), each one on its own; a failing entry becomes an error
    entry and the run goes on."""

    def __init__(
        self, targets: ImportTargets, caller: Caller, snapshot: Snapshot, mode: str,
        *, dry_run: bool, sections: tuple[str, ...],
    ) -> None:
        self._iam = targets.iam
        self._targets = targets
        self._caller = caller
        self._snap = snapshot
        self._overwrite = mode in (OVERWRITE, DRY_RUN)
        self._dry_run = dry_run or mode == DRY_RUN
        self._ids: dict[str, dict[str, str]] = {"users": {}, "teams": {}, "grants": {}}
        self.report = ImportReport(mode, self._dry_run, sections)

    async def run(self, document: Mapping[str, Any]) -> ImportReport:
        for section in IMPORT_ORDER:
            if section in self.report.sections and section in document:
                for entry in section_entries(section, document[section]):
                    await self._guarded(section, entry)
        return self.report

    async def _guarded(self, section: str, entry: Any) -> None:
        try:
            if not isinstance(entry, dict):
                raise AdminError("BadRequest", "an entry must be a JSON object.")
            await _IMPORTERS[section](self, entry)
        except (AdminError, S3Error) as error:
            self.report.error(section, entry_label(section, entry), error.message)

    async def _commit(self, section: str, item: str, outcome: str, steps: list[Step]) -> None:
        """Run the steps of one entry (none in a dry run) and report it; an entry with
        nothing to do is reported skipped."""
        if not steps and outcome == "updated":
            self.report.add("skipped", section, item)
            return
        if not self._dry_run:
            for step in steps:
                await step()
        self.report.add(outcome, section, item)

    def _skip(self, section: str, item: str) -> None:
        self.report.add("skipped", section, item)

    # -- references ----------------------------------------------------------------------
    def _resolve(self, kind: str, ref: Any) -> str | None:
        ident, name = ref_parts(kind, ref)
        if ident is not None and ident in self._ids[kind]:
            return self._ids[kind][ident]
        if ident is not None and ident in self._snap.records[kind]:
            return ident
        if name is not None:
            return self._snap.names[kind].get(name)
        return None

    def _resolve_all(self, kind: str, refs: Any, section: str, item: str) -> list[str]:
        if not isinstance(refs, list):
            raise AdminError("BadRequest", f"{kind} must be an array.")
        found = []
        for ref in refs:
            ident = self._resolve(kind, ref)
            if ident is None:
                wanted_id, wanted_name = ref_parts(kind, ref)
                self.report.error(section, item,
                                  f"unknown {kind[:-1]} {wanted_name or wanted_id or ref!r}")
            else:
                found.append(ident)
        return list(dict.fromkeys(found))

    async def _current(self, kind: str, owner: str, read: Callable[[str], Any]) -> set[str]:
        """Attached ids of an entity (none for one this import created)."""
        if owner in self._snap.fresh:
            return set()
        found = await read(owner) or []
        return {str(getattr(record, REF_FIELDS[kind][0])) for record in found}

    def _attachment_steps(self, current: Iterable[str], wanted: Iterable[str],
                          attach: Callable[[str], Awaitable[Any]],
                          detach: Callable[[str], Awaitable[Any]]) -> list[Step]:
        current, wanted = set(current), list(wanted)
        steps: list[Step] = [partial(attach, ident) for ident in wanted if ident not in current]
        if self._overwrite:
            steps += [partial(detach, ident) for ident in sorted(current - set(wanted))]
        return steps

    def _remember(self, kind: str, exported: str | None, local: str) -> None:
        if exported is not None:
            self._ids[kind][exported] = local

    # -- grants ----------------------------------------------------------------------------
    async def grant(self, entry: JsonObject) -> None:
        name = text(entry, "name")
        exported = optional_id(entry, "grant_id")
        if exported in BUILTIN_GRANT_IDS or name in BUILTIN_GRANTS:
            self._remember("grants", exported, builtin_grant_id(name)
                           if name in BUILTIN_GRANTS else str(exported))
            return self._skip("grants", name)
        description = text(entry, "description", default="")
        document = check_document(entry.get("document"))
        local = self._snap.match("grants", exported, name)
        if local is None:
            new_id = exported or str(uuid.uuid4())
            create = partial(self._iam.create_grant, self._caller, name, description, document,
                             grant_id=new_id)
            await self._commit("grants", name, "created", [create])
            self._snap.fresh.add(new_id)
            self._snap.put("grants", new_id, GrantRecord(new_id, name, document, 0.0, description))
            return self._remember("grants", exported, new_id)
        self._remember("grants", exported, local)
        current: GrantRecord = self._snap.records["grants"][local]
        if not self._overwrite or local in BUILTIN_GRANT_IDS:
            return self._skip("grants", name)
        changed = (current.name, current.description, current.document) != (
            name, description, document)
        steps: list[Step] = [partial(self._iam.update_grant, self._caller, local, name, description,
                                     document)] if changed else []
        await self._commit("grants", name, "updated", steps)
        self._snap.put("grants", local, dataclasses.replace(
            current, name=name, description=description, document=document))

    # -- users -----------------------------------------------------------------------------
    async def user(self, entry: JsonObject) -> None:
        username = text(entry, "username")
        if entry.get("is_root"):
            return self._skip("users", username)  # root users are never imported
        exported = optional_id(entry, "user_id")
        description = text(entry, "description", default="")
        local = self._snap.match("users", exported, username)
        attach = partial(self._iam.attach_user_grant, self._caller)
        detach = partial(self._iam.detach_user_grant, self._caller)
        if local is None or self._overwrite:
            grants = self._resolve_all("grants", entry.get("grants", []), "users", username)
        if local is None:
            new_id = exported or str(uuid.uuid4())
            steps: list[Step] = [partial(self._iam.create_user, self._caller, username, description,
                                         user_id=new_id)]
            steps += self._attachment_steps((), grants, partial(attach, new_id),
                                            partial(detach, new_id))
            await self._commit("users", username, "created", steps)
            self._snap.fresh.add(new_id)
            self._snap.put("users", new_id, UserRecord(new_id, username, 0.0, description))
            return self._remember("users", exported, new_id)
        self._remember("users", exported, local)
        current: UserRecord = self._snap.records["users"][local]
        if current.is_root or not self._overwrite:
            return self._skip("users", username)  # the root user is never overwritten
        steps = self._rename_steps(self._iam.update_user, local, (current.username, username),
                                   (current.description, description))
        attached = await self._current("grants", local, self._targets.meta.list_user_grants)
        steps += self._attachment_steps(attached, grants, partial(attach, local),
                                        partial(detach, local))
        await self._commit("users", username, "updated", steps)
        self._snap.put("users", local, dataclasses.replace(
            current, username=username, description=description))

    def _rename_steps(self, update: Callable[..., Awaitable[Any]], ident: str,
                      names: tuple[str, str], descriptions: tuple[str, str]) -> list[Step]:
        """An update of name and/or description when either differs (old, new pairs)."""
        name = names[1] if names[0] != names[1] else None
        description = descriptions[1] if descriptions[0] != descriptions[1] else None
        if name is None and description is None:
            return []
        return [partial(update, self._caller, ident, name, description)]

    # -- teams -----------------------------------------------------------------------------
    async def team(self, entry: JsonObject) -> None:
        name = text(entry, "name")
        exported = optional_id(entry, "team_id")
        description = text(entry, "description", default="")
        local = self._snap.match("teams", exported, name)
        if local is None or self._overwrite:
            members = self._resolve_all("users", entry.get("members", []), "teams", name)
            grants = self._resolve_all("grants", entry.get("grants", []), "teams", name)
        if local is None:
            new_id = exported or str(uuid.uuid4())
            steps: list[Step] = [partial(self._iam.create_team, self._caller, name, description,
                                         team_id=new_id)]
            steps += self._team_steps(new_id, set(), members, set(), grants)
            await self._commit("teams", name, "created", steps)
            self._snap.fresh.add(new_id)
            self._snap.put("teams", new_id, TeamRecord(new_id, name, 0.0, description))
            return self._remember("teams", exported, new_id)
        self._remember("teams", exported, local)
        if not self._overwrite:
            return self._skip("teams", name)
        current: TeamRecord = self._snap.records["teams"][local]
        meta = self._targets.meta
        steps = self._rename_steps(self._iam.update_team, local, (current.name, name),
                                   (current.description, description))
        steps += self._team_steps(
            local, await self._current("users", local, meta.list_team_members), members,
            await self._current("grants", local, meta.list_team_grants), grants)
        await self._commit("teams", name, "updated", steps)
        self._snap.put("teams", local, dataclasses.replace(
            current, name=name, description=description))

    def _team_steps(self, team_id: str, members_now: set[str], members: list[str],
                    grants_now: set[str], grants: list[str]) -> list[Step]:
        iam = self._iam
        return (
            self._attachment_steps(members_now, members,
                                   partial(iam.add_member, self._caller, team_id),
                                   partial(iam.remove_member, self._caller, team_id))
            + self._attachment_steps(grants_now, grants,
                                     partial(iam.attach_team_grant, self._caller, team_id),
                                     partial(iam.detach_team_grant, self._caller, team_id))
        )

    # -- credentials ---------------------------------------------------------------------
    async def credential(self, entry: JsonObject) -> None:
        access_key = text(entry, "access_key_id")
        owner = self._resolve("users", {"user_id": entry.get("user_id"),
                                        "username": entry.get("username")})
        if owner is None:
            raise AdminError("NotFound", "the owning user does not exist.")
        if self._snap.records["users"][owner].is_root:
            return self._skip("credentials", access_key)  # root credentials: never imported
        description = text(entry, "description", default="")
        active = entry.get("active", True)
        if not isinstance(active, bool):
            raise AdminError("BadRequest", "active must be true or false.")
        existing = self._snap.credentials.get(access_key)
        if existing is None:
            return await self._new_credential(entry, access_key, owner, description, active)
        if existing.user_id != owner:
            raise AdminError("Conflict", "the access key exists and belongs to another user.")
        if not self._overwrite:
            return self._skip("credentials", access_key)
        changes = (None if existing.active == active else active,
                   None if existing.description == description else description)
        steps: list[Step] = [] if changes == (None, None) else [
            partial(self._iam.update_credential, self._caller, access_key, *changes)]
        await self._commit("credentials", access_key, "updated", steps)
        self._snap.credentials[access_key] = dataclasses.replace(
            existing, active=active, description=description)

    async def _new_credential(self, entry: JsonObject, access_key: str, owner: str,
                              description: str, active: bool) -> None:
        secret = entry.get("secret_access_key")
        if not isinstance(secret, str) or not secret or secret == MASK:
            raise AdminError("BadRequest", "the secret is masked; export with "
                                           "include_secrets=true to import new credentials.")
        wanted = NewCredential(description=description, access_key_id=access_key,
                               secret_access_key=secret)
        steps: list[Step] = [partial(self._iam.create_credential, self._caller, owner, wanted)]
        if not active:
            steps.append(partial(self._iam.update_credential, self._caller, access_key,
                                 False, None))
        await self._commit("credentials", access_key, "created", steps)
        self._snap.credentials[access_key] = CredentialRecord(
            access_key, secret, owner, 0.0, description, active)

    # -- buckets ----------------------------------------------------------------------------
    async def bucket(self, entry: JsonObject) -> None:
        name = text(entry, "name")
        versioning = text(entry, "versioning", default="Disabled")
        object_lock = entry.get("object_lock", False)
        config = entry.get("config", {})
        if versioning not in VERSIONING_STATES or not isinstance(object_lock, bool):
            raise AdminError("BadRequest", "versioning or object_lock has an invalid value.")
        if not isinstance(config, dict) or not all(
                isinstance(v, str) for v in config.values()):
            raise AdminError("BadRequest", "config must map keys to strings.")
        existing = self._snap.buckets.get(name)
        if existing is None:
            return await self._new_bucket(entry, name, versioning, object_lock, config)
        if not self._overwrite:
            return self._skip("buckets", name)
        steps = self._bucket_state_steps(existing, versioning, object_lock)
        now = {} if self._dry_run and name in self._snap.fresh else (
            await self._targets.meta.list_bucket_config(name))
        steps += self._config_steps(name, now, config)
        await self._commit("buckets", name, "updated", steps)

    async def _new_bucket(self, entry: JsonObject, name: str, versioning: str,
                          object_lock: bool, config: dict[str, str]) -> None:
        who = self._caller.principal
        owner_id = self._resolve("users", entry.get("owner")) or who.user_id
        known: UserRecord | None = self._snap.records["users"].get(owner_id)
        owner = Principal(owner_id, known.username if known else who.username, False, "")
        # The importing caller creates the bucket on behalf of its owner.
        create = partial(self._targets.buckets.create,
                         dataclasses.replace(self._caller, principal=owner), name, location=None,
                         object_lock=object_lock)
        steps: list[Step] = [create]
        born = "Enabled" if object_lock else "Disabled"
        if versioning != born:
            steps.append(partial(self._targets.bucket_state.set_versioning, self._caller,
                                 name, versioning))
        steps += self._config_steps(name, {}, config)
        await self._commit("buckets", name, "created", steps)
        self._snap.fresh.add(name)
        self._snap.buckets[name] = BucketRecord(name, owner_id, "", 0.0, versioning, object_lock)

    def _bucket_state_steps(self, bucket: BucketRecord, versioning: str,
                            object_lock: bool) -> list[Step]:
        if bucket.object_lock != object_lock:
            raise AdminError("Conflict", "object lock cannot be turned on or off by an import.")
        if bucket.versioning == versioning:
            return []
        if versioning == "Disabled":
            raise AdminError("Conflict", "versioning cannot be disabled once enabled.")
        if object_lock and versioning == "Suspended":
            raise AdminError("Conflict", "versioning cannot be suspended with object lock on.")
        return [partial(self._targets.bucket_state.set_versioning, self._caller, bucket.name,
                        versioning)]

    def _config_steps(self, bucket: str, now: Mapping[str, str],
                      wanted: Mapping[str, str]) -> list[Step]:
        writer = self._targets.bucket_state
        changed = {key: value for key, value in sorted(wanted.items()) if now.get(key) != value}
        for key, value in changed.items():
            writer.check_config(key, value, bucket)  # before any step: dry runs check too
        steps: list[Step] = [partial(writer.put_config, self._caller, bucket, key, value)
                             for key, value in changed.items()]
        if self._overwrite:
            steps += [partial(writer.delete_config, self._caller, bucket, key)
                      for key in sorted(set(now) - set(wanted))]
        return steps

    # -- settings ---------------------------------------------------------------------------
    async def setting(self, entry: JsonObject) -> None:
        key, value = text(entry, "key"), entry.get("value")
        if is_node_local(key):
            return self._skip("settings", key)  # node-local: never imported
        settings = self._targets.settings
        if not settings.exportable(key):
            raise AdminError("BadRequest", f"Unknown or node-local setting {key!r}.")
        if not isinstance(value, str):
            raise AdminError("BadRequest", "a setting's value must be a string.")
        if key == CREDENTIALS_SETTING and holds_mask(value):
            return self._skip("settings", key)  # exported without secrets: nothing to set
        stored, now = settings.parse(key, value), self._snap.settings.get(key)
        if now == stored or (now is not None and not self._overwrite):
            return self._skip("settings", key)
        outcome = "created" if now is None else "updated"
        await self._commit("settings", key, outcome, [partial(settings.put_text, self._caller, key,
                                                              stored)])
        self._snap.settings[key] = stored


_IMPORTERS: dict[str, Callable[[Importer, JsonObject], Awaitable[None]]] = {
    "grants": Importer.grant, "users": Importer.user, "teams": Importer.team,
    "credentials": Importer.credential, "buckets": Importer.bucket,
    "settings": Importer.setting,
}


def section_entries(section: str, value: Any) -> list[Any]:
    """The entries of a section: arrays, except settings (an object of key -> value)."""
    if section == "settings":
        if not isinstance(value, dict):
            raise AdminError("BadRequest", "settings must be an object of key -> value.")
        return [{"key": key, "value": item} for key, item in value.items()]
    if not isinstance(value, list):
        raise AdminError("BadRequest", f"{section} must be an array.")
    return value
