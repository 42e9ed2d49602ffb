"""Use cases on the versions of keys: ListObjectVersions, and changes to the mutable state
of one existing version: retention, legal hold, tags and ACL (PutObjectRetention,
PutObjectLegalHold, Put/DeleteObjectTagging, PutObjectAcl).

Each change runs under the per-key lock shared with permanent deletes: the version is read,
the rule is decided against that state, the version's sidecar is rewritten (durable before
the row, as for every write), then the row is updated in place with a fresh seq and a guard
on the seq that was read, so a concurrent writer outside the lock (an overwrite of the null
version) is noticed and the change is decided again. last_modified never changes; lock
changes stamp lock_updated_at, tag and ACL changes tags_updated_at (never older than, nor equal
to, the stamp they replace: `lww.stamp_write`, so a node whose clock lags still orders its
change after the one it saw). A new version's tags (PutObject, CopyObject, a completed
upload) leave tags_updated_at None: they are the write's, ordered by its last_modified.
Never touches HTTP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from twisted.logger import Logger

from objstore.blobs.sidecar import record_to_sidecar
from objstore.blobs.store import BlobStore
from objstore.convergence.lww import stamp_write
from objstore.engine import lock_rules
from objstore.engine.buckets import require_bucket
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind
from objstore.engine.outbox import OutboxDelivery, OutboxKeyword, note_for
from objstore.engine.versioning import (
    MISSING_LOCK_CONFIG,
    ActionAuthority,
    KeyLocks,
    VersionPage,
    bypass_allowed,
    find_version,
    list_version_page,
    listing_fetch,
)
from objstore.errors import S3Error
from objstore.meta.listing_queries import ListingEntry
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import RecordNotFound, RowChanged
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

log = Logger()

CHANGE_ATTEMPTS = 5

# (current version, now) -> the changed version; raises S3Error to refuse.
Decision = Callable[[ObjectRecord, float], Awaitable[ObjectRecord]]


class VersionService:
    def __init__(
        self,
        meta: MetaStore,
        blobs: BlobStore,
        io: Runner,
        *,
        clock: Callable[[], float],
        locks: KeyLocks,
        authority: ActionAuthority | None = None,
        changes: ChangeHook | None = None,
        outbox: OutboxDelivery | None = None,
    ) -> None:
        self._meta = meta
        self._outbox = outbox  # the durable outbox: a tag or lock change's entry
        self._changes = changes or ChangeHook()
        self._blobs = blobs
        self._io = io
        self._clock = clock
        self._locks = locks
        self._authority = authority

    async def _bucket(self, name: str) -> BucketRecord:
        return await require_bucket(self._meta, name)

    async def list_versions(
        self, bucket_name: str, *, prefix: str, delimiter: str, key_marker: str,
        version_marker: str, max_keys: int,
    ) -> VersionPage[ListingEntry]:
        """One page of ListObjectVersions (NoSuchBucket first)."""
        await self._bucket(bucket_name)
        return await list_version_page(
            listing_fetch(self._meta, bucket_name, delimiter), prefix=prefix, delimiter=delimiter,
            key_marker=key_marker, version_marker=version_marker, max_keys=max_keys)

    async def lock_bucket(self, name: str) -> BucketRecord:
        """The bucket of a retention or legal-hold request, which must have object lock
        (InvalidRequest otherwise, before the key is even looked at, as on AWS)."""
        bucket = await self._bucket(name)
        if not bucket.object_lock:
            raise S3Error("InvalidRequest", MISSING_LOCK_CONFIG)
        return bucket

    # -- the changes ---------------------------------------------------------------------
    async def put_retention(
        self, caller: Caller, bucket_name: str, key: str, version_id: str | None,
        retention: lock_rules.Retention, *, bypass_governance: bool,
    ) -> ObjectRecord:
        bucket = await self.lock_bucket(bucket_name)

        async def decide(record: ObjectRecord, now: float) -> ObjectRecord:
            problem = lock_rules.future_date_problem(retention.until, now)
            if problem:
                raise S3Error("InvalidArgument", problem)
            may_bypass = await bypass_allowed(self._authority, caller.principal, record, now,
                                              bypass_governance)
            reason = lock_rules.may_change_retention(record, retention, now,
                                                     bypass_governance, may_bypass)
            if reason is not None:
                raise S3Error("AccessDenied", f"Access Denied: {reason}.")
            return lock_rules.with_retention(record, retention, now)

        return await self._change(caller, ChangeKind.LOCK_CHANGED, bucket, key, version_id,
                                  decide)

    async def put_legal_hold(
        self, caller: Caller, bucket_name: str, key: str, version_id: str | None, status: str
    ) -> ObjectRecord:
        bucket = await self.lock_bucket(bucket_name)

        async def decide(record: ObjectRecord, now: float) -> ObjectRecord:
            return lock_rules.with_legal_hold(record, status, now)

        return await self._change(caller, ChangeKind.LOCK_CHANGED, bucket, key, version_id,
                                  decide)

    async def put_tags(
        self, caller: Caller, bucket_name: str, key: str, version_id: str | None,
        tags: dict[str, str],
    ) -> ObjectRecord:
        """Replace the tag set of a version (an empty set removes every tag)."""
        bucket = await self._bucket(bucket_name)

        async def decide(record: ObjectRecord, now: float) -> ObjectRecord:
            return replace(record, tags=dict(tags),
                           tags_updated_at=stamp_write(now, record.tags_updated_at))

        return await self._change(caller, ChangeKind.TAGS_CHANGED, bucket, key, version_id,
                                  decide)

    async def put_acl(
        self, caller: Caller, bucket_name: str, key: str, version_id: str | None,
        acl: str | None,
    ) -> ObjectRecord:
        """Replace the ACL of a version (`Acl.to_json`; None: the owner's alone). The
        change stamps tags_updated_at, the row's stamp for sub-resource changes."""
        bucket = await self._bucket(bucket_name)

        async def decide(record: ObjectRecord, now: float) -> ObjectRecord:
            return replace(record, acl=acl,
                           tags_updated_at=stamp_write(now, record.tags_updated_at))

        return await self._change(caller, ChangeKind.ACL_CHANGED, bucket, key, version_id,
                                  decide)

    # -- the common path -----------------------------------------------------------------
    async def _change(
        self, caller: Caller, kind: ChangeKind, bucket: BucketRecord, key: str,
        version_id: str | None, decide: Decision,
    ) -> ObjectRecord:
        """Decide and store the change of one version under its key lock, then report it
        (the one place this service does)."""
        async def attempts() -> ObjectRecord:
            for _ in range(CHANGE_ATTEMPTS):
                record = await find_version(self._meta, bucket.name, key, version_id)
                changed = await decide(record, self._clock())
                note = await note_for(self._outbox, caller, kind, bucket.name)
                stored = await self._store(record, changed, note)
                if stored is not None:
                    return stored
            raise S3Error("ConditionalRequestConflict")

        stored = await self._locks.run(bucket.name, key, attempts)
        await self._changes.committed(Change(kind, caller, bucket.name, key, stored.version_id,
                                             stored))
        return stored

    async def _store(self, record: ObjectRecord, changed: ObjectRecord,
                     note: OutboxKeyword) -> ObjectRecord | None:
        """Sidecar first, then the guarded row update; None when the row moved on (the
        old sidecar is put back: the change did not happen)."""
        await self._write_sidecar(changed)
        try:
            return await self._meta.update_object(changed, record.seq, **note)
        except (RowChanged, RecordNotFound):
            await self._restore_sidecar(record)
            return None
        except BaseException:
            await self._restore_sidecar(record)
            raise

    async def _write_sidecar(self, record: ObjectRecord) -> None:
        if record.blob_id is not None:
            await self._io.run(self._blobs.write_sidecar, record.blob_id,
                               record_to_sidecar(record))

    async def _restore_sidecar(self, record: ObjectRecord) -> None:
        """Put back the sidecar of a version whose change did not commit. When a concurrent
        overwrite replaced the version, the sidecar written for it is an orphan that loses
        to the newer one in `recover` and that `check --repair` reclaims."""
        try:
            current = await self._meta.get_object(record.bucket, record.key,
                                                  record.version_id)
            if current is not None and current.blob_id == record.blob_id:
                await self._write_sidecar(current)
        except Exception:
            log.failure("could not restore the sidecar of {bucket}/{key}@{version}",
                        bucket=record.bucket, key=record.key, version=record.version_id)
