"""Configuration export (GET /admin/export) and the transfer use cases' entry point.

The document has one section per family: `grants` (policy documents), `users` (with their
direct grant attachments), `teams` (with members and grant attachments), `credentials`
(secrets masked as "****" unless asked for, and then shown only for users the caller may
act on, `IamService.covers_user`: no export hands a caller a wider user's key), `buckets`
(owner, versioning, object lock and every bucket configuration key, verbatim) and
`settings` (only keys of the settings table that are not node-local; node_id never
travels). Built-in grants are not exported: every
node has them, under the same ids. References carry both id and name. An export is read
entity by entity, not as one snapshot; it is meant for a quiet control plane.

Importing such a document is `transfer_import.py`; `BucketDocuments` here is where its bucket
changes go. No HTTP here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from objstore.engine import lifecycle_rules
from objstore.engine.bucket_encryption import ALGORITHMS, ENCRYPTION_CONFIG_KEY, BucketEncryption
from objstore.engine.changes import Caller
from objstore.engine.compression import COMPRESSION_CONFIG_KEY, CompressionSetting
from objstore.engine.lifecycle import LIFECYCLE_CONFIG_KEY
from objstore.engine.settings import SETTINGS
from objstore.engine.transfer_import import (
    DRY_RUN,
    IMPORT_ORDER,
    MASK,
    MODES,
    OVERWRITE,
    REF_FIELDS,
    SKIP,
    Importer,
    ImportTargets,
    JsonObject,
    is_node_local,
    load_snapshot,
    section_entries,
)
from objstore.errors import AdminError, S3Error
from objstore.http import cors
from objstore.iam.bootstrap import BUILTIN_GRANT_IDS
from objstore.iam.bucket_access import POLICY_KEY
from objstore.iam.bucket_policy import PolicyDocumentError, parse_bucket_policy
from objstore.meta.iam_records import GrantRecord, TeamRecord
from objstore.meta.records import CredentialRecord, UserRecord
from objstore.notify import rules as notification_rules
from objstore.notify.rules import NOTIFICATION_CONFIG_KEY, NotificationConfiguration
from objstore.replication import rules as replication_rules
from objstore.replication.rules import REPLICATION_CONFIG_KEY
from objstore.utc_dates import iso_milliseconds

if TYPE_CHECKING:
    from objstore.engine.bucket_config import BucketConfigService
    from objstore.engine.lifecycle import LifecycleService
    from objstore.meta.async_store import MetaStore

FORMAT = "objstore-export"
FORMAT_VERSION = 1
SECTIONS = ("users", "teams", "grants", "credentials", "buckets", "settings")

__all__ = ["DRY_RUN", "FORMAT", "MODES", "OVERWRITE", "SECTIONS", "SKIP", "TransferService",
           "parse_sections"]


iso = iso_milliseconds  # the export document's times, as the admin views show them


def parse_sections(raw: str | None) -> tuple[str, ...]:
    """`users,grants` -> those sections in document order; empty or None -> all."""
    if not raw:
        return SECTIONS
    wanted = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = sorted(wanted - set(SECTIONS))
    if unknown:
        raise AdminError("BadRequest", f"Unknown section {unknown[0]!r}; sections are "
                                       f"{', '.join(SECTIONS)}.")
    return tuple(name for name in SECTIONS if name in wanted)


# -- export ------------------------------------------------------------------------------


def _ref(ident: str, name: str, kind: str) -> JsonObject:
    id_field, name_field = REF_FIELDS[kind]
    return {id_field: ident, name_field: name}



class Exporter:
    def __init__(self, meta: MetaStore, *, include_secrets: bool,
                 exportable: Callable[[str], bool],
                 reveals: Callable[[str], Awaitable[bool]]) -> None:
        self._meta = meta
        self._include_secrets = include_secrets
        self._exportable = exportable
        self._reveals = reveals
        self._usernames: dict[str, str] = {}

    async def section(self, name: str) -> Any:
        if not self._usernames:
            users: list[UserRecord] = await self._meta.list_users()
            self._usernames = {user.user_id: user.username for user in users}
        return await _EXPORTERS[name](self)

    async def users(self) -> list[JsonObject]:
        found: list[UserRecord] = await self._meta.list_users()
        out = []
        for user in sorted(found, key=lambda u: u.username):
            grants = await self._meta.list_user_grants(user.user_id) or []
            out.append({
                "user_id": user.user_id, "username": user.username,
                "description": user.description, "is_root": user.is_root,
                "created_at": iso(user.created_at),
                "grants": [_ref(g.grant_id, g.name, "grants") for g in grants],
            })
        return out

    async def teams(self) -> list[JsonObject]:
        out = []
        for summary in sorted(await self._meta.list_team_summaries(), key=lambda s: s.team.name):
            team: TeamRecord = summary.team
            members = await self._meta.list_team_members(team.team_id) or []
            grants = await self._meta.list_team_grants(team.team_id) or []
            out.append({
                "team_id": team.team_id, "name": team.name, "description": team.description,
                "created_at": iso(team.created_at),
                "members": [_ref(u.user_id, u.username, "users") for u in members],
                "grants": [_ref(g.grant_id, g.name, "grants") for g in grants],
            })
        return out

    async def grants(self) -> list[JsonObject]:
        found: list[GrantRecord] = await self._meta.list_grants()
        return [{
            "grant_id": grant.grant_id, "name": grant.name, "description": grant.description,
            "document": grant.document, "created_at": iso(grant.created_at),
            "updated_at": iso(grant.updated_at or grant.created_at),
        } for grant in sorted(found, key=lambda g: g.name)
            if grant.grant_id not in BUILTIN_GRANT_IDS]

    async def credentials(self) -> list[JsonObject]:
        found: list[CredentialRecord] = await self._meta.list_credentials(None)
        revealed: dict[str, bool] = {}
        if self._include_secrets:
            for user_id in {c.user_id for c in found}:
                revealed[user_id] = await self._reveals(user_id)
        return [{
            "access_key_id": c.access_key_id,
            "secret_access_key": c.secret_access_key if revealed.get(c.user_id) else MASK,
            "user_id": c.user_id, "username": self._usernames.get(c.user_id, ""),
            "description": c.description, "active": c.active, "created_at": iso(c.created_at),
        } for c in found]

    async def buckets(self) -> list[JsonObject]:
        out = []
        for bucket in await self._meta.list_buckets():
            config = await self._meta.list_bucket_config(bucket.name)
            out.append({
                "name": bucket.name,
                "owner": _ref(bucket.owner_id, self._usernames.get(bucket.owner_id, ""),
                              "users"),
                "region": bucket.region, "created_at": iso(bucket.created_at),
                "versioning": bucket.versioning, "object_lock": bucket.object_lock,
                "config": dict(sorted(config.items())),
            })
        return out

    async def settings(self) -> JsonObject:
        found: dict[str, str] = await self._meta.list_settings()
        return {key: self._shown(key, value) for key, value in sorted(found.items())
                if self._exportable(key) and not is_node_local(key)}

    def _shown(self, key: str, value: str) -> str:
        """A setting holding secrets (replication credentials) is masked unless the
        export includes secrets."""
        spec = SETTINGS.get(key)
        if spec is None or spec.masked is None or self._include_secrets:
            return value
        return spec.masked(value)


_EXPORTERS: dict[str, Callable[[Exporter], Awaitable[Any]]] = {
    "users": Exporter.users, "teams": Exporter.teams, "grants": Exporter.grants,
    "credentials": Exporter.credentials, "buckets": Exporter.buckets,
    "settings": Exporter.settings,
}


class TransferService:
    def __init__(
        self, targets: ImportTargets, *, clock: Callable[[], float], server_version: str
    ) -> None:
        self._targets = targets
        self._clock = clock
        self._server_version = server_version

    async def export(self, caller: Caller, sections: tuple[str, ...], *,
                     include_secrets: bool) -> JsonObject:
        exporter = Exporter(self._targets.meta, include_secrets=include_secrets,
                            exportable=self._targets.settings.exportable,
                            reveals=partial(self._targets.iam.covers_user, caller))
        document: JsonObject = {
            "format": FORMAT, "version": FORMAT_VERSION, "server_version": self._server_version,
            "exported_at": iso(self._clock()), "secrets_included": include_secrets,
            "sections": list(sections),
        }
        for name in sections:
            document[name] = await exporter.section(name)
        return document

    async def import_document(
        self, caller: Caller, document: Any, *, mode: str, dry_run: bool = False,
        sections: tuple[str, ...] = SECTIONS,
    ) -> JsonObject:
        if mode not in MODES:
            raise AdminError("BadRequest", f"mode must be one of {', '.join(MODES)}.")
        check_export_document(document)
        for section in IMPORT_ORDER:
            if section in sections and section in document:
                section_entries(section, document[section])  # 400 before any change
        snapshot = await load_snapshot(self._targets.meta)
        importer = Importer(self._targets, caller, snapshot, mode, dry_run=dry_run,
                            sections=sections)
        report = await importer.run(document)
        return report.to_json()


def check_export_document(document: Any) -> None:
    if not isinstance(document, dict):
        raise AdminError("BadRequest", "The import document must be a JSON object.")
    if document.get("format", FORMAT) != FORMAT:
        raise AdminError("BadRequest", f"This is not an {FORMAT} document.")
    version = document.get("version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise AdminError("BadRequest", f"Unsupported document version {version!r}.")


class BucketDocuments:
    """Where an import's bucket changes go: versioning and configuration documents through
    `BucketConfigService` (database and control record), the lifecycle configuration
    through `LifecycleService`, which also forgets its cached copy. Lifecycle and default
    encryption documents are checked (parsed and validated) before anything is written."""

    def __init__(self, documents: BucketConfigService, lifecycle: LifecycleService) -> None:
        self._documents = documents
        self._lifecycle = lifecycle

    def check_config(self, key: str, value: str, bucket: str = "") -> None:
        if key == LIFECYCLE_CONFIG_KEY:
            lifecycle_rules.validate(parse_lifecycle(value))
        elif key == ENCRYPTION_CONFIG_KEY:
            parse_encryption(value)
        elif key == COMPRESSION_CONFIG_KEY:
            CompressionSetting.from_json(value)  # AdminError when it is not a setting
        elif key == cors.CORS_CONFIG_KEY:
            try:
                cors.validate_rules(cors.rules_from_json(value))
            except (ValueError, KeyError, TypeError, S3Error) as exc:
                raise AdminError("BadRequest", f"the CORS configuration is invalid: {exc!r}"
                                 ) from None
        elif key == NOTIFICATION_CONFIG_KEY:
            parse_notification_config(value)
        elif key == POLICY_KEY:
            try:
                parse_bucket_policy(value, bucket)
            except PolicyDocumentError as exc:
                raise AdminError("BadRequest", f"the bucket policy is invalid: {exc}") from None
        elif key == REPLICATION_CONFIG_KEY and replication_rules.parse_stored(value) is None:
            raise AdminError("BadRequest", "a bucket's replication document is not one "
                             "this version reads.")

    async def set_versioning(self, caller: Caller, name: str, status: str) -> Any:
        return await self._documents.set_versioning(caller, name, status)

    async def put_config(self, caller: Caller, bucket: str, key: str, value: str) -> None:
        if key == LIFECYCLE_CONFIG_KEY:
            await self._lifecycle.put(caller, bucket, parse_lifecycle(value))
        else:
            await self._documents.put_config(caller, bucket, key, value)

    async def delete_config(self, caller: Caller, bucket: str, key: str) -> Any:
        if key == LIFECYCLE_CONFIG_KEY:
            return await self._lifecycle.delete(caller, bucket)
        return await self._documents.delete_config(caller, bucket, key)


def parse_encryption(value: str) -> BucketEncryption:
    """A bucket default encryption document (read by every PUT into the bucket)."""
    try:
        config = BucketEncryption.from_json(value)
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminError("BadRequest", f"the encryption configuration is invalid: {exc!r}"
                         ) from None
    if config.algorithm not in ALGORITHMS:
        raise AdminError("BadRequest", f"the default encryption {config.algorithm!r} is "
                         "not supported")
    return config


def parse_notification_config(value: str) -> NotificationConfiguration:
    """A bucket notification document (its destinations are the importing node's
    business: a target it does not know fails that event's deliveries, visibly)."""
    try:
        return notification_rules.from_json(value)
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminError("BadRequest", f"the notification configuration is invalid: {exc!r}"
                         ) from None


def parse_lifecycle(value: str) -> lifecycle_rules.LifecycleConfiguration:
    try:
        return lifecycle_rules.from_json(value)
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminError("BadRequest", f"the lifecycle configuration is invalid: {exc!r}") from None
