"""Object use cases: store, copy, read, delete, list.

The write path is the durability contract (DESIGN invariant 1): the received body becomes a
blob with its sidecar (fsynced, on the IO pool), then the metadata row is committed, then
blobs the write made unreachable are removed, then the change is reported to the change hook
(engine/changes.py: audit and cluster fan-out; events next), so no write can bypass them;
quotas are checked inside the writing transaction. `BlobFiles` is that file work, shared
with the multipart service: one way to store a body (object or part) and to remove blobs.
A body is an `UploadedBody` (blobs/writer.py), never an HTTP type; object bytes are read
through `BlobReader`s (blobs/reader.py) this service makes.

Versioning: a write gets a UUID version on an Enabled bucket and the null version
otherwise; a delete without a version id removes the null version of an unversioned bucket
and inserts a delete marker on a versioned one (a marker is a row with a sidecar-only blob,
so `recover` rebuilds it); a delete with a version id removes that version for good. Every
path that deletes or overwrites an existing version asks the object lock rules first
(`lock_rules.may_delete`), and permanent deletes run under the per-key lock with a seq
guard, so a retention or legal hold committed meanwhile is never ignored. A permanent
delete is durable at its row's COMMIT (its sidecar was withdrawn before), so its files go
after the answer (engine/removals.py); concurrent single deletes run their read, their
withdrawal and their row delete as shared batches (engine/coalesce.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import Deferred, DeferredSemaphore, gatherResults
from twisted.logger import Logger

from objstore.blobs.manifests import WithdrawnVersion
from objstore.blobs.plan import IDENTITY, StagePlan, plan_of
from objstore.blobs.reader import BlobReader, ChunkStream, ReadAheadStream
from objstore.blobs.segments import Segment, plan_segments
from objstore.blobs.sidecar import record_to_sidecar, upload_to_record
from objstore.blobs.store import BlobStore, PartsPin, SmallCommit, new_blob_id
from objstore.blobs.writer import HeldBytes, UploadedBody
from objstore.crypto.customer_key import (
    NO_COPY_KEYS,
    SSE_C,
    CopyKeys,
    CustomerKey,
    etag_of,
)
from objstore.dataclass_replace import fast_replace
from objstore.engine.blob_repair import NO_REPAIR, BlobRepair, repair_after_missing
from objstore.engine.buckets import require_bucket
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind
from objstore.engine.coalesce import Coalescer
from objstore.engine.lock_rules import LockRequest, may_delete
from objstore.engine.names import key_problem
from objstore.engine.outbox import OutboxDelivery, note_for
from objstore.engine.quota import QUOTA_RULE
from objstore.engine.removals import RemovalQueue, versions_of
from objstore.engine.replicator import NO_GATE, WriteGate
from objstore.engine.stage_plan import NO_BUCKET_STAGES, BucketStageSettings, decide_stage_plan
from objstore.engine.versioning import (
    DISABLED,
    ENABLED,
    ActionAuthority,
    KeyLocks,
    born_locked,
    check_deletable,
    check_version_id,
    find_version,
    is_valid_version_id,
    new_version_id,
    refuse_locked_overwrite,
)
from objstore.errors import S3Error
from objstore.meta.listing_queries import ListingEntry
from objstore.meta.object_write_queries import VersionDelete, VersionDeleteOutcome
from objstore.meta.records import (
    NULL_VERSION,
    BucketRecord,
    DeleteResult,
    ObjectRecord,
    UploadRecord,
    WritePrecondition,
)
from objstore.meta.store import PreconditionNotMet, RecordNotFound, RowChanged
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

log = Logger()

MAX_COPY_SOURCE_BYTES = 5 * 1024**3
PROVISIONAL_SIDECAR_KIND = "copy-in-progress"
# A guarded delete retries when the version changed between its read and its delete.
GUARD_ATTEMPTS = 5
# Reads this small happen on the calling thread (see `read_bytes`): the size of one chunk
# of a streamed GET, whose chunks are read on the IO pool.
INLINE_READ_BYTES = 256 * 1024
# Bodies kept in memory committed in one batch (`BlobFiles`): at most this many, and at
# most this many bytes (a body up to 1 MiB is kept in memory, blobs/writer.py).
SMALL_BATCH_ITEMS = 32
SMALL_BATCH_BYTES = 4 * 1024 * 1024
# Sidecar-only blob ids (delete markers) created in one batch: at most this many.
SIDECAR_BATCH_ITEMS = 64
# Delete markers of one DeleteObjects inserted at once (a group commit takes 64 writes).
MARKER_CONCURRENCY = 64


class BlobFiles:
    """The engine's file work on the IO pool: a received body stored as a blob with its
    sidecar, and blobs a commit made unreachable removed.

    Bodies kept in memory (every small PUT) that arrive while others are being committed
    are committed together: one hand-off to the pool and one sync for the batch
    (`BlobStore.commit_bytes_many`), where each used to take a pool thread of its own
    that then waited on the sync barrier with the others; sidecar-only blob ids (delete
    markers, completed multipart objects, replicated markers) likewise
    (`create_sidecars_many`). A body or sidecar alone is committed at once, as before."""

    def __init__(self, blobs: BlobStore, io: Runner) -> None:
        self._blobs = blobs
        self._io = io
        self._removals = RemovalQueue(blobs, io)
        self._small: Coalescer[SmallCommit, None] = Coalescer(
            self._commit_small, max_items=SMALL_BATCH_ITEMS,
            weigh=lambda item: len(item[0]), max_weight=SMALL_BATCH_BYTES)
        self._sidecars: Coalescer[tuple[str, dict[str, Any]], None] = Coalescer(
            self._create_sidecars, max_items=SIDECAR_BATCH_ITEMS)

    async def store(self, body: UploadedBody, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Make `body` durable as blob `blob_id` (taken from it on this thread, committed
        on the pool: the body may be closed meanwhile)."""
        held = body.detach()
        if isinstance(held, HeldBytes):
            await self._small.submit((held.data, blob_id, sidecar))
        else:
            await self._io.run(self._blobs.commit, held, blob_id, sidecar)

    async def _commit_small(self, items: list[SmallCommit]) -> list[None | Exception]:
        outcomes: list[None | Exception] = await self._io.run(
            self._blobs.commit_bytes_many, items)
        return outcomes

    async def store_sidecar(self, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Make durable a blob id that holds only a sidecar (a delete marker, a composite
        object whose bytes are its parts'): one sync for a new id (shared with the others
        that arrive meanwhile), a replacement of the sidecar for one that has it (a
        replicated row written again)."""
        await self._sidecars.submit((blob_id, sidecar))

    async def _create_sidecars(self, items: list[tuple[str, dict[str, Any]]]
                               ) -> list[None | Exception]:
        outcomes: list[None | Exception] = await self._io.run(
            self._blobs.create_sidecars_many, items)
        return outcomes

    async def restamp(self, written: ObjectRecord, stored: ObjectRecord) -> None:
        """After a commit that raised the version's stamp past what it replaces (the store's
        `insert_latest` with `restamp`): the sidecar written before it, with the clock's
        stamp, is written again with the stored one, so that `recover` rebuilds the row as
        committed. Not when nothing was raised (the usual case: no file work). A version a
        concurrent write already replaced has no files left to rewrite."""
        if stored.last_modified == written.last_modified or stored.blob_id is None:
            return
        try:
            await self._io.run(self._blobs.write_sidecar, stored.blob_id,
                               record_to_sidecar(stored))
        except OSError:
            log.failure("could not restamp the sidecar of {blob_id}", blob_id=stored.blob_id)

    async def withdraw(self, record: ObjectRecord) -> None:
        """Before a permanent delete commits: the version's sidecar moves aside, durably,
        so that `recover` never rebuilds it from bytes a crash leaves behind, and is kept
        until the delete is resolved (blobs/store.py)."""
        if record.blob_id is not None:
            await self._io.run(self._blobs.withdraw_sidecar, record.blob_id)

    async def reinstate(self, record: ObjectRecord) -> None:
        """The sidecar of a version whose delete did not commit, written back from its
        row (and the withdrawn one dropped)."""
        if record.blob_id is not None:
            await self._io.run(self._blobs.reinstate_sidecar, record.blob_id,
                               record_to_sidecar(record))

    async def forget(self, record: ObjectRecord) -> None:
        """Remove a version's sidecar for good and keep its bytes (no delete is in
        progress: a replicated row that lost)."""
        if record.blob_id is not None:
            await self._io.run(self._blobs.remove_sidecar, record.blob_id)

    async def store_upload(self, upload: UploadRecord) -> None:
        """Make an open upload's record durable (before its row: see blobs/store.py)."""
        await self._io.run(self._blobs.write_upload_record, upload.upload_id,
                           upload_to_record(upload))

    async def remove_upload(self, upload_id: str) -> None:
        """Remove an upload's record durably (before an abort's row delete, after a
        completion's commit)."""
        await self._io.run(self._blobs.remove_upload_record, upload_id)

    async def delete(self, blob_ids: Sequence[str]) -> None:
        """Remove blobs no reader can be streaming (parts of an open upload, a blob whose
        row was never committed)."""
        for blob_id in blob_ids:
            try:
                await self._io.run(self._blobs.delete, blob_id)
            except OSError:
                # The row is gone; the file is an orphan `objstore check --repair` reclaims.
                log.failure("could not delete unreachable blob {blob_id}", blob_id=blob_id)

    async def delete_version(self, blob_id: str | None, part_ids: Sequence[str] = ()) -> None:
        """Remove the files of one version no row references any more: its own blob and
        its parts'. Parts a streamed read holds stay until it is done
        (`BlobStore.delete_version`)."""
        if blob_id is None and not part_ids:
            return
        try:
            await self._io.run(self._blobs.delete_version, blob_id, part_ids)
        except OSError:
            log.failure("could not delete the unreachable blobs of {blob_id}",
                        blob_id=blob_id)

    async def withdraw_many(self, records: Sequence[ObjectRecord]) -> None:
        """`withdraw` of many versions (a batch delete), with one sync of the data volume
        (blobs/store.py `withdraw_sidecars`)."""
        blob_ids = [record.blob_id for record in records if record.blob_id is not None]
        if blob_ids:
            await self._io.run(self._blobs.withdraw_sidecars, blob_ids)

    async def withdraw_batch(self, bucket: str, records: Sequence[ObjectRecord]) -> str | None:
        """`withdraw` of a batch delete's versions of `bucket`: ONE manifest naming them,
        durable on return, their sidecars left in place (blobs/manifests.py). Returns its
        name, for `delete_versions_later` or `drop_manifest`; None when each sidecar was
        withdrawn on its own instead (a full volume: `BlobStore.withdraw_versions`) or no
        version has a blob."""
        versions = [WithdrawnVersion(record.blob_id, bucket, record.key, record.version_id,
                                     tuple(part.blob_id for part in record.parts))
                    for record in records if record.blob_id is not None]
        if not versions:
            return None
        return await self._io.run(self._blobs.withdraw_versions, bucket, versions)

    async def moved_aside(self, records: Sequence[ObjectRecord]) -> list[ObjectRecord]:
        """Those of `records` whose sidecar is in `deleting/` (moved by a withdrawal)."""
        moved = set(await self._io.run(self._blobs.withdrawn_ids))
        return [record for record in records if record.blob_id in moved]

    async def drop_manifest(self, manifest: str) -> None:
        """A batch delete that removed nothing is resolved: its manifest goes."""
        await self._io.run(self._blobs.drop_manifest, manifest)

    async def keep_or_remove(self, record: ObjectRecord, current: ObjectRecord | None, *,
                             in_place: bool) -> None:
        """A version of a batch delete that the batch did not remove: whole when `current`
        (its row now) still holds its blob (`in_place`: withdrawn by a manifest, its
        sidecar never moved; else it is written back), otherwise no row holds it and its
        files go. Raises what fails."""
        if current is not None and current.blob_id == record.blob_id:
            if not in_place and current.blob_id is not None:
                await self._io.run(self._blobs.reinstate_sidecar, current.blob_id,
                                   record_to_sidecar(current))
        elif record.blob_id is not None or record.parts:
            await self._io.run(self._blobs.delete_version, record.blob_id,
                               [part.blob_id for part in record.parts],
                               sidecar_withdrawn=not in_place)

    def delete_versions_later(self, removed: Sequence[ObjectRecord], *,
                              manifest: str | None = None,
                              drop_manifest: bool = True) -> Deferred[None]:
        """Remove the files of versions whose rows a commit removed (`delete_version` of
        each) after the answer: the removals asked for while an IO job runs share the next
        one (engine/removals.py). The Deferred fires at once unless the queue is full,
        then once it has room: the caller awaits it before it answers. `manifest`: the
        versions are a batch's, withdrawn by it, which goes after them (unless not
        `drop_manifest`: a version of it is in doubt). A crash before they end leaves the
        withdrawn sidecars (or the manifest) to `settle_withdrawn`."""
        return self._removals.remove(
            versions_of(removed), in_place=manifest is not None,
            then_drop=manifest if drop_manifest else None)

    async def delete_replaced(self, orphaned: Sequence[str]) -> None:
        """Remove the files of the version a commit replaced, given as
        `PutResult.orphaned_blob_ids` of an object write: its own blob first (a composite
        always has one, holding its sidecar), then its parts (object_write_queries
        `insert_latest`)."""
        if orphaned:
            await self.delete_version(orphaned[0], orphaned[1:])


@dataclass(frozen=True)
class ObjectAttrs:
    """What a client sets on a new object besides its bytes."""

    content_type: str = "binary/octet-stream"
    user_metadata: dict[str, str] = field(default_factory=dict)
    system_headers: dict[str, str] = field(default_factory=dict)
    storage_class: str = "STANDARD"
    checksums: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    lock: LockRequest = LockRequest()
    acl: str | None = None  # the version's ACL (Acl.to_json); None: the owner's alone


@dataclass(frozen=True)
class DeleteOutcome:
    """What a DeleteObject did: the version id to report (None on an unversioned bucket),
    and whether that version is a delete marker (one inserted, or one removed by id)."""

    version_id: str | None
    delete_marker: bool = False


# The Caller detail naming the version id a replication source sent with a replica
# (x-objstore-replication-version-id; replication/service.py sets it).
REPLICA_VERSION_DETAIL = "replication_version_id"


async def replica_version_id(meta: MetaStore, caller: Caller, bucket: BucketRecord, key: str,
                             fresh: str) -> str:
    """The version id of a new version: a replication source's own (a replica keeps its
    source's version id on a versioning-Enabled bucket, so version deletes can follow it)
    unless a version of that id exists here already; else `fresh`."""
    carried = caller.details.get(REPLICA_VERSION_DETAIL)
    if (carried is None or bucket.versioning != ENABLED or carried == NULL_VERSION
            or not is_valid_version_id(carried)):
        return fresh
    if await meta.get_object(bucket.name, key, carried) is not None:
        return fresh
    return carried


class ReplicationStamp(Protocol):
    """The replication status a new version is born with (replication/service.py)."""

    async def status(self, caller: Caller, record: ObjectRecord) -> str | None: ...


class ObjectService:
    def __init__(
        self,
        meta: MetaStore,
        blobs: BlobStore,
        io: Runner,
        *,
        clock: Callable[[], float],
        authority: ActionAuthority | None = None,
        locks: KeyLocks | None = None,
        changes: ChangeHook | None = None,
        gate: WriteGate = NO_GATE,
        repair: BlobRepair = NO_REPAIR,
        outbox: OutboxDelivery | None = None,
        replication: ReplicationStamp | None = None,
    ) -> None:
        self._meta = meta
        self._outbox = outbox  # the durable outbox: each write's entry, in its transaction
        self._replication = replication  # x-amz-replication-status of new versions
        self._changes = changes or ChangeHook()
        self._gate = gate  # asked before every local write (the cluster write gate)
        self._repair = repair  # asked when a read finds a blob missing (cluster peers)
        self._blobs = blobs
        self._files = BlobFiles(blobs, io)
        self._io = io
        self._clock = clock
        self._authority = authority
        self._locks = locks if locks is not None else KeyLocks()
        # The three steps of concurrent permanent single deletes, each run as batches
        # (engine/coalesce.py): the reads of the versions, the withdrawals of their
        # sidecars (one sync), the deletes of their rows (one transaction).
        self._version_reads: Coalescer[tuple[str, str, str], ObjectRecord | None] = (
            Coalescer(self._read_versions))
        self._withdrawals: Coalescer[ObjectRecord, None] = Coalescer(self._withdraw_versions)
        self._row_deletes: Coalescer[VersionDelete, VersionDeleteOutcome] = (
            Coalescer(self._delete_rows))

    async def _bucket(self, name: str) -> BucketRecord:
        return await require_bucket(self._meta, name)

    async def put(
        self,
        caller: Caller,
        bucket_name: str,
        key: str,
        body: UploadedBody,
        attrs: ObjectAttrs,
        precondition: WritePrecondition | None = None,
        *,
        integrity: bool = True,
    ) -> ObjectRecord:
        """Store a new object (or version). With a precondition (If-None-Match: *,
        If-Match) the check happens inside the writing transaction; when it fails the blob
        just written is removed and nothing else changes. `integrity`: the request carried
        Content-MD5 or an x-amz-checksum-* value (required when object lock applies)."""
        check_key(key)
        bucket = await self._bucket(bucket_name)
        self._gate.check_write(body.length)
        checksums = dict(attrs.checksums)
        record = self._new_record(caller, bucket, key, body.length, body.md5_hex, attrs,
                                  checksums)
        record = fast_replace(record, version_id=await self._version_for(
            caller, bucket, key, record.version_id))
        record = await self._prepare_version(bucket, record, attrs, integrity)
        staged = body.stage_fields(record.bucket, record.key, record.version_id)
        if staged is not None:  # the body's stage plan, recorded (blobs/plan.py)
            record = with_stage_fields(record, staged)
        assert record.blob_id is not None
        await self._files.store(body, record.blob_id, record_to_sidecar(record))
        return await self._commit(caller, record, precondition)

    async def _prepare_version(
        self, bucket: BucketRecord, record: ObjectRecord, attrs: ObjectAttrs, integrity: bool
    ) -> ObjectRecord:
        """The lock state the version is born with; refused when it would overwrite a
        locked null version."""
        record = await born_locked(self._meta, bucket, record, attrs.lock, integrity=integrity)
        await refuse_locked_overwrite(self._meta, bucket, record.key, record.last_modified)
        return record

    async def _version_for(self, caller: Caller, bucket: BucketRecord, key: str,
                           fresh: str) -> str:
        return await replica_version_id(self._meta, caller, bucket, key, fresh)

    def _new_record(
        self, caller: Caller, bucket: BucketRecord, key: str, size: int, etag: str,
        attrs: ObjectAttrs, checksums: dict[str, str],
    ) -> ObjectRecord:
        return ObjectRecord(
            bucket=bucket.name,
            key=key,
            version_id=new_version_id(bucket),
            blob_id=new_blob_id(),
            size=size,
            etag=etag,
            last_modified=self._clock(),
            owner_id=caller.principal.user_id,
            owner_name=caller.principal.username,
            content_type=attrs.content_type,
            user_metadata=dict(attrs.user_metadata),
            system_headers=dict(attrs.system_headers),
            storage_class=attrs.storage_class,
            checksums=checksums,
            checksum_type="FULL_OBJECT" if checksums else None,
            tags=dict(attrs.tags),
            acl=attrs.acl,
        )

    async def _commit(
        self, caller: Caller, record: ObjectRecord, precondition: WritePrecondition | None
    ) -> ObjectRecord:
        """Commit the row of a blob that is already durable; on any failure the blob goes
        (nothing references it), after success the blobs the write replaced go and the
        change is reported."""
        assert record.blob_id is not None
        blob_id = record.blob_id
        try:
            if self._replication is not None:
                record = fast_replace(record, replication_status=await
                                      self._replication.status(caller, record))
            note = await note_for(self._outbox, caller, ChangeKind.DELETE_MARKER_WRITTEN
                                  if record.is_delete_marker else ChangeKind.OBJECT_WRITTEN,
                                  record.bucket)
            result = await self._meta.put_object(record, precondition, usage_rule=QUOTA_RULE,
                                                 **note)
        except BaseException as error:
            await self._files.delete([blob_id])
            if isinstance(error, PreconditionNotMet):
                raise precondition_error(error.reason, record.key) from None
            if isinstance(error, RecordNotFound):
                raise S3Error("NoSuchBucket", BucketName=record.bucket) from None
            raise
        await self._files.restamp(record, result.record)
        await self._files.delete_replaced(result.orphaned_blob_ids)
        kind = (ChangeKind.DELETE_MARKER_WRITTEN if result.record.is_delete_marker
                else ChangeKind.OBJECT_WRITTEN)
        await self._report(kind, caller, result.record)
        return result.record

    async def _report(self, kind: ChangeKind, caller: Caller, record: ObjectRecord, *,
                      deleted_at: float | None = None) -> None:
        """The one place this service reports a committed change (a deletion with the
        stamp of the tombstone it left)."""
        await self._changes.committed(Change(kind, caller, record.bucket, record.key,
                                             record.version_id, record,
                                             deleted_at=deleted_at))

    async def copy(
        self,
        caller: Caller,
        source: ObjectRecord,
        bucket_name: str,
        key: str,
        attrs: ObjectAttrs,
        precondition: WritePrecondition | None = None,
        plan: StagePlan = IDENTITY,
        keys: CopyKeys = NO_COPY_KEYS,
    ) -> ObjectRecord:
        """Copy the bytes of `source` into a new object, on the IO pool. `keys`: the
        customer keys of an SSE-C source or destination (checked by the caller). A plain source is
        copied by the kernel and keeps its ETag; a composite (multipart) source becomes a
        plain object whose ETag is the MD5 of its bytes. Full-object checksums describe the
        bytes and travel with them; composite checksums (of parts) do not. `plan`: the
        destination's stages (`copy_plan`); a source or destination with stages passes
        through a reader (the source's) and a writer (the destination's), unless both have
        the same SSE-S3 plan: then the stored bytes are copied and the data key re-wrapped."""
        check_key(key)
        bucket = await self._bucket(bucket_name)
        if source.size > MAX_COPY_SOURCE_BYTES:
            raise S3Error("InvalidRequest", "The specified copy source is larger than the "
                          f"maximum allowable size for a copy source: {MAX_COPY_SOURCE_BYTES}")
        self._gate.check_write(source.size)
        checksums = {} if source.checksum_type == "COMPOSITE" else dict(source.checksums)
        # An SSE-C source's ETag is not the MD5 of its bytes: learnt while copying.
        etag = "" if source.parts or source.encryption_algorithm == SSE_C else source.etag
        record = self._new_record(caller, bucket, key, source.size, etag, attrs, checksums)
        record = await self._prepare_version(bucket, record, attrs, True)
        segments = plan_segments(source, 0, source.size)
        try:
            record = await self._io.run(self._copy_blob, segments, record, source, plan, keys)
        except FileNotFoundError:
            if not await self.repaired(source):
                raise SourceChanged(source) from None
            try:
                record = await self._io.run(self._copy_blob, segments, record, source, plan,
                                            keys)
            except FileNotFoundError:
                raise SourceChanged(source) from None
        return await self._commit(caller, record, precondition)

    @property
    def encryption_key_id(self) -> str | None:
        """The master key new encrypted objects use (None: encryption is not enabled)."""
        return self._blobs.stages.key_id

    @property
    def kms_key_ids(self) -> tuple[str, ...]:
        """Every master key version: each names the node's SSE-KMS key (crypto/kms_key.py)."""
        return self._blobs.stages.key_ids

    def copy_plan(self, headers: Mapping[str, str],
                  bucket: BucketStageSettings = NO_BUCKET_STAGES,
                  customer: bool = False) -> StagePlan:
        """The stages of a CopyObject's destination, from its headers (lower-case names)
        and the destination bucket's settings; `customer`: an SSE-C destination."""
        return decide_stage_plan("CopyObject", headers, bucket,
                                 key_id=self._blobs.stages.key_id, customer=customer,
                                 key_ids=self._blobs.stages.key_ids)

    def _copy_blob(self, segments: list[Segment], record: ObjectRecord,
                   source: ObjectRecord, plan: StagePlan,
                   keys: CopyKeys = NO_COPY_KEYS) -> ObjectRecord:
        """(IO thread) The new blob and its sidecar, durable. Without a known ETag the bytes
        are hashed while copied, under a provisional sidecar that `recover` ignores (a
        crash leaves an orphan for `check --repair`, never an object with a wrong ETag);
        the real sidecar replaces it before the row can be committed."""
        assert record.blob_id is not None
        if (not plan.identity and not source.parts
                and replace(plan, compression_level=None) == plan_of(source)):
            rewrapped = self._copy_rewrapped(segments, record, source)
            if rewrapped is not None:
                return rewrapped
        writer = None
        if not plan.identity:
            writer = self._blobs.stages.writer(self._blobs.tmp_dir, plan, memory_limit=0,
                                               customer_key=keys.destination)
            staged = writer.stage_fields(record.bucket, record.key, record.version_id)
            if record.etag:
                record = with_stage_fields(record, staged or {})
            else:  # the ETag is learnt while copying
                record = replace(record, **(staged or {}))
        assert record.blob_id is not None
        sidecar = record_to_sidecar(record)
        want_md5 = not record.etag
        if want_md5:
            sidecar["kind"] = PROVISIONAL_SIDECAR_KIND
        md5 = self._blobs.copy_segments(segments, record.blob_id, sidecar, want_md5=want_md5,
                                        source=source, writer=writer, source_key=keys.source)
        if md5 is None:
            return record
        blob_id = record.blob_id
        record = with_stage_fields(record, {"etag": md5})
        try:
            self._blobs.write_sidecar(blob_id, record_to_sidecar(record))
        except BaseException:
            self._blobs.delete(blob_id)
            raise
        return record

    def _copy_rewrapped(self, segments: list[Segment], record: ObjectRecord,
                        source: ObjectRecord) -> ObjectRecord | None:
        """(IO thread) A whole-object copy between equal plans (SSE-S3 under the same
        master key, compressed or not; compressed only): the stored bytes copied by the
        kernel, the source's data key wrapped again for the copy (a copy onto itself with
        new metadata rewrites no byte). None when the plan does not allow it."""
        fields = self._blobs.stages.rewrapped(source, record.bucket, record.key,
                                              record.version_id)
        if fields is None or source.blob_id is None or record.blob_id is None:
            return None
        if [(s.blob_id, s.offset, s.length) for s in segments] != [
                (source.blob_id, 0, source.size)]:
            return None
        blob_id = record.blob_id
        record = replace(record, **fields)
        if source.compression is None:
            size = self._blobs.stages.stored_size(source)
        else:  # a compressed blob's stored length is its file's
            found = self._blobs.blob_size(source.blob_id)
            if found is None:
                raise FileNotFoundError(source.blob_id)
            size = found
        stored = [Segment(source.blob_id, 0, size)]
        self._blobs.copy_segments(stored, blob_id, record_to_sidecar(record), want_md5=False)
        return record

    async def head(
        self, bucket_name: str, key: str, version_id: str | None = None
    ) -> ObjectRecord:
        return (await self.lookup(bucket_name, key, version_id))[1]

    async def lookup(
        self, bucket_name: str, key: str, version_id: str | None = None, *,
        fresh: bool = False,
    ) -> tuple[BucketRecord, ObjectRecord]:
        """The bucket and the version a read names (see `versioning.find_version` for the
        answers about missing versions and delete markers). For reads that only answer:
        the record may come from the object cache (meta/object_cache.py), unless `fresh`
        (a read whose version vanished looks again)."""
        bucket = await self._bucket(bucket_name)
        return bucket, await find_version(self._meta, bucket_name, key, version_id,
                                          cached=not fresh)

    def reader(self, record: ObjectRecord, start: int = 0, length: int | None = None,
               customer_key: CustomerKey | None = None) -> BlobReader:
        """A reader of bytes [start, start + length) of the object (all of it by default);
        nothing is opened yet. `customer_key`: an SSE-C object's, checked by the caller."""
        if length is None:
            length = record.size - start
        return self._blobs.reader(plan_segments(record, start, length), record, customer_key)

    async def read_bytes(self, record: ObjectRecord, start: int, length: int,
                         customer_key: CustomerKey | None = None) -> bytes:
        """A small object's bytes (or a slice). Up to INLINE_READ_BYTES are read on the
        calling (reactor) thread, like the small GETs they serve, when they are in the page
        cache (a pool round trip would cost more than the read itself); those not cached
        and larger slices are read on the IO pool. Raises VersionVanished when a write replaced or
        removed the version since it was looked up."""
        try:
            return await self._read_all(record, start, length, customer_key)
        except FileNotFoundError:
            pass
        if not await self.repaired(record):
            raise await self._vanished(record)
        try:
            return await self._read_all(record, start, length, customer_key)
        except FileNotFoundError:
            raise await self._vanished(record) from None

    async def _read_all(self, record: ObjectRecord, start: int, length: int,
                        customer_key: CustomerKey | None = None) -> bytes:
        """Bytes a small GET answers: read on the reactor when the page cache holds them
        (or that can not be told), on the IO pool when they would come from the disk, so
        that a cold small object never holds up every other connection."""
        reader = self.reader(record, start, length, customer_key)
        if length <= INLINE_READ_BYTES:
            try:
                cached = reader.in_page_cache()
            except BaseException:
                reader.close()
                raise
            if cached is not False:
                return reader.read_all()
        return await self._io.run(reader.read_all)

    async def stream(self, record: ObjectRecord, start: int, length: int,
                     customer_key: CustomerKey | None = None) -> ChunkStream | ReadAheadStream:
        """Bytes [start, start + length) as chunks read on the IO pool, for a streamed
        response. Its blobs are held before the answer starts, so a delete that commits
        after this point no longer takes the bytes away: the first blob is opened now, on
        the calling thread (one open call), and a range over several parts pins them all
        (`BlobStore.pin_parts`). Raises VersionVanished as `read_bytes`."""
        segments = plan_segments(record, start, length)
        several = bool(segments) and segments[0].blob_id != segments[-1].blob_id
        if several and self._repair.enabled:
            # A part missing further on would break the answer half-way: on a cluster
            # node every part of the range is looked for (and repaired) first.
            ids = list(dict.fromkeys(segment.blob_id for segment in segments))
            if not await self._io.run(self._all_present, ids):
                await self.repaired(record)
        try:
            return await self._open_stream(record, segments, several, customer_key)
        except FileNotFoundError:
            pass
        if not await self.repaired(record):
            raise await self._vanished(record)
        try:
            return await self._open_stream(record, segments, several, customer_key)
        except FileNotFoundError:
            raise await self._vanished(record) from None

    async def _open_stream(self, record: ObjectRecord, segments: list[Segment],
                           several: bool, customer_key: CustomerKey | None = None
                           ) -> ChunkStream | ReadAheadStream:
        reader = self._blobs.reader(segments, record, customer_key)
        pin: PartsPin | None = None
        try:
            if several:
                pin = self._blobs.pin_parts([part.blob_id for part in record.parts])
            reader.open()
        except BaseException:
            if pin is not None:
                await self._io.run(pin.release)
            raise
        release = pin.release if pin else None
        if plan_of(record).identity:
            return ChunkStream(reader, self._io, release=release)
        # Staged bytes cost CPU to open: larger chunks, opened ahead of the sending.
        return ReadAheadStream(reader, self._io, release=release)

    def _all_present(self, blob_ids: Sequence[str]) -> bool:
        """(IO thread) Whether every one of `blob_ids` has its file here."""
        return all(self._blobs.blob_size(blob_id) is not None for blob_id in blob_ids)

    async def repaired(self, record: ObjectRecord) -> bool:
        """A blob of `record` was found missing: whether the cluster brought it back, so
        the read may start again (`blob_repair.repair_after_missing`)."""
        return await repair_after_missing(self._meta, self._repair, record)

    async def _vanished(self, record: ObjectRecord) -> Exception:
        """The answer to a blob found missing: the version's row changed or went (a write
        won the race; look again), or it still references that blob, which is lost."""
        current = await self._meta.get_object(record.bucket, record.key, record.version_id)
        if current is not None and current.blob_id == record.blob_id:
            return _missing_blob(record)
        return VersionVanished(record)

    async def delete(
        self,
        caller: Caller,
        bucket_name: str,
        key: str,
        version_id: str | None = None,
        *,
        bypass_governance: bool = False,
    ) -> DeleteOutcome:
        """DeleteObject. With a version id: that version (or marker) goes for good, when
        the lock rules allow it; a version that does not exist is no error (as on AWS).
        Without one: an unversioned bucket loses its null version, a versioned one gets a
        new delete marker (on a Suspended bucket the null marker replaces the null
        version). Lock refusals raise AccessDenied; a marker is always allowed."""
        bucket = await self._bucket(bucket_name)
        self._gate.check_write(0)
        if version_id is not None:
            check_version_id(version_id)
            named = version_id
            return await self._locks.run(bucket_name, key, lambda: self._delete_version(
                caller, bucket_name, key, named, bypass_governance))
        if bucket.versioning == DISABLED:
            await self._locks.run(bucket_name, key, lambda: self._delete_version(
                caller, bucket_name, key, NULL_VERSION, bypass_governance))
            return DeleteOutcome(None)
        return await self._locks.run(bucket_name, key, lambda: self._insert_marker(
            caller, bucket, key, bypass_governance))

    async def _delete_version(
        self, caller: Caller, bucket_name: str, key: str, version_id: str,
        bypass_governance: bool,
    ) -> DeleteOutcome:
        """Remove one version after the lock rules allowed it; the delete is guarded by
        the seq that was checked, so a lock change committed in between is seen. The
        version's sidecar is withdrawn before the row goes (and written back when the row
        stays), so that a crash before its blob is removed never brings it back in
        `recover`; a crash between the withdrawal and the commit is resolved at the next
        start (`BlobStore.settle_withdrawn`). Once the row's COMMIT is done the delete is
        durable, so the version's files are removed after the answer, as DeleteObjects'
        are (`delete_versions_later`)."""
        for _ in range(GUARD_ATTEMPTS):
            record = await self._version_reads.submit((bucket_name, key, version_id))
            if record is None:
                return DeleteOutcome(version_id)
            await check_deletable(self._authority, caller.principal, record, self._clock(),
                                  bypass_governance)
            note = await note_for(self._outbox, caller, ChangeKind.VERSION_DELETED,
                                  bucket_name)
            try:
                await self._withdrawals.submit(record)
                result = await self._row_deletes.submit(
                    VersionDelete.of(record, note.get("outbox")))
            except BaseException as error:
                await self._reinstate_if_kept(record)
                if isinstance(error, RowChanged):
                    continue
                raise
            assert isinstance(result, DeleteResult)
            removed = result.removed
            if removed is None or removed.blob_id != record.blob_id:
                await self._reinstate_if_kept(record)
            if removed is not None:
                await self._files.delete_versions_later([removed])
                await self._report(ChangeKind.VERSION_DELETED, caller, removed,
                                   deleted_at=result.deleted_at)
            return DeleteOutcome(version_id, record.is_delete_marker)
        raise S3Error("ConditionalRequestConflict")

    async def _read_versions(self, wanted: list[tuple[str, str, str]]
                             ) -> list[ObjectRecord | None]:
        """(batch step) The versions (bucket, key, version id) of concurrent deletes: one
        read per bucket (`get_object_versions`, point reads on one connection)."""
        found: dict[tuple[str, str, str], ObjectRecord] = {}
        for bucket in dict.fromkeys(bucket for bucket, _, _ in wanted):
            pairs = sorted({(key, version) for named, key, version in wanted
                            if named == bucket})
            for (key, version), record in (
                    await self._meta.get_object_versions(bucket, pairs)).items():
                found[(bucket, key, version)] = record
        return [found.get(each) for each in wanted]

    async def _withdraw_versions(self, records: list[ObjectRecord]) -> list[None]:
        """(batch step) The sidecars of concurrent deletes withdrawn with one sync (an
        error fails them all: each caller then writes its sidecar back)."""
        await self._files.withdraw_many(records)
        return [None] * len(records)

    async def _delete_rows(self, items: list[VersionDelete]
                           ) -> list[VersionDeleteOutcome | Exception]:
        """(batch step) The rows of concurrent deletes, guarded by their seqs: one
        transaction per bucket (`delete_object_versions`); a RowChanged outcome is that
        delete's to retry. A bucket's failed transaction fails its items only."""
        buckets = [item.known.bucket if item.known is not None else "" for item in items]
        assert "" not in buckets, "a row delete without the row it guards"
        outcomes: dict[int, VersionDeleteOutcome | Exception] = {}
        for bucket in dict.fromkeys(buckets):
            mine = [index for index, named in enumerate(buckets) if named == bucket]
            try:
                results: Sequence[VersionDeleteOutcome | Exception] = (
                    await self._meta.delete_object_versions(bucket, [items[i] for i in mine]))
            except Exception as error:
                results = [error] * len(mine)
            outcomes.update(zip(mine, results, strict=True))
        return [outcomes[index] for index in range(len(items))]

    async def delete_many(
        self,
        caller: Caller,
        bucket_name: str,
        requests: Sequence[DeleteRequest],
        *,
        bypass_governance: bool = False,
    ) -> list[DeleteOutcome | Exception]:
        """DeleteObjects: `delete` of each request, with an outcome (or the exception that
        `delete` would raise) per request, in order. Every key's lock is held for the
        batch (taken in sorted order); the versions it removes go in ONE transaction
        (`delete_object_versions`) after ONE withdrawal of their sidecars, and their files
        are removed after the answer. A version whose row changed meanwhile goes through
        `delete`'s own retries; delete markers are inserted MARKER_CONCURRENCY at a time
        (`_insert_markers`), and the requests of a key that a marker request and another
        request of the batch name one by one, in the request's order. Raises only what
        fails the whole batch (no such bucket, a refused write)."""
        bucket = await self._bucket(bucket_name)
        self._gate.check_write(0)
        outcomes: list[DeleteOutcome | Exception | None] = [None] * len(requests)
        marked = bucket.versioning != DISABLED  # a request without a version: a marker
        # A key named by a marker request and by another request of the batch: its
        # requests run one by one in the request's order (a marker and a version delete
        # of one key do not commute).
        counts = Counter(request.key for request in requests)
        in_order = {request.key for request in requests
                    if marked and request.version_id is None and counts[request.key] > 1}
        named: dict[int, str] = {}  # request index -> the version the batch removes
        for index, request in enumerate(requests):
            if request.version_id is not None:
                try:
                    check_version_id(request.version_id)
                except S3Error as error:
                    outcomes[index] = error
                    continue
                if request.key not in in_order:
                    named[index] = request.version_id
            elif not marked:
                named[index] = NULL_VERSION
        names = [(bucket_name, request.key) for index, request in enumerate(requests)
                 if outcomes[index] is None]

        async def under_locks() -> None:
            await self._delete_named(caller, bucket_name, requests, named, outcomes,
                                     bypass_governance)
            await self._insert_markers(caller, bucket, requests, [
                index for index, request in enumerate(requests)
                if outcomes[index] is None and request.version_id is None
                and request.key not in in_order], outcomes, bypass_governance)
            for index, request in enumerate(requests):  # keys in order
                if outcomes[index] is not None:
                    continue
                if request.version_id is None:
                    outcomes[index] = await _outcome_of(self._insert_marker(
                        caller, bucket, request.key, bypass_governance))
                else:
                    outcomes[index] = await _outcome_of(self._delete_version(
                        caller, bucket_name, request.key, request.version_id,
                        bypass_governance))

        await self._locks.run_many(names, under_locks)
        return [outcome if outcome is not None else S3Error("InternalError")
                for outcome in outcomes]

    async def _insert_markers(
        self, caller: Caller, bucket: BucketRecord, requests: Sequence[DeleteRequest],
        indexes: Sequence[int], outcomes: list[DeleteOutcome | Exception | None],
        bypass_governance: bool,
    ) -> None:
        """The delete markers of a batch, of distinct keys (under their locks), inserted
        concurrently, MARKER_CONCURRENCY at a time: their sidecars share the sync
        barrier's rounds and their rows group commit's transactions (one sync and one
        COMMIT for many, where one by one each paid its own); each is `_insert_marker`,
        with its own outcome in `outcomes`."""
        gate = DeferredSemaphore(MARKER_CONCURRENCY)

        async def one(index: int) -> None:
            outcomes[index] = await _outcome_of(self._insert_marker(
                caller, bucket, requests[index].key, bypass_governance))

        await gatherResults([gate.run(one, index) for index in indexes])

    async def _delete_named(
        self, caller: Caller, bucket_name: str, requests: Sequence[DeleteRequest],
        named: Mapping[int, str], outcomes: list[DeleteOutcome | Exception | None],
        bypass_governance: bool,
    ) -> None:
        """The permanent deletes of a batch (under its keys' locks): one read of the
        versions, the lock rules per version, one withdrawal, one transaction; the
        outcome of each request in `outcomes`."""
        if not named:
            return
        wanted = {(requests[index].key, version) for index, version in named.items()}
        found = await self._meta.get_object_versions(bucket_name, sorted(wanted))
        now = self._clock()
        first: dict[tuple[str, str], int] = {}  # (key, version) -> its first request
        doomed: list[tuple[int, ObjectRecord]] = []
        for index, version_id in named.items():
            key = requests[index].key
            shown = None if requests[index].version_id is None else version_id
            if (key, version_id) in first:
                continue  # a repeat: its first request's outcome, below
            first[(key, version_id)] = index
            record = found.get((key, version_id))
            if record is None:
                outcomes[index] = DeleteOutcome(shown)
                continue
            # Most versions are not locked: the rules allow them without asking whether
            # the caller may bypass a governance retention (which only allows more).
            if may_delete(record, now, bypass_governance, False) is not None:
                try:
                    await check_deletable(self._authority, caller.principal, record, now,
                                          bypass_governance)
                except Exception as error:
                    outcomes[index] = error
                    continue
            doomed.append((index, record))
        if doomed:
            await self._remove_versions(caller, bucket_name, requests, doomed, outcomes,
                                        bypass_governance)
        for index, version_id in named.items():
            if outcomes[index] is None:
                outcomes[index] = outcomes[first[(requests[index].key, version_id)]]

    async def _remove_versions(
        self, caller: Caller, bucket_name: str, requests: Sequence[DeleteRequest],
        doomed: Sequence[tuple[int, ObjectRecord]],
        outcomes: list[DeleteOutcome | Exception | None], bypass_governance: bool,
    ) -> None:
        records = [record for _, record in doomed]
        try:
            manifest = await self._files.withdraw_batch(bucket_name, records)
        except Exception as error:
            # A manifest that failed withdrew nothing; the sidecars that a fallback moved
            # before it failed (a full volume) go back.
            for record in await self._files.moved_aside(records):
                await self._keep_or_remove(record, None)
            for index, _ in doomed:
                outcomes[index] = error
            return
        try:
            note = await note_for(self._outbox, caller, ChangeKind.VERSION_DELETED,
                                  bucket_name)
            results = await self._meta.delete_object_versions(bucket_name, [
                VersionDelete.of(record, note.get("outbox")) for record in records])
        except BaseException as error:
            settled = True
            for index, record in doomed:
                settled = await self._keep_or_remove(record, manifest) and settled
                outcomes[index] = error if isinstance(error, Exception) else None
            if settled and manifest is not None:
                await self._drop_manifest(manifest)
            if not isinstance(error, Exception):
                raise
            return
        removed: list[ObjectRecord] = []
        reports: list[tuple[ObjectRecord, float | None]] = []
        settled = True  # every version the batch did not remove is resolved
        for (index, record), result in zip(doomed, results, strict=True):
            request = requests[index]
            shown = None if request.version_id is None else record.version_id
            if isinstance(result, RowChanged):  # changed since it was read: as `delete`
                settled = await self._keep_or_remove(record, manifest) and settled
                outcomes[index] = await _outcome_of(self._delete_version(
                    caller, bucket_name, record.key, record.version_id, bypass_governance))
                if request.version_id is None and isinstance(outcomes[index], DeleteOutcome):
                    outcomes[index] = DeleteOutcome(None)
                continue
            gone = result.removed
            if gone is not None:
                removed.append(gone)
                reports.append((gone, result.deleted_at))
            if gone is None or gone.blob_id != record.blob_id:
                settled = await self._keep_or_remove(record, manifest) and settled
            outcomes[index] = DeleteOutcome(shown, shown is not None and
                                            record.is_delete_marker)
        for gone, deleted_at in reports:
            try:
                await self._report(ChangeKind.VERSION_DELETED, caller, gone,
                                   deleted_at=deleted_at)
            except Exception as error:  # a sink's refusal: that key's answer, as `delete`
                outcomes[_index_of(doomed, gone)] = error
        await self._files.delete_versions_later(removed, manifest=manifest,
                                                drop_manifest=settled)

    async def _keep_or_remove(self, record: ObjectRecord, manifest: str | None) -> bool:
        """A version of a batch delete that the batch did not remove (its commit failed,
        or its row changed), withdrawn by `manifest` (None: its sidecar moved): whole when
        its row still holds its blob, else its files go (`BlobFiles.keep_or_remove`).
        False when even that failed: the withdrawal (a manifest, or the sidecar in
        `deleting/`) then stays for the next start (or `objstore check --repair`)."""
        try:
            current = await self._meta.get_object(record.bucket, record.key,
                                                  record.version_id)
            await self._files.keep_or_remove(record, current, in_place=manifest is not None)
        except Exception:
            log.failure("could not settle the batch delete of {bucket}/{key} ({version_id})",
                        bucket=record.bucket, key=record.key, version_id=record.version_id)
            return False
        return True

    async def _drop_manifest(self, manifest: str) -> None:
        try:
            await self._files.drop_manifest(manifest)
        except OSError:
            log.failure("could not remove the withdrawal manifest {manifest}",
                        manifest=manifest)

    async def _reinstate_if_kept(self, record: ObjectRecord) -> None:
        """After a delete that did not commit (or whose outcome is unknown): the sidecar
        comes back when the row still holds the same blob; when no row holds it any more,
        the version's files go. Should even that read fail, the withdrawn sidecar stays
        for the next start (or `objstore check --repair`) to resolve."""
        try:
            current = await self._meta.get_object(record.bucket, record.key,
                                                  record.version_id)
            if current is not None and current.blob_id == record.blob_id:
                await self._files.reinstate(current)
            else:
                await self._files.delete_version(record.blob_id,
                                                 [part.blob_id for part in record.parts])
        except Exception:
            log.failure("could not write back the sidecar of {bucket}/{key} ({version_id})",
                        bucket=record.bucket, key=record.key, version_id=record.version_id)

    async def _insert_marker(
        self, caller: Caller, bucket: BucketRecord, key: str, bypass_governance: bool
    ) -> DeleteOutcome:
        """A delete marker becomes the latest version; its sidecar (a blob id without
        bytes, like a composite's) is durable before its row."""
        now = self._clock()
        version_id = await self._version_for(caller, bucket, key, new_version_id(bucket))
        if version_id == NULL_VERSION:  # Suspended: the marker replaces the null version
            current = await self._meta.get_object(bucket.name, key, NULL_VERSION)
            if current is not None:
                await check_deletable(self._authority, caller.principal, current, now,
                                      bypass_governance)
        marker = ObjectRecord(
            bucket=bucket.name, key=key, version_id=version_id, blob_id=new_blob_id(),
            size=0, etag="", last_modified=now, is_delete_marker=True,
            owner_id=caller.principal.user_id, owner_name=caller.principal.username,
        )
        assert marker.blob_id is not None
        await self._files.store_sidecar(marker.blob_id, record_to_sidecar(marker))
        await self._commit(caller, marker, None)
        return DeleteOutcome(version_id, True)

    async def known_user(self, name: str) -> bool:
        """A user of this server has `name` as id or username (the principals a bucket
        policy may name)."""
        if await self._meta.get_user(name) is not None:
            return True
        return await self._meta.get_user_by_name(name) is not None

    async def bucket_owner(self, bucket_name: str) -> tuple[str, str]:
        """(user_id, username) of the owner of a bucket, for its ACL."""
        bucket = await self._bucket(bucket_name)
        user = await self._meta.get_user(bucket.owner_id)
        return bucket.owner_id, user.username if user is not None else ""

    async def list_page(
        self, bucket_name: str, *, prefix: str, start_after: str, limit: int,
        delimiter: str = "",
    ) -> list[ListingEntry]:
        """One page of latest versions (with a delimiter, the first row of each group
        only); the caller has checked that the bucket exists."""
        return await self._meta.list_latest_entries(bucket_name, prefix, start_after, limit,
                                                    delimiter)


@dataclass(frozen=True)
class DeleteRequest:
    """One key of a DeleteObjects: a version (with `version_id`), else as DeleteObject
    without one."""

    key: str
    version_id: str | None = None


async def _outcome_of(work: Awaitable[DeleteOutcome]) -> DeleteOutcome | Exception:
    """What one delete of a batch did, or the exception it raised."""
    try:
        return await work
    except Exception as error:
        return error


def _index_of(doomed: Sequence[tuple[int, ObjectRecord]], gone: ObjectRecord) -> int:
    """The request of a batch that removed `gone`."""
    return next(index for index, record in doomed
                if (record.key, record.version_id) == (gone.key, gone.version_id))


def _missing_blob(record: ObjectRecord) -> S3Error:
    log.error(
        "blob {blob_id} of {bucket}/{key} is missing; run `objstore check`",
        blob_id=record.blob_id, bucket=record.bucket, key=record.key,
    )
    return S3Error("InternalError", "The object's data is not available on this node.")


def with_stage_fields(record: ObjectRecord, fields: Mapping[str, Any]) -> ObjectRecord:
    """`record` with a writer's stage fields (blobs/plan.py) and, for SSE-C, the ETag AWS
    gives such an object (not the MD5 of its bytes: crypto/customer_key.py)."""
    record = replace(record, **fields)
    if record.encryption_algorithm == SSE_C:
        record = replace(record, etag=etag_of(record.etag, record.encryption_params))
    return record


def precondition_error(reason: str, key: str) -> S3Error:
    """The answer to a write whose precondition (If-None-Match: *, If-Match) failed."""
    if reason == "missing":
        return S3Error("NoSuchKey", Key=key)
    condition = "If-None-Match" if reason == "exists" else "If-Match"
    return S3Error("PreconditionFailed", Condition=condition)


class VersionVanished(Exception):
    """The version a read looked up was overwritten or deleted before its bytes were held:
    looking the key up again (from the database) gives the answer."""

    def __init__(self, record: ObjectRecord) -> None:
        super().__init__(f"{record.bucket}/{record.key}@{record.version_id} changed")
        self.record = record


class SourceChanged(Exception):
    """The blob of a copy source vanished while it was copied: a concurrent overwrite or
    delete of the source committed first. Looking the source up again gives the answer."""

    def __init__(self, source: ObjectRecord) -> None:
        super().__init__(f"{source.bucket}/{source.key} changed during a copy")
        self.source = source


def check_key(key: str) -> None:
    """Refuse a key objstore does not store (names.key_problem says why)."""
    problem = key_problem(key)
    if problem:
        raise S3Error(problem[0], problem[1], Key=key)
