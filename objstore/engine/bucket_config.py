"""Bucket-level settings: the versioning state, the object lock configuration, bucket
tags, the default encryption, and the durable store of any bucket configuration document.

Every change is written to the metadata database and then to the control-plane record on
the data volume (family "bucket_config", key "<bucket>:<config key>", and the bucket's own
record for versioning and object lock), so `objstore recover` rebuilds it (DESIGN
invariant 2), and then reported to the change hook (`_report`, subject: the configuration
key, or `versioning`). Changes of one bucket's state are serialised in this process, so a
versioning change and an object lock change can never overwrite each other. Rules:
versioning goes Disabled -> Enabled <-> Suspended and never back to Disabled; Suspended
is refused while object lock is on; object lock can be turned on for an existing bucket
only while it holds no version (the spec's divergence from AWS), and turns versioning on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from objstore.blobs.control import ControlRecord
from objstore.engine.bucket_encryption import ENCRYPTION_CONFIG_KEY, BucketEncryption
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind
from objstore.engine.compression_setting import COMPRESSION_CONFIG_KEY
from objstore.engine.compression_setting import stage_settings as compression_stage_settings
from objstore.engine.lock_rules import LockConfiguration
from objstore.engine.stage_plan import BucketStageSettings
from objstore.engine.versioning import (
    LOCK_CONFIG_KEY,
    SUSPENDED,
    TAGGING_CONFIG_KEY,
    KeyLocks,
)
from objstore.errors import S3Error
from objstore.meta.records import BucketRecord
from objstore.meta.store import RecordNotFound
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

CONFIG_FAMILY = "bucket_config"
LOCKED_VERSIONING_MESSAGE = (
    "An Object Lock configuration is present on this bucket, so the versioning state "
    "cannot be changed."
)
NOT_EMPTY_LOCK_MESSAGE = (
    "Object Lock configuration can be enabled only on an empty bucket."
)


def config_control_key(bucket: str, key: str) -> str:
    """Bucket names hold no colon, so the first colon separates the two parts."""
    return f"{bucket}:{key}"


class BucketConfigService:
    def __init__(
        self,
        meta: MetaStore,
        control: ControlRecord,
        io: Runner,
        *,
        clock: Callable[[], float],
        locks: KeyLocks | None = None,
        changes: ChangeHook | None = None,
    ) -> None:
        self._meta = meta
        self._changes = changes or ChangeHook()
        self._control = control
        self._io = io
        self._clock = clock
        # Bucket-wide changes hold (bucket, ""): no object key is empty.
        self._locks = locks if locks is not None else KeyLocks()

    async def get(self, name: str) -> BucketRecord:
        bucket = await self._meta.get_bucket(name)
        if bucket is None:
            raise S3Error("NoSuchBucket", BucketName=name)
        return bucket

    # -- versioning ----------------------------------------------------------------------
    async def set_versioning(self, caller: Caller, name: str, status: str) -> BucketRecord:
        """Enabled or Suspended (the caller has validated the value)."""

        async def change() -> BucketRecord:
            bucket = await self.get(name)
            if status == SUSPENDED and bucket.object_lock:
                raise S3Error("InvalidBucketState", LOCKED_VERSIONING_MESSAGE)
            if bucket.versioning == status:
                return bucket
            updated = dataclasses.replace(bucket, versioning=status, updated_at=self._clock())
            try:
                await self._meta.update_bucket(updated)
            except RecordNotFound:
                raise S3Error("NoSuchBucket", BucketName=name) from None
            await self._record_bucket(updated)
            await self._report(caller, name, "versioning")
            return updated

        return await self._locks.run(name, "", change)

    # -- object lock ---------------------------------------------------------------------
    async def lock_configuration(self, name: str) -> LockConfiguration:
        bucket = await self.get(name)
        if not bucket.object_lock:
            raise S3Error("ObjectLockConfigurationNotFoundError", BucketName=name)
        text = await self._meta.get_bucket_config(name, LOCK_CONFIG_KEY)
        return LockConfiguration() if text is None else LockConfiguration.from_json(text)

    async def put_lock_configuration(self, caller: Caller, name: str,
                                     config: LockConfiguration) -> None:
        """Store the configuration; on a bucket without object lock, first turn it on
        (only while the bucket is empty) together with versioning."""

        async def change() -> None:
            bucket = await self.get(name)
            if not bucket.object_lock:
                await self._enable_lock(bucket)
            await self.put_config(caller, name, LOCK_CONFIG_KEY, config.to_json())

        await self._locks.run(name, "", change)

    async def _enable_lock(self, bucket: BucketRecord) -> None:
        outcome = await self._meta.enable_object_lock(bucket.name, self._clock())
        if outcome == "missing":
            raise S3Error("NoSuchBucket", BucketName=bucket.name)
        if outcome == "not_empty":
            raise S3Error("InvalidBucketState", NOT_EMPTY_LOCK_MESSAGE)
        await self._record_bucket(await self.get(bucket.name))

    # -- bucket tags ---------------------------------------------------------------------
    async def tags(self, name: str) -> dict[str, str]:
        await self.get(name)
        text = await self._meta.get_bucket_config(name, TAGGING_CONFIG_KEY)
        if text is None:
            raise S3Error("NoSuchTagSet", BucketName=name)
        return {str(k): str(v) for k, v in json.loads(text)}

    async def put_tags(self, caller: Caller, name: str, tags: dict[str, str]) -> None:
        """Replace the bucket's tag set; an empty set removes it."""
        await self.get(name)
        if not tags:
            await self.delete_config(caller, name, TAGGING_CONFIG_KEY)
            return
        await self.put_config(caller, name, TAGGING_CONFIG_KEY,
                              json.dumps(list(tags.items())))

    async def delete_tags(self, caller: Caller, name: str) -> None:
        await self.get(name)
        await self.delete_config(caller, name, TAGGING_CONFIG_KEY)

    # -- default encryption, and what object writes read of the bucket ----------------
    async def encryption(self, name: str) -> BucketEncryption:
        await self.get(name)
        text = await self._meta.get_bucket_config(name, ENCRYPTION_CONFIG_KEY)
        if text is None:
            raise S3Error("ServerSideEncryptionConfigurationNotFoundError", BucketName=name)
        return BucketEncryption.from_json(text)

    async def put_encryption(self, caller: Caller, name: str, config: BucketEncryption) -> None:
        await self.put_config(caller, name, ENCRYPTION_CONFIG_KEY, config.to_json())

    async def delete_encryption(self, caller: Caller, name: str) -> None:
        await self.get(name)
        await self.delete_config(caller, name, ENCRYPTION_CONFIG_KEY)

    async def stage_settings(self, name: str) -> BucketStageSettings:
        """The bucket's settings that choose an object's stages (engine/stage_plan.py),
        from the configuration cache: asked at the admission of every PutObject."""
        text = await self._meta.cached_bucket_config(name, ENCRYPTION_CONFIG_KEY)
        default_encryption = None if text is None else BucketEncryption.from_json(text).algorithm
        compression = compression_stage_settings(
            await self._meta.cached_bucket_config(name, COMPRESSION_CONFIG_KEY))
        return dataclasses.replace(compression, default_encryption=default_encryption)

    # -- any configuration document, durably ---------------------------------------------
    async def document(self, bucket: str, key: str) -> str | None:
        """One configuration document of a bucket (None: not set, or no such bucket),
        through the node's config cache: for admission, which reads it per request."""
        text: str | None = await self._meta.cached_bucket_config(bucket, key)
        return text

    async def put_config(self, caller: Caller, bucket: str, key: str, value: str) -> None:
        """Store one configuration document of a bucket in the database and in the
        control-plane record (for `recover`)."""
        try:
            await self._meta.put_bucket_config(bucket, key, value)
        except RecordNotFound:
            raise S3Error("NoSuchBucket", BucketName=bucket) from None
        record = await self.get(bucket)
        data = {"bucket": bucket, "key": key, "value": value,
                "bucket_created_at": record.created_at}
        await self._io.run(self._control.write, CONFIG_FAMILY,
                           config_control_key(bucket, key), data)
        await self._report(caller, bucket, key)

    async def delete_config(self, caller: Caller, bucket: str, key: str) -> bool:
        deleted: bool = await self._meta.delete_bucket_config(bucket, key)
        await self._io.run(self._control.remove, CONFIG_FAMILY, config_control_key(bucket, key))
        if deleted:
            await self._report(caller, bucket, key)
        return deleted

    async def _report(self, caller: Caller, bucket: str, subject: str) -> None:
        """The one place this service reports a committed change."""
        await self._changes.committed(Change(ChangeKind.BUCKET_CONFIGURED, caller, bucket,
                                             subject=subject))

    async def _record_bucket(self, bucket: BucketRecord) -> None:
        await self._io.run(self._control.write, "buckets", bucket.name,
                           dataclasses.asdict(bucket))
