"""The replication configuration of buckets and the credentials it names: what the S3
routes (Put/Get/DeleteBucketReplication), the admin credential routes, the engine's write
path (`status`: the x-amz-replication-status a new version is born with) and the journal's
consumer ask.

The configuration is a bucket config document (key `replication`, JSON of
`rules.ReplicationConfiguration`) stored through `BucketConfigService`: durable, on the
control record for `recover`, replicated to cluster peers and exported like every bucket
setting. A PUT needs versioning Enabled on the source bucket (AWS's InvalidRequest) and
credentials that exist. Credentials are the `replication_credentials` setting
(`credentials.py`), changed through `SettingsService`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from objstore.engine.changes import Caller
from objstore.engine.versioning import ENABLED
from objstore.errors import AdminError, S3Error
from objstore.meta.records import ObjectRecord
from objstore.replication import credentials as creds
from objstore.replication.rules import (
    REPLICATION_CONFIG_KEY,
    ReplicationConfiguration,
    match,
    parse_stored,
    to_json,
    validate,
)

if TYPE_CHECKING:
    from objstore.engine.bucket_config import BucketConfigService
    from objstore.engine.settings import SettingsService
    from objstore.meta.async_store import MetaStore

REPLICA = "REPLICA"
PENDING = "PENDING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
# The Caller detail the S3 layer sets on a write a replication source sent (the request
# carried x-amz-replication-status: REPLICA from an authenticated principal).
REPLICA_DETAIL = "replication_status"


def is_replica(caller: Caller) -> bool:
    return caller.details.get(REPLICA_DETAIL) == REPLICA


class ReplicationConfigService:
    def __init__(self, meta: MetaStore, bucket_config: BucketConfigService,
                 keeper: creds.SecretKeeper | None = None) -> None:
        """`keeper`: the node's master keys, which seal stored secrets (None: stored as
        they are)."""
        self._meta = meta
        self._bucket_config = bucket_config
        self._keeper = keeper
        self.settings: SettingsService | None = None  # set once the settings exist

    # -- bucket configuration -----------------------------------------------------------
    async def get(self, bucket: str) -> ReplicationConfiguration:
        await self._bucket_config.get(bucket)  # NoSuchBucket first
        config = parse_stored(await self._meta.get_bucket_config(bucket,
                                                                 REPLICATION_CONFIG_KEY))
        if config is None:
            raise S3Error("ReplicationConfigurationNotFoundError", BucketName=bucket)
        return config

    async def put(self, caller: Caller, bucket: str, config: ReplicationConfiguration) -> None:
        record = await self._bucket_config.get(bucket)
        if record.versioning != ENABLED:
            raise S3Error("InvalidRequest", "Versioning must be 'Enabled' on the bucket to "
                          "apply a replication configuration")
        known = await self.credentials()
        validate(config, lambda name: name in known)
        await self._bucket_config.put_config(caller, bucket, REPLICATION_CONFIG_KEY,
                                             to_json(config))

    async def delete(self, caller: Caller, bucket: str) -> None:
        await self._bucket_config.get(bucket)
        await self._bucket_config.delete_config(caller, bucket, REPLICATION_CONFIG_KEY)

    async def configuration(self, bucket: str) -> ReplicationConfiguration | None:
        """The bucket's configuration through the node's config cache (per write)."""
        return parse_stored(await self._bucket_config.document(bucket, REPLICATION_CONFIG_KEY))

    async def status(self, caller: Caller, record: ObjectRecord) -> str | None:
        """The replication status a new version (or delete marker) is born with: REPLICA
        for a replication source's write, PENDING when an enabled rule covers it (a
        marker only when the rule replicates delete markers), else none."""
        if is_replica(caller):
            return REPLICA
        config = await self.configuration(record.bucket)
        if config is None:
            return None
        rules = match(config, record.key, record.tags)
        if record.is_delete_marker:
            rules = [rule for rule in rules if rule.delete_markers]
        return PENDING if rules else None

    # -- credentials ----------------------------------------------------------------------
    async def credentials(self) -> dict[str, dict[str, str]]:
        """The stored entries by name (secrets possibly sealed: see `credential`)."""
        return creds.load(await self._meta.get_setting(creds.CREDENTIALS_SETTING))

    async def credential(self, name: str) -> dict[str, str] | None:
        """The named credential with its secret in clear (None: unknown); raises
        InvalidCredential when it is sealed and does not open here."""
        entry = (await self.credentials()).get(name)
        return None if entry is None else creds.opened(name, entry, self._keeper)

    def _stored(self, known: dict[str, dict[str, str]]) -> str:
        return json.dumps({name: creds.seal(name, entry, self._keeper)
                           for name, entry in known.items()}, sort_keys=True)

    async def put_credential(self, caller: Caller, name: str, value: object) -> None:
        try:
            creds.check_name(name)
            entry = creds.check_credential(value)
        except creds.InvalidCredential as error:
            raise AdminError("BadRequest", str(error)) from None
        assert self.settings is not None
        known = await self.credentials()
        known[name] = entry
        await self.settings.put_text(caller, creds.CREDENTIALS_SETTING, self._stored(known))

    async def delete_credential(self, caller: Caller, name: str) -> None:
        assert self.settings is not None
        known = await self.credentials()
        if name not in known:
            raise AdminError("NotFound", f"No replication credential named {name!r}.")
        del known[name]
        await self.settings.put_text(caller, creds.CREDENTIALS_SETTING, self._stored(known))


__all__ = ["COMPLETED", "FAILED", "PENDING", "REPLICA", "REPLICA_DETAIL",
           "ReplicationConfigService", "is_replica"]
