"""The `rotate-key` maintenance job: every data key wrapped by an older master key version
(crypto/master_key.py `Keyring.needs_rewrap`) is unwrapped and wrapped again by the active
version; the stored bytes are never read or rewritten, so a version of any size costs the
same few microseconds. Two walks, one after the other:

1. object versions (cursor: JSON `[bucket, key, version_id]` of the last one done): a
   single-blob version's data key, or each part's data key of a completed multipart
   (composite) version, all under the version's key id. Each swap is made only when the
   row still holds the wrapped keys read (meta/rewrap_queries.py: a write or delete racing
   the job wins); it takes a fresh seq and a `stages_updated_at` stamp, so that on a
   cluster the peers take the new wrap at their next anti-entropy pass (docs/CLUSTER.md).
   Then the version's sidecar is rewritten (so `objstore recover` restores the new wrap; a
   crash between the two leaves the old wrap in the sidecar, which still opens while the
   old version stays in the keyring).
2. parts of open multipart uploads (cursor: JSON `{"parts": [upload_id, part_number]}`),
   each bound to its upload and naming its own key id; its part sidecar is rewritten too.

SSE-C versions (no master key wraps them) and parameters this build does not know how to
re-wrap are left as they are and counted in the log. Params: bucket (optional: every
bucket), prefix (optional).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from objstore.blobs.sidecar import record_to_sidecar
from objstore.crypto.customer_key import SSE_C
from objstore.crypto.master_key import key_context, part_context
from objstore.crypto.packages import FORMAT
from objstore.engine.job_rules import JobError, JobRecord, Progress
from objstore.engine.multipart_rules import part_sidecar
from objstore.meta.records import ObjectRecord, PartRecord, PartRef, UploadRecord

PAGE = 100
_REWRAPPABLE = frozenset({"format", "wrapped_key"})
_PER_PART = {"format": FORMAT, "keys": "per-part"}
_PARTS_PHASE = "parts"


def parse_cursor(cursor: str | None) -> tuple[str, str, str] | None:
    if not cursor:
        return None
    bucket, key, version_id = json.loads(cursor)
    return str(bucket), str(key), str(version_id)


def dump_cursor(record: ObjectRecord) -> str:
    return json.dumps([record.bucket, record.key, record.version_id])


def _parts_cursor(cursor: str | None) -> tuple[bool, tuple[str, int] | None]:
    """Whether `cursor` is in the second walk (open uploads' parts), and where."""
    if not cursor or not cursor.startswith("{"):
        return False, None
    after = json.loads(cursor).get(_PARTS_PHASE)
    return True, None if after is None else (str(after[0]), int(after[1]))


def _wrapped(params: dict[str, Any]) -> bool:
    return params.get("format") == FORMAT and isinstance(params.get("wrapped_key"), str)


def rewrapped(keyring: Any, record: ObjectRecord
              ) -> tuple[dict[str, Any], tuple[PartRef, ...] | None] | None:
    """The encryption_params (and a composite's parts) of `record` with every data key
    wrapped by the keyring's active version; None when this job leaves it as it is (SSE-C,
    or a format it does not know)."""
    params = record.encryption_params or {}
    if record.encryption_algorithm == SSE_C:
        return None
    if set(params) == _REWRAPPABLE and _wrapped(params):
        context = key_context(record.bucket, record.key, record.version_id)
        data_key = keyring.unwrap(record.encryption_key_id, params["wrapped_key"], context)
        return {**params, "wrapped_key": keyring.wrap(data_key, context)}, None
    if params == _PER_PART and record.parts and all(
            set(part.encryption_params) == _REWRAPPABLE and _wrapped(part.encryption_params)
            for part in record.parts):
        parts = []
        for part in record.parts:
            context = part_context(record.bucket, record.key, record.version_id, part.blob_id)
            data_key = keyring.unwrap(record.encryption_key_id,
                                      part.encryption_params["wrapped_key"], context)
            parts.append(replace(part, encryption_params={
                **part.encryption_params, "wrapped_key": keyring.wrap(data_key, context)}))
        return dict(params), tuple(parts)
    return None


def rewrapped_part(keyring: Any, upload: UploadRecord, part: PartRecord
                   ) -> dict[str, Any] | None:
    """An open upload's part's encryption_params with its data key wrapped by the active
    version; None when it needs none or can not be (no key id: SSE-C)."""
    params = part.encryption_params
    key_id = params.get("key_id")
    if not key_id or not _wrapped(params) or not keyring.needs_rewrap(key_id):
        return None
    context = part_context(upload.bucket, upload.key, upload.upload_id, part.blob_id)
    data_key = keyring.unwrap(key_id, params["wrapped_key"], context)
    return {**params, "wrapped_key": keyring.wrap(data_key, context),
            "key_id": keyring.key_id}


class RotateKeyRunner:
    """`rotate-key`: see the module's docstring. `services`: meta (the async store), blobs
    (the BlobStore, whose stages hold the keyring), io (the IO pool for sidecars)."""

    def __init__(self, job: JobRecord, context: Any) -> None:
        self._job = job
        self._context = context
        services = context.services
        self._meta = services["meta"]
        self._blobs = services["blobs"]
        self._io = services["io"]
        self._bucket = job.params.get("bucket")
        self._prefix = job.params.get("prefix") or ""
        self._total = job.total
        self._done = job.done
        self._skipped = 0

    async def step(self, cursor: str | None) -> Progress:
        keyring = self._blobs.stages.master_key
        if keyring is None:
            raise JobError("rotate-key needs [encryption] enabled on this node")
        scope = {"bucket": self._bucket, "prefix": self._prefix}
        if cursor is None and self._total == 0:
            self._total = (await self._meta.count_encrypted_versions(**scope)
                           + await self._meta.count_wrapped_parts(**scope))
        in_parts, after_part = _parts_cursor(cursor)
        if in_parts:
            return await self._parts_step(keyring, after_part, scope)
        page: list[ObjectRecord] = await self._meta.encrypted_versions(
            parse_cursor(cursor), PAGE, **scope)
        for record in page:
            if keyring.needs_rewrap(record.encryption_key_id):
                await self._rewrap(keyring, record)
            self._done += 1
        if len(page) < PAGE:
            return self._progress(json.dumps({_PARTS_PHASE: None}))
        return self._progress(dump_cursor(page[-1]))

    async def _parts_step(self, keyring: Any, after: tuple[str, int] | None,
                          scope: dict[str, Any]) -> Progress:
        page: list[tuple[UploadRecord, PartRecord]] = await self._meta.wrapped_parts(
            after, PAGE, **scope)
        for upload, part in page:
            fresh = rewrapped_part(keyring, upload, part)
            if fresh is not None:
                stored = await self._meta.swap_part_key(part, fresh)
                if stored is not None:
                    await self._io.run(self._blobs.write_sidecar, stored.blob_id,
                                       part_sidecar(upload, stored))
            self._done += 1
        if len(page) < PAGE:
            if self._skipped:
                await self._context.log("warn", f"{self._skipped} versions left as they are "
                                        "(SSE-C, or a format this build does not re-wrap)")
            return self._progress(None, finished=True)
        last = page[-1][1]
        return self._progress(json.dumps({_PARTS_PHASE: [last.upload_id, last.part_number]}))

    def _progress(self, cursor: str | None, finished: bool = False) -> Progress:
        return Progress(cursor, self._done, max(self._total, self._done), finished=finished)

    async def _rewrap(self, keyring: Any, record: ObjectRecord) -> None:
        fresh = rewrapped(keyring, record)
        if fresh is None:
            self._skipped += 1
            return
        params, parts = fresh
        stored = await self._meta.swap_wrapped_key(record, keyring.key_id, params, parts)
        if stored is not None and stored.blob_id is not None:
            await self._io.run(self._blobs.write_sidecar, stored.blob_id,
                               record_to_sidecar(stored))
