"""Rewriting one stored version through other stages, in place (the `encrypt`, `decrypt`,
`compress` and `decompress` jobs, workers/stage_jobs.py): the version's bytes are read
through its current stages and written through the new plan's as a new blob, then the row
is switched to it, and the old blob goes.

What a client sees does not change: the version id, ETag, size, checksums, metadata, tags,
lock state and timestamps stay (only the blob id and the stage fields of the row change;
the row takes a fresh seq and a new `stages_updated_at` stamp, so that on a cluster the
peers fetch the new stored bytes through anti-entropy: meta/rewrap_queries.py). A write
racing the rewrite wins: the switch is made under the
engine's key lock (`KeyLocks`, which tag, retention, legal hold and version deletes take,
so their sidecar rewrites and this one land in the order of the row updates) and only when
the row still names the blob that was read; a version replaced (an overwrite of the null
version) or deleted meanwhile keeps the change, the new blob is removed and the version
reported skipped. Tag or lock changes made meanwhile are kept: the switch writes only the
blob id and the stage fields. The new blob carries a provisional
sidecar (ignored by `recover`, an orphan for `check --repair` after a crash) until the row
names it; then its real sidecar, then the old blob's removal.

The copy runs on the IO pool; nothing here blocks the reactor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from objstore.blobs.plan import StagePlan
from objstore.blobs.segments import Segment
from objstore.blobs.sidecar import record_to_sidecar
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.meta.records import ObjectRecord
from objstore.threads import Runner

T = TypeVar("T")
PROVISIONAL_KIND = "copy-in-progress"  # engine/objects.py PROVISIONAL_SIDECAR_KIND


class Locks(Protocol):
    async def run(self, bucket: str, key: str, fn: Callable[[], Awaitable[T]]) -> T: ...


class SwapStore(Protocol):
    def swap_blob(self, record: ObjectRecord, rewritten: ObjectRecord) -> Any: ...


class StageRewriter:
    def __init__(self, meta: SwapStore, blobs: BlobStore, io: Runner, locks: Locks) -> None:
        self._meta = meta
        self._blobs = blobs
        self._io = io
        self._locks = locks

    async def rewrite(self, record: ObjectRecord, plan: StagePlan) -> bool:
        """`record`'s version stored under `plan`; False when a racing change won."""
        assert record.blob_id is not None and not record.parts
        rewritten = await self._io.run(self._copy, record, plan)
        assert rewritten.blob_id is not None

        async def switch() -> ObjectRecord | None:
            stored: ObjectRecord | None = await self._meta.swap_blob(record, rewritten)
            return stored

        try:
            stored = await self._locks.run(record.bucket, record.key, switch)
        except BaseException:
            await self._io.run(self._blobs.delete, rewritten.blob_id)
            raise
        if stored is None:
            await self._io.run(self._blobs.delete, rewritten.blob_id)
            return False
        await self._io.run(self._settle, stored, record.blob_id)
        return True

    def _copy(self, record: ObjectRecord, plan: StagePlan) -> ObjectRecord:
        """(IO thread) The new blob with a provisional sidecar; the record naming it."""
        blobs = self._blobs
        writer = blobs.stages.writer(blobs.tmp_dir, plan, memory_limit=0)
        try:
            staged = writer.stage_fields(record.bucket, record.key, record.version_id) or {}
            fields = {"compression": None, "encryption_algorithm": None,
                      "encryption_key_id": None, "encryption_params": {}, **staged}
            rewritten = replace(record, blob_id=new_blob_id(), **fields)
            assert rewritten.blob_id is not None
            sidecar = {**record_to_sidecar(rewritten), "kind": PROVISIONAL_KIND}
            blobs.copy_segments([Segment(record.blob_id or "", 0, record.size)],
                                rewritten.blob_id, sidecar, want_md5=False, source=record,
                                writer=writer)
        finally:
            writer.close()
        return rewritten

    def _settle(self, stored: ObjectRecord, old_blob_id: str | None) -> None:
        """(IO thread) The real sidecar of the row's new blob, then the old blob's end."""
        assert stored.blob_id is not None
        self._blobs.write_sidecar(stored.blob_id, record_to_sidecar(stored))
        self._blobs.delete_version(old_blob_id)
