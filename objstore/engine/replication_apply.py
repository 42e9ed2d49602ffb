"""The receive side of cluster replication: a peer's object row (with its blob's bytes, or
without) or deletion, applied here by last-writer-wins, answered with the ack the sender
counts (`convergence.ack.Ack`: applied, has_blob).

Same durability order as a client write (engine/objects.py): the blob is fsynced, its
sidecar written atomically and its directory fsynced, THEN the row transaction
(meta/object_apply_queries.py), then the blobs the commit orphaned go, then the change is
reported to the change hook with the peer's caller (`Origin.PEER`). Sinks that send
changes on (cluster fan-out, events, journals) ignore that origin: applying never fans
out again. A deletion withdraws the loser's sidecar before its row goes, as a client's
permanent delete does.

The verdict is asked once before any file work, so a row that loses or is already held
costs no sidecar write (anti-entropy redelivers many), and again inside the transaction,
which decides; files written for a row that then lost a race are settled afterwards. All
of it runs under the key's lock (`KeyLocks`), as other changes to existing versions do.

The ack: `applied` is true only when the change sent is the winning one here now: the row
was stored, or this node already held the same row; a deletion removed its row, or found
none to remove. A row this node keeps because its own row or the register's tombstone
beats it, or a deletion older than the row here, answers `applied: false`, which the
sender does not count toward its quorum: an acknowledged write is one a quorum holds.
`has_blob` whether it holds the bytes of that row: vacuously true for rows without bytes
(delete markers, rows a tombstone beat, deletions); for a composite it means its sidecar
is present (its parts travel on their own). Incoming records are validated first: blob
ids (the row's and its parts') must be canonical UUID strings, as this server makes them,
and are kept verbatim; every other field must hold what this server could have written
(`convergence.row_rules`: dates of the years 1970 to 9999, sizes in signed 64 bits,
enumerations, header-safe strings); a row sent without bytes whose blob is already here
must agree with it on its size (`row_rules.blob_problem`, as for bytes sent with it); a
deletion's stamp must be such a date too; the bucket must exist (NoSuchBucket); no stamp
may be further ahead of this node's clock than `[cluster] max_clock_ahead_seconds`
(InvalidArgument, counted in `FutureStamps.refused`: `lww.too_far_ahead`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import Logger

from objstore.blobs.factory import stored_bytes_writer
from objstore.blobs.reader import ChunkStream
from objstore.blobs.sidecar import record_to_sidecar
from objstore.blobs.store import BlobStore, is_valid_blob_id
from objstore.blobs.writer import UploadedBody
from objstore.convergence.ack import Ack
from objstore.convergence.lww import (
    has_finite_stamps,
    row_stamps,
    row_survives_tombstone,
    too_far_ahead,
)
from objstore.convergence.row_rules import (
    RowProblem,
    blob_problem,
    etag_is_md5,
    row_problem,
    stamp_problem,
)
from objstore.engine.buckets import require_bucket
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind, Origin
from objstore.engine.objects import BlobFiles, check_key
from objstore.engine.versioning import KeyLocks, check_version_id
from objstore.errors import S3Error
from objstore.meta.object_apply_queries import ApplyResult, ApplyVerdict, decide
from objstore.meta.records import ObjectRecord
from objstore.meta.store import RecordNotFound
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

log = Logger()

_NOT_YET: Exception = RuntimeError("not applied")  # a batch answer not yet given


# The sidecar of a blob that came before its row (`store_blob`): not an object's.
PROVISIONAL_BLOB_KIND = "replica-in-progress"
_LOCK_FIELDS = ("retention_mode", "retain_until_date", "legal_hold_status", "lock_updated_at")


@dataclass
class FutureStamps:
    """Replicated changes refused for a stamp too far ahead of this node's clock, summed
    over the node's appliers (the cluster route's and anti-entropy's), for the metrics."""

    refused: int = 0


@dataclass(frozen=True)
class _Written:
    """The file work done for an incoming row before its transaction."""

    created_blob: bool = False  # its bytes were stored here now
    sidecar: bool = False  # its sidecar was (re)written


class ReplicationApply:
    def __init__(
        self,
        meta: MetaStore,
        blobs: BlobStore,
        io: Runner,
        *,
        clock: Callable[[], float],
        locks: KeyLocks | None = None,
        changes: ChangeHook | None = None,
        tombstone_grace_seconds: float | None = None,
        max_clock_ahead_seconds: float | None = None,
        future: FutureStamps | None = None,
    ) -> None:
        self._meta = meta
        # A change stamped further ahead of this clock is refused (None: never).
        self._max_ahead = max_clock_ahead_seconds
        self.future = future if future is not None else FutureStamps()
        # A deletion older than this, of a version this node holds neither as a row nor as
        # a tombstone, is not recorded (meta/object_apply_queries.apply_replicated_delete).
        self._grace = tombstone_grace_seconds
        self._blobs = blobs
        self._files = BlobFiles(blobs, io)
        self._io = io
        self._clock = clock
        self._locks = locks if locks is not None else KeyLocks()
        self._changes = changes or ChangeHook()
        # Rows and deletions stamped far ahead of this node's clock (a peer's clock that
        # jumped): they shadow later writes of their key until the clocks agree.
        self.future_stamped = 0

    # -- rows ----------------------------------------------------------------------------
    async def apply_replicated(self, caller: Caller, record: ObjectRecord,
                               body: UploadedBody | None = None) -> Ack:
        """Apply a peer's row; `body`: the bytes of its blob, when sent with it (left to
        its owner to close when not used)."""
        _require_peer(caller)
        await self._admit(record, body)
        return await self._locks.run(record.bucket, record.key,
                                     lambda: self._apply(caller, record, body))

    async def apply_replicated_bytes(self, caller: Caller, record: ObjectRecord,
                                     data: bytes) -> Ack:
        """Apply a peer's row sent with its blob's bytes (as stored) inside it (a small
        blob: cluster/wire.py): as `apply_replicated` with them as its body, once they
        match the row (a plain row's ETag is their MD5: BadDigest otherwise)."""
        _require_peer(caller)
        # Kept in memory whole (the JSON route's cap bounds them): never spooled to a file.
        body = stored_bytes_writer(self._blobs.tmp_dir, memory_limit=max(len(data), 1))
        try:
            body.write(data)
            body.end()
            await body.digests_ready()
            # (bytes of another length are refused by the row rules below, InvalidRequest)
            if etag_is_md5(record) and body.length == record.size \
                    and body.md5_hex != record.etag:
                raise S3Error("BadDigest", f"The bytes sent have MD5 {body.md5_hex}; the "
                              f"row's ETag is {record.etag}.")
            return await self.apply_replicated(caller, record, body)
        finally:
            body.close()

    async def _admit(self, record: ObjectRecord, body: UploadedBody | None) -> None:
        """The checks every incoming row passes before it is applied, alone or in a batch:
        the row rules, the future-stamp bound, a held blob's size, the bucket."""
        check_replicated_record(record, body)
        self._refuse_future(row_stamps(record), record.bucket, record.key)
        if body is None:
            await self._check_held_blob(record)
        await require_bucket(self._meta, record.bucket)

    async def _check_held_blob(self, record: ObjectRecord) -> None:
        """A row sent without bytes whose blob is already here (sent first by the blob
        route, or kept from before) must agree with it, as bytes sent with it must."""
        if record.blob_id is None or record.is_delete_marker or record.parts:
            return
        stored = await self._io.run(self._blobs.blob_size, record.blob_id)
        problem = None if stored is None else blob_problem(record, stored)
        if problem is not None:
            raise S3Error("InvalidRequest", f"The row does not match its blob: {problem}")

    async def _apply(self, caller: Caller, record: ObjectRecord,
                     body: UploadedBody | None) -> Ack:
        # The register's row and tombstone in one read (was two: a peer's part of a quorum
        # write waits for each read hop behind the others).
        [(local, deleted_at)] = await self._meta.register_states(
            [(record.bucket, record.key, record.version_id)])
        verdict = decide(local, deleted_at, record, self._clock())[0]
        written = await self._prepare_files(record, body, local, verdict)
        try:
            result = await self._meta.apply_replicated_object(record)
        except BaseException as error:
            await self._settle_after_failure(record, written)
            if isinstance(error, RecordNotFound):
                raise S3Error("NoSuchBucket", BucketName=record.bucket) from None
            raise
        return await self._applied(caller, record, local, written, result)

    async def _applied(self, caller: Caller, record: ObjectRecord, local: ObjectRecord | None,
                       written: _Written, result: ApplyResult) -> Ack:
        """After a row's transaction (alone or in a batch): its files settled, the blobs it
        orphaned removed, the change reported; the ack counts only a row that wins here."""
        if not result.applied:
            await self._settle(record, result.record, written)
        await self._files.delete_replaced(result.orphaned_blob_ids)
        self._note_future(result.future_stamped, record.bucket, record.key)
        if result.applied:
            assert result.record is not None
            await self._report(_kind_of(local, result.record), caller, result.record)
        won = result.applied or result.verdict is ApplyVerdict.IDENTICAL
        stored_now = (written.created_blob and result.applied and result.record is not None
                      and result.record.blob_id == record.blob_id)
        # Bytes stored by this very apply, under the key's lock, are here: no look.
        return Ack(applied=won, has_blob=stored_now or await self._has_blob(result))

    async def _prepare_files(self, record: ObjectRecord, body: UploadedBody | None,
                             local: ObjectRecord | None, verdict: ApplyVerdict) -> _Written:
        """The file work before the row's transaction, by the verdict asked first."""
        if verdict is ApplyVerdict.APPLIED:
            return await self._store_files(record, body)
        if verdict is ApplyVerdict.IDENTICAL and body is not None and local is not None:
            return await self._fill_missing_bytes(local, body)
        if verdict is ApplyVerdict.IDENTICAL and local is not None:
            await self._adopt_sent_bytes(local)
        return _Written()

    # -- many rows at once (anti-entropy) -----------------------------------------------
    async def apply_replicated_rows(
        self, caller: Caller, items: Sequence[tuple[ObjectRecord, UploadedBody | None]],
    ) -> list[Ack | Exception]:
        """Apply many peers' rows (anti-entropy's batch, of distinct versions) as
        `apply_replicated` does each, with their row writes in ONE transaction
        (`apply_replicated_objects`): validated, then under the locks of all their keys
        (`KeyLocks.run_many`) their registers read at once, their files made durable
        concurrently (the IO pool bounds it), one transaction, then each row settled and
        reported. Each row's answer is its ack or the exception it met (an invalid row,
        NoSuchBucket); an error of the transaction itself is raised. The bodies are left
        to their owner to close."""
        _require_peer(caller)
        answers: list[Ack | Exception] = [_NOT_YET] * len(items)
        valid: list[int] = []
        for index, (record, body) in enumerate(items):
            try:
                await self._admit(record, body)
            except Exception as error:  # noqa: BLE001 (this row's answer)
                answers[index] = error
                continue
            valid.append(index)
        if valid:
            await self._locks.run_many(
                ((items[i][0].bucket, items[i][0].key) for i in valid),
                lambda: self._apply_rows(caller, items, valid, answers))
        return answers

    async def _apply_rows(self, caller: Caller,
                          items: Sequence[tuple[ObjectRecord, UploadedBody | None]],
                          valid: list[int], answers: list[Ack | Exception]) -> None:
        records = [items[i][0] for i in valid]
        states = await self._meta.register_states(
            [(r.bucket, r.key, r.version_id) for r in records])
        now = self._clock()

        async def prepare(index: int, state: tuple[ObjectRecord | None, float | None]
                          ) -> _Written | Exception:
            record, body = items[index]
            verdict = decide(state[0], state[1], record, now)[0]
            try:
                return await self._prepare_files(record, body, state[0], verdict)
            except Exception as error:  # noqa: BLE001 (this row's answer)
                return error

        done = await gatherResults([Deferred.fromCoroutine(prepare(i, state))
                                    for i, state in zip(valid, states, strict=True)])
        ready: list[tuple[int, ObjectRecord, ObjectRecord | None, _Written]] = []
        for i, record, state, written in zip(valid, records, states, done, strict=True):
            if isinstance(written, Exception):
                answers[i] = written  # its file work failed: no row for it
            else:
                ready.append((i, record, state[0], written))
        if not ready:
            return
        try:
            results = await self._meta.apply_replicated_objects([r[1] for r in ready])
        except BaseException:
            for _, record, _, written in ready:
                assert isinstance(written, _Written)
                await self._settle_after_failure(record, written)
            raise
        for (index, record, local, written), result in zip(ready, results, strict=True):
            if isinstance(result, Exception):
                await self._settle_after_failure(record, written)
                answers[index] = (S3Error("NoSuchBucket", BucketName=record.bucket)
                                  if isinstance(result, RecordNotFound) else result)
                continue
            answers[index] = await self._applied(caller, record, local, written, result)

    async def _store_files(self, record: ObjectRecord, body: UploadedBody | None) -> _Written:
        """The incoming row's files, durable before its row. Bytes are stored once per
        blob id (they never change under one id); its sidecar is rewritten (a lock or tag
        change keeps the blob id). A row whose bytes are neither here nor sent goes in
        without them: the ack says so, and blob repair brings them."""
        blob_id = record.blob_id
        if blob_id is None:
            return _Written()
        sidecar = record_to_sidecar(record)
        if record.is_delete_marker or record.parts or await self._blob_present(blob_id):
            await self._files.store_sidecar(blob_id, sidecar)
            return _Written(sidecar=True)
        if body is None:
            return _Written()
        await self._files.store(body, blob_id, sidecar)
        return _Written(created_blob=True, sidecar=True)

    async def _fill_missing_bytes(self, local: ObjectRecord, body: UploadedBody) -> _Written:
        """An identical row sent again with its bytes (a retry after the bytes failed to
        arrive): they are stored when this node lacks them."""
        if local.blob_id is None or local.is_delete_marker or local.parts:
            return _Written()
        if await self._blob_present(local.blob_id):
            return _Written()
        await self._files.store(body, local.blob_id, record_to_sidecar(local))
        return _Written()  # the row references them: nothing to settle

    async def _adopt_sent_bytes(self, local: ObjectRecord) -> None:
        """An identical row sent again after its bytes came on their own (`store_blob`,
        for a row held without them): the bytes' provisional sidecar becomes the row's."""
        if local.blob_id is None or local.is_delete_marker or local.parts:
            return
        if not await self._blob_present(local.blob_id):
            return
        if await self._io.run(self._sidecar_kind, local.blob_id) != "object":
            await self._files.store_sidecar(local.blob_id, record_to_sidecar(local))

    def _sidecar_kind(self, blob_id: str) -> str | None:
        """(IO thread) The kind of a blob's sidecar; None without one."""
        try:
            return str(self._blobs.read_sidecar(blob_id).get("kind", "object"))
        except (OSError, ValueError):
            return None

    # -- blobs on their own (the cluster's blob route) ------------------------------------
    async def store_blob(self, caller: Caller, blob_id: str,
                         body: UploadedBody | None) -> bool:
        """A peer's blob, sent before the row that references it (or a composite's part):
        durable as `blob_id` under a provisional sidecar `recover` ignores, which the row's
        own replaces when it is applied; unreferenced, it is an orphan `check --repair`
        reclaims. Bytes never change under one id: a blob already here is kept (False).
        `body` None: an empty blob."""
        _require_peer(caller)
        if not is_valid_blob_id(blob_id):
            raise _invalid("blob_id", blob_id, "A blob id must be a UUID.")
        if await self._blob_present(blob_id):
            return False
        if body is None:
            body = stored_bytes_writer(self._blobs.tmp_dir)
        await self._files.store(body, blob_id, {"kind": PROVISIONAL_BLOB_KIND})
        return True

    async def blob_stream(self, blob_id: str) -> ChunkStream | None:
        """A stored blob's bytes as stored, for a peer's repair; None when not here. Opened
        now, so a delete after this point does not take the bytes away."""
        if not is_valid_blob_id(blob_id):
            raise _invalid("blob_id", blob_id, "A blob id must be a UUID.")
        try:
            reader = await self._io.run(self._blobs.blob_reader, blob_id)
            await self._io.run(reader.open)
        except FileNotFoundError:
            return None
        return ChunkStream(reader, self._io)

    async def _settle(self, record: ObjectRecord, winner: ObjectRecord | None,
                      written: _Written) -> None:
        """Files written for a row that lost inside the transaction: the winner's sidecar
        is written back when it shares the blob id; otherwise created bytes go, and a
        sidecar over bytes already here is withdrawn (`recover` must not rebuild the
        loser)."""
        blob_id = record.blob_id
        if not written.sidecar or blob_id is None:
            return
        if winner is not None and winner.blob_id == blob_id:
            await self._files.reinstate(winner)
        elif written.created_blob:
            await self._files.delete([blob_id])
        else:
            await self._files.forget(record)

    async def _settle_after_failure(self, record: ObjectRecord, written: _Written) -> None:
        if not written.sidecar:
            return
        try:
            current = await self._meta.get_object(record.bucket, record.key,
                                                  record.version_id)
        except Exception:
            # The outcome is unknown: the files stay (`objstore check` sorts them out).
            log.failure("could not settle the files of a replicated row of {bucket}/{key}",
                        bucket=record.bucket, key=record.key)
            return
        await self._settle(record, current, written)

    async def _has_blob(self, result: ApplyResult) -> bool:
        held = result.record
        if held is None or held.blob_id is None or held.is_delete_marker:
            return True
        if held.parts:
            return await self._io.run(os.path.exists, self._blobs.sidecar_path(held.blob_id))
        return await self._blob_present(held.blob_id)

    async def _blob_present(self, blob_id: str) -> bool:
        return await self._io.run(self._blobs.blob_size, blob_id) is not None

    # -- deletions -----------------------------------------------------------------------
    async def apply_replicated_delete(self, caller: Caller, bucket: str, key: str,
                                      version_id: str, deleted_at: float) -> Ack:
        """Apply a peer's deletion of one version (its tombstone, stamped `deleted_at`)."""
        _require_peer(caller)
        check_key(key)
        check_version_id(version_id, "version_id")
        if not math.isfinite(deleted_at):
            raise S3Error("InvalidArgument", "The deletion stamp is not a finite time.",
                          ArgumentName="deleted_at", ArgumentValue=str(deleted_at))
        problem = stamp_problem("deleted_at", deleted_at)
        if problem is not None:
            raise _refused(problem)
        self._refuse_future((deleted_at,), bucket, key)
        await require_bucket(self._meta, bucket)
        return await self._locks.run(bucket, key, lambda: self._delete(
            caller, bucket, key, version_id, deleted_at))

    async def _delete(self, caller: Caller, bucket: str, key: str, version_id: str,
                      deleted_at: float) -> Ack:
        local = await self._meta.get_object(bucket, key, version_id)
        doomed = local if local is not None and not row_survives_tombstone(
            local, deleted_at) else None
        if doomed is not None:
            await self._files.withdraw(doomed)
        try:
            expired_before = None if self._grace is None else self._clock() - self._grace
            result = await self._meta.apply_replicated_delete(bucket, key, version_id,
                                                              deleted_at, expired_before)
        except BaseException as error:
            if doomed is not None:
                await self._reinstate_if_kept(doomed)
            if isinstance(error, RecordNotFound):
                raise S3Error("NoSuchBucket", BucketName=bucket) from None
            raise
        removed = result.removed
        if doomed is not None and (removed is None or removed.blob_id != doomed.blob_id):
            await self._reinstate_if_kept(doomed)
        if removed is not None:
            await self._files.delete_version(removed.blob_id,
                                             [part.blob_id for part in removed.parts])
        self._note_future(result.future_stamped, bucket, key)
        if result.recorded:
            await self._changes.committed(Change(ChangeKind.VERSION_DELETED, caller, bucket,
                                                 key, version_id, removed,
                                                 deleted_at=result.deleted_at))
        # A row here strictly newer than the deletion survives it: the deletion lost.
        return Ack(applied=local is None or doomed is not None, has_blob=True)

    async def _reinstate_if_kept(self, record: ObjectRecord) -> None:
        """The sidecar of a row that was not removed after all, written back."""
        try:
            current = await self._meta.get_object(record.bucket, record.key,
                                                  record.version_id)
            if current is not None and current.blob_id == record.blob_id:
                await self._files.reinstate(current)
        except Exception:
            log.failure("could not write back the sidecar of {bucket}/{key} ({version_id})",
                        bucket=record.bucket, key=record.key, version_id=record.version_id)

    # -- reporting -----------------------------------------------------------------------
    def _refuse_future(self, stamps: tuple[float | None, ...], bucket: str, key: str) -> None:
        """The one check of a replicated change's stamps against this node's clock:
        InvalidArgument (400 to the peer), counted and logged, for a stamp further ahead
        than `max_clock_ahead_seconds` (`lww.too_far_ahead`)."""
        if self._max_ahead is None:
            return
        stamp = too_far_ahead(stamps, self._clock(), self._max_ahead)
        if stamp is None:
            return
        self.future.refused += 1
        log.warn("refused a peer's change of {bucket}/{key} stamped {ahead:.0f} s ahead of "
                 "this node's clock (max_clock_ahead_seconds): a peer's clock runs fast",
                 bucket=bucket, key=key, ahead=stamp - self._clock())
        raise S3Error("InvalidArgument", "A stamp of this change is further ahead of this "
                      "node's clock than max_clock_ahead_seconds allows.",
                      ArgumentName="last_modified", ArgumentValue=repr(stamp))

    def _note_future(self, future: bool, bucket: str, key: str) -> None:
        if future:
            self.future_stamped += 1
            log.warn("a peer's change of {bucket}/{key} is stamped far in the future: it "
                     "shadows later writes of the key until the clocks agree",
                     bucket=bucket, key=key)

    async def _report(self, kind: ChangeKind, caller: Caller, record: ObjectRecord) -> None:
        await self._changes.committed(Change(kind, caller, record.bucket, record.key,
                                             record.version_id, record))


def _require_peer(caller: Caller) -> None:
    if caller.origin is not Origin.PEER:
        raise ValueError("replicated changes are applied for a peer caller only")


def _kind_of(before: ObjectRecord | None, after: ObjectRecord) -> ChangeKind:
    """What an applied row changed, as a client's change of the same effect is named."""
    if before is not None and before.blob_id == after.blob_id:
        if any(getattr(before, name) != getattr(after, name) for name in _LOCK_FIELDS):
            return ChangeKind.LOCK_CHANGED
        if before.acl != after.acl:
            return ChangeKind.ACL_CHANGED
        if (before.tags, before.tags_updated_at) != (after.tags, after.tags_updated_at):
            return ChangeKind.TAGS_CHANGED
    if after.is_delete_marker:
        return ChangeKind.DELETE_MARKER_WRITTEN
    return ChangeKind.OBJECT_WRITTEN


def check_replicated_record(record: ObjectRecord, body: UploadedBody | None) -> None:
    """Refuse a peer's row this server could not have made (InvalidArgument), or bytes
    sent for a row that has none of its own (InvalidRequest)."""
    check_key(record.key)
    check_version_id(record.version_id, "version_id")
    ids = [record.blob_id, *(part.blob_id for part in record.parts)]
    if record.blob_id is None and not record.is_delete_marker:
        raise _invalid("blob_id", "", "A replicated object row needs a blob id.")
    for blob_id in ids:
        if blob_id is not None and not is_valid_blob_id(blob_id):
            raise _invalid("blob_id", blob_id, "A blob id must be a UUID.")
    if not has_finite_stamps(record):
        raise _invalid("last_modified", str(record.last_modified),
                       "The row's stamps must be finite times.")
    problem = row_problem(record)
    if problem is not None:
        raise _refused(problem)
    if body is None:
        return
    if record.is_delete_marker or record.parts:
        raise S3Error("InvalidRequest", "This row has no bytes of its own to send.")
    problem = blob_problem(record, body.length)
    if problem is not None:
        raise S3Error("InvalidRequest",
                      f"The blob holds {body.length} bytes; the row says {record.size}.")


def _refused(problem: RowProblem) -> S3Error:
    return _invalid(problem.field, problem.value, f"Not a row this server writes: {problem}")


def _invalid(name: str, value: str, message: str) -> S3Error:
    return S3Error("InvalidArgument", message, ArgumentName=name, ArgumentValue=value)
