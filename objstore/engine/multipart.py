"""Multipart upload use cases: create, upload or copy a part, complete, abort, list.

Applies the rules of engine/multipart_rules.py (part list, checksums, the composite record)
to the metadata store and the blob store, and owns the delimiter grouping of
ListMultipartUploads.

Durability (DESIGN invariants 1-2): an upload's record (`uploads/`, what `recover` reopens
it from) is durable before its row, withdrawn before an abort's row delete and removed
after a completion's commit. A part is a blob with a sidecar of kind "part", durable
before its row. A completion writes a NEW blob id that holds only the composite object's
sidecar (its `parts` reference the part blobs, whose bytes are never rewritten), then
commits the object row and removes the upload and its part rows in ONE transaction
(`MetaStore.complete_upload`), so an abort can never delete blobs a completed object uses.
A blob is deleted only after the commit that made it unreachable, and never when the
outcome of a commit is unknown (an orphan is reclaimed by `objstore check --repair`).
A retry of a completion that succeeded (a client that timed out) is answered with the
object it made, for a while (`complete_by_id`).

Versioning and object lock: a completion gets a version id as a PutObject does, carries
the lock headers given at creation (else the bucket's default retention, counted from the
completion), and is refused like any write that would overwrite a locked null version.

On a cluster node the calls of one upload may land on different nodes: the `UploadPeers`
seam (engine/upload_peers.py) merges the peers' control planes before an upload is
declared unknown, before ListParts and before a completion naming parts not held here,
and brings the bytes of the parts a completion uses from the peers (docs/CLUSTER.md,
"Multipart uploads across nodes"). A single node never asks it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from objstore.blobs import checksum_combine as combine
from objstore.blobs.plan import IDENTITY, StagePlan, plan_document, plan_from_document
from objstore.blobs.segments import Segment, plan_segments
from objstore.blobs.sidecar import record_to_sidecar
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.blobs.writer import UploadedBody
from objstore.crypto.customer_key import (
    NO_COPY_KEYS,
    SSE_C,
    CopyKeys,
    CustomerKey,
    etag_of,
)
from objstore.engine import lock_rules
from objstore.engine.blob_repair import NO_REPAIR, BlobRepair, repair_after_missing
from objstore.engine.buckets import require_bucket
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind
from objstore.engine.multipart_rules import (
    ACL_EXTRA,
    COMPOSITE,
    FULL_OBJECT,
    MAX_COPY_PART_BYTES,
    MAX_PART_NUMBER,
    MIN_PART_BYTES,
    ChecksumMode,
    CompletionClaims,
    RequestedPart,
    check_claims,
    check_part_order,
    composite_record,
    new_upload_id,
    normalize_etag,
    object_checksums,
    part_checksum_mismatch,
    part_sidecar,
    same_parts,
    select_parts,
)
from objstore.engine.objects import (
    BlobFiles,
    ObjectAttrs,
    ReplicationStamp,
    check_key,
    precondition_error,
    replica_version_id,
)
from objstore.engine.outbox import OutboxDelivery, note_for
from objstore.engine.quota import quota_check
from objstore.engine.replicator import NO_GATE, WriteGate
from objstore.engine.upload_peers import NO_UPLOAD_PEERS, UploadPeers
from objstore.engine.versioning import (
    check_lock_request,
    lock_configuration,
    new_version_id,
    refuse_locked_overwrite,
)
from objstore.errors import S3Error
from objstore.meta.keyspace import group_of
from objstore.meta.records import (
    BucketRecord,
    ObjectRecord,
    PartRecord,
    UploadRecord,
    WritePrecondition,
)
from objstore.meta.store import PartsChanged, PreconditionNotMet, RecordNotFound
from objstore.meta.upload_queries import COMPLETED_UPLOAD_KEPT_SECONDS
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore
    from objstore.meta.upload_queries import CompletedUpload

log = Logger()

# A completion re-reads the parts when one was replaced under it; after this many tries
# the client is told to retry.
COMPLETE_ATTEMPTS = 3
# Sorts after every key that starts with a given prefix (keys compare by code point).
_AFTER_ALL = "\U0010ffff"


@dataclass
class UploadListing:
    uploads: list[UploadRecord] = field(default_factory=list)
    common_prefixes: list[str] = field(default_factory=list)
    is_truncated: bool = False
    next_key_marker: str = ""
    next_upload_id_marker: str = ""


# -- the service ----------------------------------------------------------------------


class MultipartService:
    """The multipart use cases over the metadata store, the blob store and the IO pool."""

    def __init__(
        self,
        meta: MetaStore,
        blobs: BlobStore,
        io: Runner,
        *,
        clock: Callable[[], float],
        upload_ids: Callable[[], str] = new_upload_id,
        changes: ChangeHook | None = None,
        gate: WriteGate = NO_GATE,
        repair: BlobRepair = NO_REPAIR,
        peers: UploadPeers = NO_UPLOAD_PEERS,
        outbox: OutboxDelivery | None = None,
        replication: ReplicationStamp | None = None,
    ) -> None:
        self._meta = meta
        self._outbox = outbox  # the durable outbox: a completion's entry
        self._replication = replication  # x-amz-replication-status of the new version
        self._changes = changes or ChangeHook()
        self._gate = gate  # asked before a part and a completion (the cluster write gate)
        self._repair = repair  # asked when a copied source's blob is missing
        self._peers = peers  # asked about uploads and parts made through other nodes
        self._blobs = blobs
        self._files = BlobFiles(blobs, io)
        self._io = io
        self._clock = clock
        self._upload_ids = upload_ids

    async def _bucket(self, name: str) -> BucketRecord:
        return await require_bucket(self._meta, name)

    async def _report(self, kind: ChangeKind, caller: Caller, bucket: str, key: str,
                      record: ObjectRecord | None = None, subject: str = "") -> None:
        """The one place this service reports a committed change."""
        await self._changes.committed(Change(
            kind, caller, bucket, key, record.version_id if record else None, record,
            subject))

    # -- create, look up, abort ------------------------------------------------------
    async def create(
        self, caller: Caller, bucket_name: str, key: str, attrs: ObjectAttrs,
        mode: ChecksumMode, plan: StagePlan = IDENTITY,
        customer_key: CustomerKey | None = None,
    ) -> UploadRecord:
        """Open an upload; `plan`: the stages every part is written with (decided from the
        request and the bucket's settings now, kept on the upload); an SSE-C upload keeps
        a verifier of the customer's key (never the key), which every part must match."""
        check_key(key)
        bucket = await self._bucket(bucket_name)
        extra = await self._lock_extra(bucket, attrs.lock)
        if mode.type:
            extra["checksum_type"] = mode.type
        if attrs.acl is not None:
            extra[ACL_EXTRA] = attrs.acl
        if not plan.identity:
            extra[STAGE_PLAN_EXTRA] = plan_document(plan)
        if plan.encryption == SSE_C:
            assert customer_key is not None
            extra[SSEC_EXTRA] = customer_key.verifier()
        upload = UploadRecord(
            upload_id=self._upload_ids(), bucket=bucket_name, key=key,
            initiated_at=self._clock(), owner_id=caller.principal.user_id,
            owner_name=caller.principal.username, content_type=attrs.content_type,
            user_metadata=dict(attrs.user_metadata), system_headers=dict(attrs.system_headers),
            storage_class=attrs.storage_class, checksum_algorithm=mode.algorithm,
            tags=dict(attrs.tags), extra=extra,
        )
        await self._files.store_upload(upload)
        try:
            await self._meta.create_upload(upload)
        except BaseException as error:
            await self._files.remove_upload(upload.upload_id)
            if isinstance(error, RecordNotFound):
                raise S3Error("NoSuchBucket", BucketName=bucket_name) from None
            raise
        await self._report(ChangeKind.UPLOAD_CREATED, caller, bucket_name, key,
                           subject=upload.upload_id)
        return upload

    async def _lock_extra(
        self, bucket: BucketRecord, lock: lock_rules.LockRequest
    ) -> dict[str, Any]:
        """The upload's lock headers, kept until completion, and whether its parts must
        carry Content-MD5 or a checksum (lock parameters apply to the object, as AWS asks
        of Put Part requests)."""
        check_lock_request(bucket, lock, self._clock())
        extra: dict[str, Any] = {} if lock.is_empty else dict(lock.to_extra())
        if lock_rules.lock_applies(lock, await lock_configuration(self._meta, bucket)):
            extra["lock_required"] = True
        return extra

    async def upload(self, bucket_name: str, key: str, upload_id: str) -> UploadRecord:
        """The open upload `upload_id` of this bucket and key (NoSuchBucket/NoSuchUpload)."""
        upload = await self._meta.get_upload(upload_id)
        if upload is None and self._peers.enabled:
            # Created through another node, perhaps: its control plane is merged first.
            await self._peers.refresh()
            upload = await self._meta.get_upload(upload_id)
        if upload is None or (upload.bucket, upload.key) != (bucket_name, key):
            await self._bucket(bucket_name)
            raise S3Error("NoSuchUpload", UploadId=upload_id)
        return upload

    async def abort(self, caller: Caller, upload: UploadRecord) -> None:
        """Remove the upload's record (so that `recover` never reopens it), the upload and
        then the blobs of the parts its rows held. A completion that won the race took the
        part rows with it, so their blobs are kept."""
        await self._files.remove_upload(upload.upload_id)
        try:
            parts = await self._meta.delete_upload(upload.upload_id)
        except BaseException:
            await self._reinstate_if_open(upload)
            raise
        await self._files.delete([part.blob_id for part in parts])
        await self._report(ChangeKind.UPLOAD_ABORTED, caller, upload.bucket, upload.key,
                           subject=upload.upload_id)

    async def _reinstate_if_open(self, upload: UploadRecord) -> None:
        """After an abort that did not commit: the upload's record comes back while the
        upload is still open (should that fail, `objstore check --repair` writes it)."""
        try:
            if await self._meta.get_upload(upload.upload_id) is not None:
                await self._files.store_upload(upload)
        except Exception:
            log.failure("could not write back the record of upload {upload_id}",
                        upload_id=upload.upload_id)

    # -- parts -----------------------------------------------------------------------
    async def upload_part(
        self, caller: Caller, upload: UploadRecord, part_number: int, body: UploadedBody,
        claimed: dict[str, str],
    ) -> PartRecord:
        """Store a part from a verified request body (`claimed`: its verified checksums).
        The upload's checksum is computed here when the client did not send it."""
        mode = ChecksumMode.of(upload)
        _refuse_other_algorithm(mode, claimed)
        self._gate.check_write(body.length)  # rule 12: the part's bytes, before storing
        checksums = dict(claimed)
        if mode.algorithm is not None and mode.algorithm not in checksums:
            checksums[mode.algorithm] = await self._io.run(body.checksum, mode.algorithm)
        blob_id = new_blob_id()
        staged = body.stage_fields(upload.bucket, upload.key, upload.upload_id, blob_id)
        if (staged is not None) != (not upload_plan(upload).identity):
            # The body's stages were decided at admission from this upload's record.
            raise S3Error("InternalError", "The part was not written with its upload's "
                          "stages; retry the request.")
        part = PartRecord(
            upload_id=upload.upload_id, part_number=part_number, blob_id=blob_id,
            size=body.length, etag=_part_etag(body.md5_hex, staged), last_modified=self._clock(),
            checksums=checksums, encryption_params=_part_key_params(staged),
        )
        await self._files.store(body, part.blob_id, part_sidecar(upload, part))
        return await self._commit_part(caller, upload, part)

    async def copy_part(
        self, caller: Caller, upload: UploadRecord, part_number: int, source: ObjectRecord,
        span: tuple[int, int] | None, keys: CopyKeys = NO_COPY_KEYS,
    ) -> PartRecord:
        """UploadPartCopy: bytes `span` (start, length; None = all) of `source` become a
        new part blob, copied on the IO pool and hashed once while copied. `keys`: the
        customer keys of an SSE-C source or upload (checked by the caller)."""
        start, length = span if span is not None else (0, source.size)
        if length > MAX_COPY_PART_BYTES:
            raise S3Error("InvalidRequest", "The specified copy source is larger than the "
                          f"maximum allowable size for a copy source: {MAX_COPY_PART_BYTES}")
        self._gate.check_write(length)  # rule 12: the copied bytes, before copying
        part = PartRecord(
            upload_id=upload.upload_id, part_number=part_number, blob_id=new_blob_id(),
            size=length, etag="", last_modified=self._clock(),
        )
        segments = plan_segments(source, start, length)
        try:
            part = await self._io.run(self._copy_part_blob, segments, upload, part, source,
                                      keys)
        except FileNotFoundError:
            if not await repair_after_missing(self._meta, self._repair, source):
                raise _source_changed(source) from None
            try:
                part = await self._io.run(self._copy_part_blob, segments, upload, part, source,
                                          keys)
            except FileNotFoundError:
                raise _source_changed(source) from None
        return await self._commit_part(caller, upload, part)

    def _copy_part_blob(
        self, segments: list[Segment], upload: UploadRecord, part: PartRecord,
        source: ObjectRecord, keys: CopyKeys = NO_COPY_KEYS,
    ) -> PartRecord:
        """(IO thread) Copy, then rewrite the sidecar with the ETag (and the upload's
        checksum) learnt from the copied bytes. A part of a staged upload passes through
        the upload's stages (its checksum is computed on the way: the stored bytes are
        not the client's)."""
        plan = upload_plan(upload)
        algorithm = upload.checksum_algorithm
        writer = None
        staged = None
        if not plan.identity:
            writer = self._blobs.stages.writer(
                self._blobs.tmp_dir, plan, memory_limit=0, customer_key=keys.destination,
                checksum_algorithms=() if algorithm is None else (algorithm,))
            staged = writer.stage_fields(upload.bucket, upload.key, upload.upload_id,
                                         part.blob_id)
            part = replace(part, encryption_params=_part_key_params(staged))
        md5 = self._blobs.copy_segments(segments, part.blob_id, part_sidecar(upload, part),
                                        want_md5=True, source=source, writer=writer,
                                        source_key=keys.source)
        assert md5 is not None
        md5 = _part_etag(md5, staged)
        checksums: dict[str, str] = {}
        try:
            if algorithm is not None and writer is not None:
                checksums[algorithm] = writer.checksum(algorithm)
            elif algorithm is not None:
                checksums[algorithm] = combine.blob_checksum(self._blobs, part.blob_id,
                                                             algorithm, part.size)
            done = replace(part, etag=md5, checksums=checksums)
            self._blobs.write_sidecar(part.blob_id, part_sidecar(upload, done))
        except BaseException:
            self._blobs.delete(part.blob_id)
            raise
        return done

    async def _commit_part(self, caller: Caller, upload: UploadRecord,
                           part: PartRecord) -> PartRecord:
        try:
            replaced = await self._meta.put_part(part)
        except RecordNotFound:
            await self._files.delete([part.blob_id])
            raise S3Error("NoSuchUpload", UploadId=part.upload_id) from None
        if replaced is not None:
            await self._files.delete([replaced])
        await self._report(ChangeKind.PART_WRITTEN, caller, upload.bucket, upload.key,
                           subject=f"{upload.upload_id}/{part.part_number}")
        return part

    async def list_parts(
        self, upload: UploadRecord, after_part: int, max_parts: int
    ) -> tuple[list[PartRecord], bool]:
        """One page of parts after `after_part`, and whether more follow."""
        if max_parts <= 0:
            return [], False
        if self._peers.enabled:  # parts may have been uploaded through other nodes
            await self._peers.refresh()
        parts = await self._meta.list_parts(upload.upload_id, after_part, max_parts + 1)
        return parts[:max_parts], len(parts) > max_parts

    # -- completion ------------------------------------------------------------------
    async def complete(
        self, caller: Caller, upload: UploadRecord, requested: Sequence[RequestedPart],
        claims: CompletionClaims, precondition: WritePrecondition | None = None,
    ) -> ObjectRecord:
        """Commit the composite object. The parts are read, checked and described in a
        sidecar, then the transaction re-checks that they are still the upload's parts
        (a concurrent UploadPart may have replaced one) and retries if not."""
        bucket = await self._bucket(upload.bucket)
        check_part_order(requested)
        self._gate.check_write(0)  # the gate now; the capacity once the parts are known
        version_id = await replica_version_id(self._meta, caller, bucket, upload.key,
                                              new_version_id(bucket))
        await refuse_locked_overwrite(self._meta, bucket, upload.key, self._clock())
        lock_config = await lock_configuration(self._meta, bucket)
        usage_check = await quota_check(self._meta, upload.bucket)
        peers_answered = True  # False: a part missing here may be on a node not asked
        if self._peers.enabled:
            peers_answered = await self._parts_known(upload, requested)
        blob_id = new_blob_id()
        try:
            for _ in range(COMPLETE_ATTEMPTS):
                record = await self._describe(upload, requested, claims, version_id, blob_id,
                                             lock_config)
                if self._replication is not None:
                    record = replace(record, replication_status=await
                                     self._replication.status(caller, record))
                try:
                    result = await self._meta.complete_upload(
                        upload.upload_id, record, precondition, usage_check,
                        **await note_for(self._outbox, caller, ChangeKind.OBJECT_WRITTEN,
                                         record.bucket))
                except PartsChanged:
                    continue
                await self._files.restamp(record, result.record)
                await self._completed(upload, result)
                # The upload's end first: a quorum shortfall of the object's fan-out
                # raises, and the peers must still learn that the upload is closed.
                await self._report(ChangeKind.UPLOAD_COMPLETED, caller, upload.bucket,
                                   upload.key, subject=upload.upload_id)
                await self._report(ChangeKind.OBJECT_WRITTEN, caller, upload.bucket,
                                   upload.key, result.record)
                return result.record
        except (S3Error, RecordNotFound, PreconditionNotMet) as error:
            return await self._completion_failed(caller, upload, requested, blob_id,
                                                 version_id, error, peers_answered)
        await self._files.delete([blob_id])
        raise S3Error("ConditionalRequestConflict", "The parts changed while the upload was "
                      "being completed. Retry the request.")

    async def _parts_known(self, upload: UploadRecord,
                           requested: Sequence[RequestedPart]) -> bool:
        """(Cluster) A completion naming a part not held here as named (uploaded, or
        replaced, through another node) merges the peers' control planes first. False
        when that merge could not ask every node that may hold the part."""
        stored = await self._meta.list_parts(upload.upload_id, 0, MAX_PART_NUMBER)
        held = {(part.part_number, part.etag) for part in stored}
        if any((entry.part_number, normalize_etag(entry.etag)) not in held
               for entry in requested):
            return await self._peers.refresh()
        return True

    async def _completed(self, upload: UploadRecord, result: CompletedUpload) -> None:
        """After the commit: the upload's record goes (a crash before leaves a record whose
        parts the object references: `recover` knows it completed), then the files the
        object replaced, then the parts it does not use."""
        await self._files.remove_upload(upload.upload_id)
        await self._files.delete_replaced(result.replaced_blob_ids)
        await self._files.delete([blob_id for blob_id in result.orphaned_blob_ids
                                  if blob_id not in result.replaced_blob_ids])

    async def _describe(
        self, upload: UploadRecord, requested: Sequence[RequestedPart],
        claims: CompletionClaims, version_id: str, blob_id: str,
        lock_config: lock_rules.LockConfiguration | None = None,
    ) -> ObjectRecord:
        """Read and check the parts, build the record (with the lock headers of the
        upload, else the bucket's default retention), make its sidecar durable."""
        mode = ChecksumMode.of(upload)
        stored = await self._meta.list_parts(upload.upload_id, 0, MAX_PART_NUMBER)
        parts = select_parts(upload.upload_id, mode, requested, stored)
        if self._peers.enabled and not await self._peers.fetch_parts(upload, parts):
            raise S3Error("ServiceUnavailable", "The data of a part of this upload is not "
                          "available on this node or its peers yet. Retry the request.")
        checksums = object_checksums(mode, parts)
        size = sum(part.size for part in parts)
        check_claims(claims, mode, checksums, size)
        # Rule 12: every part is on this node now; each peer must find room for all of them.
        self._gate.check_write(size, held_bytes=size)
        record = composite_record(upload, parts, version_id=version_id, blob_id=blob_id,
                                  now=self._clock(), checksums=checksums,
                                  checksum_type=mode.type)
        plan = upload_plan(upload)
        if not plan.identity:  # the upload's stages; part keys bound to the version now
            record = replace(record, **self._blobs.stages.composite_fields(
                plan, upload.bucket, upload.key, upload.upload_id, version_id, record.parts,
                upload.extra.get(SSEC_EXTRA)))
        record = lock_rules.with_lock(record, lock_rules.LockRequest.from_extra(upload.extra),
                                      lock_config, record.last_modified)
        await self._files.store_sidecar(blob_id, record_to_sidecar(record))
        return record

    async def _completion_failed(
        self, caller: Caller, upload: UploadRecord, requested: Sequence[RequestedPart],
        blob_id: str, version_id: str, error: Exception, peers_answered: bool = True,
    ) -> ObjectRecord:
        if isinstance(error, RecordNotFound):
            # A retried transaction whose first COMMIT succeeded finds the upload gone:
            # the object it stored is ours, and its sidecar must stay.
            current = await self._meta.get_object(upload.bucket, upload.key, version_id)
            if current is not None and current.blob_id == blob_id:
                await self._files.remove_upload(upload.upload_id)
                await self._report(ChangeKind.OBJECT_WRITTEN, caller, upload.bucket,
                                   upload.key, current)
                return current
        await self._files.delete([blob_id])
        if isinstance(error, RecordNotFound) or (
                isinstance(error, S3Error) and error.code == "InvalidPart"):
            # The upload (or its parts) went under us: a client's retry of a completion
            # that was still running when it gave up, and the first one won.
            done = await self.completed(upload.bucket, upload.key, upload.upload_id, requested)
            if done is not None:
                return done
        if isinstance(error, S3Error) and error.code == "InvalidPart" and not peers_answered:
            # Not here, but a node that may hold it could not be asked: retry, not refuse.
            raise S3Error("ServiceUnavailable", "A part of this upload is not known here and "
                          "a node that may hold it could not be asked. Retry the "
                          "request.") from None
        if isinstance(error, PreconditionNotMet):
            raise precondition_error(error.reason, upload.key) from None
        if isinstance(error, RecordNotFound):
            await self._bucket(upload.bucket)
            raise S3Error("NoSuchUpload", UploadId=upload.upload_id) from None
        raise error

    async def complete_by_id(
        self, caller: Caller, bucket_name: str, key: str, upload_id: str,
        requested: Sequence[RequestedPart], claims: CompletionClaims,
        precondition: WritePrecondition | None = None,
    ) -> ObjectRecord:
        """CompleteMultipartUpload: the object the open upload `upload_id` becomes, or,
        for a retry of a completion that succeeded (a client that timed out), the object
        that one made (`completed`), as AWS answers it."""
        try:
            upload = await self.upload(bucket_name, key, upload_id)
        except S3Error as error:
            if error.code != "NoSuchUpload":
                raise
            done = await self.completed(bucket_name, key, upload_id, requested)
            if done is None and self._peers.enabled:
                done = await self._completed_elsewhere(bucket_name, key, requested)
            if done is None:
                raise
            return done
        return await self.complete(caller, upload, requested, claims, precondition)

    async def _completed_elsewhere(
        self, bucket_name: str, key: str, requested: Sequence[RequestedPart]
    ) -> ObjectRecord | None:
        """(Cluster) A retry, through this node, of a completion another node made (the
        record `completed` reads is node-local): the key's latest version, when it is a
        composite of exactly the requested parts made at most COMPLETED_UPLOAD_KEPT_SECONDS
        ago. The parts' ETags are the MD5s of their bytes, so another upload with the same
        parts would have made the same object."""
        record = await self._meta.get_object(bucket_name, key)
        if (record is None or record.is_delete_marker or not record.parts
                or self._clock() - record.last_modified > COMPLETED_UPLOAD_KEPT_SECONDS):
            return None
        return record if same_parts(requested, record) else None

    async def completed(
        self, bucket_name: str, key: str, upload_id: str, requested: Sequence[RequestedPart]
    ) -> ObjectRecord | None:
        """The object a completion of `upload_id` with the same part list made, if that
        was at most COMPLETED_UPLOAD_KEPT_SECONDS ago and the version still exists (a
        version overwritten on an unversioned bucket, or deleted, no longer counts)."""
        completion = await self._meta.get_completion(upload_id)
        if completion is None or (completion.bucket, completion.key) != (bucket_name, key):
            return None
        record = await self._meta.get_object(bucket_name, key, completion.version_id)
        if record is None or record.blob_id != completion.blob_id:
            return None
        return record if same_parts(requested, record) else None

    # -- listing uploads -------------------------------------------------------------
    async def list_uploads(
        self, bucket_name: str, *, prefix: str, delimiter: str, key_marker: str,
        upload_id_marker: str, max_uploads: int,
    ) -> UploadListing:
        """Open uploads by key then age, delimiter groups counted once before the
        max-uploads cut; a group is skipped with one new range query."""
        await self._bucket(bucket_name)
        listing = UploadListing()
        if max_uploads <= 0:
            return listing
        cursor = (key_marker, upload_id_marker if key_marker else "")
        batch_size = min(max_uploads + 1, 1000)
        while True:
            batch = await self._meta.list_uploads(bucket_name, prefix, cursor[0], cursor[1],
                                                  batch_size)
            cursor, jumped = _add_uploads(listing, batch, prefix, delimiter, key_marker,
                                          max_uploads)
            if listing.is_truncated or (not jumped and len(batch) < batch_size):
                return listing


def _add_uploads(
    listing: UploadListing, batch: Sequence[UploadRecord], prefix: str, delimiter: str,
    key_marker: str, max_uploads: int,
) -> tuple[tuple[str, str], bool]:
    """Add a batch to the listing; returns the next cursor and whether it jumped past a
    group (the batch was not consumed to its end)."""
    cursor = ("", "")
    for upload in batch:
        if len(listing.uploads) + len(listing.common_prefixes) >= max_uploads:
            listing.is_truncated = True
            return cursor, False
        group = group_of(upload.key, prefix, delimiter)
        if group is None:
            listing.uploads.append(upload)
            listing.next_key_marker = upload.key
            listing.next_upload_id_marker = upload.upload_id
            cursor = (upload.key, upload.upload_id)
            continue
        if group > key_marker:
            listing.common_prefixes.append(group)
            listing.next_key_marker = group
            listing.next_upload_id_marker = ""
        return (group + _AFTER_ALL, ""), True
    return cursor, False


STAGE_PLAN_EXTRA = "stage_plan"  # upload.extra: the plan its parts are written with
SSEC_EXTRA = "ssec"  # upload.extra: the verifier of an SSE-C upload's customer key


def _part_etag(md5_hex: str, staged: dict[str, Any] | None) -> str:
    """A part's ETag: the MD5 of its bytes, but for SSE-C (not an MD5, as on AWS)."""
    if staged and staged.get("encryption_algorithm") == SSE_C:
        return etag_of(md5_hex, staged["encryption_params"])
    return md5_hex


def upload_plan(upload: UploadRecord) -> StagePlan:
    """The stages every part of `upload` is written with (identity: stored as sent)."""
    return plan_from_document(upload.extra.get(STAGE_PLAN_EXTRA))


def _part_key_params(staged: dict[str, Any] | None) -> dict[str, Any]:
    """What a part's row keeps of its writer's stage fields: its wrapped data key."""
    if not staged or not staged.get("encryption_params"):
        return {}
    return {**staged["encryption_params"], "key_id": staged["encryption_key_id"]}


def _source_changed(source: ObjectRecord) -> S3Error:
    return S3Error("NoSuchKey", "The copy source changed while it was copied.",
                   Key=source.key)


def _refuse_other_algorithm(mode: ChecksumMode, claimed: dict[str, str]) -> None:
    other = part_checksum_mismatch(mode, claimed)
    if other is not None:
        raise S3Error("InvalidRequest", "Checksum Type mismatch occurred, expected checksum "
                      f"Type: {mode.algorithm}, actual checksum Type: {other}")


__all__ = [
    "COMPOSITE",
    "FULL_OBJECT",
    "MAX_PART_NUMBER",
    "MIN_PART_BYTES",
    "ChecksumMode",
    "CompletionClaims",
    "MultipartService",
    "RequestedPart",
    "SSEC_EXTRA",
    "UploadListing",
    "upload_plan",
]
