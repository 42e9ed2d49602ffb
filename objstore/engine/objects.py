"""Object use cases: store, read, delete, list.

The write path is the durability contract (DESIGN invariant 1): the spooled body becomes a
blob with its sidecar (fsynced, on the IO pool), then the metadata row is committed, then
blobs the write made unreachable are removed. Events, audit, quotas and cluster fan-out hook
in here later, so no client write can bypass them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from twisted.logger import Logger

from objstore.blobs.segments import Segment, plan_segments
from objstore.blobs.sidecar import record_to_sidecar
from objstore.blobs.spool import BodySpool
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.engine.names import key_problem
from objstore.errors import S3Error
from objstore.iam.identity import Principal
from objstore.meta.records import NULL_VERSION, BucketRecord, ObjectRecord
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

log = Logger()


@dataclass(frozen=True)
class ObjectAttrs:
    """What a client sets on a new object besides its bytes."""

    content_type: str = "binary/octet-stream"
    user_metadata: dict[str, str] = field(default_factory=dict)
    system_headers: dict[str, str] = field(default_factory=dict)
    storage_class: str = "STANDARD"
    checksums: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


class ObjectService:
    def __init__(
        self,
        meta: MetaStore,
        blobs: BlobStore,
        io: Runner,
        *,
        clock: Callable[[], float],
    ) -> None:
        self._meta = meta
        self._blobs = blobs
        self._io = io
        self._clock = clock

    async def _bucket(self, name: str) -> BucketRecord:
        bucket = await self._meta.get_bucket(name)
        if bucket is None:
            raise S3Error("NoSuchBucket", BucketName=name)
        return bucket

    async def put(
        self,
        principal: Principal,
        bucket_name: str,
        key: str,
        body: BodySpool,
        attrs: ObjectAttrs,
    ) -> ObjectRecord:
        _check_key(key)
        bucket = await self._bucket(bucket_name)
        version_id = str(uuid.uuid4()) if bucket.versioning == "Enabled" else NULL_VERSION
        record = ObjectRecord(
            bucket=bucket_name,
            key=key,
            version_id=version_id,
            blob_id=new_blob_id(),
            size=body.length,
            etag=body.md5_hex,
            last_modified=self._clock(),
            owner_id=principal.user_id,
            owner_name=principal.username,
            content_type=attrs.content_type,
            user_metadata=dict(attrs.user_metadata),
            system_headers=dict(attrs.system_headers),
            storage_class=attrs.storage_class,
            checksums=dict(attrs.checksums),
            checksum_type="FULL_OBJECT" if attrs.checksums else None,
            tags=dict(attrs.tags),
        )
        await self._store_blob(body, record)
        try:
            result = await self._meta.put_object(record)
        except BaseException:
            await self._io.run(self._blobs.delete, record.blob_id)
            raise
        await self._delete_blobs(result.orphaned_blob_ids)
        return result.record

    async def _store_blob(self, body: BodySpool, record: ObjectRecord) -> None:
        assert record.blob_id is not None
        sidecar = record_to_sidecar(record)
        if body.in_memory:
            data = body.memory_bytes()
            await self._io.run(self._blobs.commit_bytes, data, record.blob_id, sidecar)
        else:
            fd, path = body.detach_file()
            await self._io.run(self._blobs.commit_file, fd, path, record.blob_id, sidecar)

    async def _delete_blobs(self, blob_ids: tuple[str, ...] | list[str]) -> None:
        for blob_id in blob_ids:
            try:
                await self._io.run(self._blobs.delete, blob_id)
            except OSError:
                # The row is gone; the file is an orphan `objstore check --repair` reclaims.
                log.failure("could not delete unreachable blob {blob_id}", blob_id=blob_id)

    async def head(
        self, bucket_name: str, key: str, version_id: str | None = None
    ) -> ObjectRecord:
        await self._bucket(bucket_name)
        record = await self._meta.get_object(bucket_name, key, version_id)
        if record is None:
            if version_id is not None:
                raise S3Error("NoSuchVersion", Key=key, VersionId=version_id)
            raise S3Error("NoSuchKey", Key=key)
        if record.is_delete_marker:
            headers = {"x-amz-delete-marker": "true", "x-amz-version-id": record.version_id}
            if version_id is not None:
                raise S3Error("MethodNotAllowed", headers=headers)
            raise S3Error("NoSuchKey", headers=headers, Key=key)
        return record

    async def read_bytes(self, record: ObjectRecord, start: int, length: int) -> bytes:
        """A small object's bytes (or a slice), read on the IO pool."""
        segments = plan_segments(record, start, length)
        try:
            return await self._io.run(self._blobs.read_segments, segments)
        except FileNotFoundError:
            raise _missing_blob(record) from None

    def read_plan(self, record: ObjectRecord, start: int, length: int) -> list[Segment]:
        """The blob segments holding bytes [start, start + length) of the object."""
        return plan_segments(record, start, length)

    def open_blob(self, blob_id: str) -> int:
        """An fd of a blob for streaming (called on the reactor thread: the data is
        normally in the page cache); the caller closes it."""
        return self._blobs.open(blob_id)

    async def delete(self, bucket_name: str, key: str) -> ObjectRecord | None:
        """Delete the current object of an unversioned bucket (missing keys are not an
        error). Versioned deletes (delete markers) belong to the versioning use cases."""
        bucket = await self._bucket(bucket_name)
        if bucket.versioning != "Disabled":
            raise S3Error(
                "NotImplemented", "Deletes on versioned buckets are not implemented yet."
            )
        result = await self._meta.delete_object_version(bucket_name, key, NULL_VERSION)
        removed = result.removed
        if removed is not None:
            blob_ids = [removed.blob_id] if removed.blob_id else []
            blob_ids += [part.blob_id for part in removed.parts]
            await self._delete_blobs(blob_ids)
        return removed

    async def list_page(
        self, bucket_name: str, *, prefix: str, start_after: str, limit: int
    ) -> list[ObjectRecord]:
        """One page of latest versions; the caller has checked that the bucket exists."""
        return await self._meta.list_latest(bucket_name, prefix, start_after, limit)


def _missing_blob(record: ObjectRecord) -> S3Error:
    log.error(
        "blob {blob_id} of {bucket}/{key} is missing; run `objstore check`",
        blob_id=record.blob_id, bucket=record.bucket, key=record.key,
    )
    return S3Error("InternalError", "The object's data is not available on this node.")


def _check_key(key: str) -> None:
    problem = key_problem(key)
    if problem:
        raise S3Error(problem[0], problem[1], Key=key)
