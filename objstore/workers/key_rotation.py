"""The `rotate-key` maintenance job: every encrypted version whose data key is wrapped by
an older master key version (crypto/master_key.py `Keyring.needs_rewrap`) gets its data key
unwrapped and wrapped again by the active version; the stored bytes are never read or
rewritten, so a version of any size costs the same few microseconds.

Each step takes a page of encrypted versions after the cursor (the last version done, as
JSON `[bucket, key, version_id]`), swaps each one's wrapped key only when its row still
holds the wrapped key read (meta/rewrap_queries.py: a write or delete racing the job wins),
then rewrites that version's sidecar (so `objstore recover` restores the new wrap; a crash
between the two leaves the old wrap in the sidecar, which still opens while the old
version stays in the keyring). A version whose parameters this build does not know how to
re-wrap (a format with more than one data key) is left as it is and counted in the log.
Params: bucket (optional: every bucket), prefix (optional).
"""

from __future__ import annotations

import json
from typing import Any

from objstore.blobs.sidecar import record_to_sidecar
from objstore.crypto.master_key import key_context
from objstore.crypto.packages import FORMAT
from objstore.engine.job_rules import JobError, JobRecord, Progress
from objstore.meta.records import ObjectRecord

PAGE = 100
_REWRAPPABLE = frozenset({"format", "wrapped_key"})


def parse_cursor(cursor: str | None) -> tuple[str, str, str] | None:
    if not cursor:
        return None
    bucket, key, version_id = json.loads(cursor)
    return str(bucket), str(key), str(version_id)


def dump_cursor(record: ObjectRecord) -> str:
    return json.dumps([record.bucket, record.key, record.version_id])


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
        if cursor is None and self._total == 0:
            self._total = await self._meta.count_encrypted_versions(
                bucket=self._bucket, prefix=self._prefix)
        page: list[ObjectRecord] = await self._meta.encrypted_versions(
            parse_cursor(cursor), PAGE, bucket=self._bucket, prefix=self._prefix)
        for record in page:
            if keyring.needs_rewrap(record.encryption_key_id):
                await self._rewrap(keyring, record)
            self._done += 1
        if len(page) < PAGE:
            if self._skipped:
                await self._context.log("warn", f"{self._skipped} versions left as they are "
                                        "(a format this build does not re-wrap)")
            return Progress(cursor, self._done, max(self._total, self._done), finished=True)
        return Progress(dump_cursor(page[-1]), self._done, max(self._total, self._done))

    async def _rewrap(self, keyring: Any, record: ObjectRecord) -> None:
        params = record.encryption_params or {}
        if set(params) != _REWRAPPABLE or params.get("format") != FORMAT:
            self._skipped += 1
            return
        context = key_context(record.bucket, record.key, record.version_id)
        data_key = keyring.unwrap(record.encryption_key_id, params["wrapped_key"], context)
        fresh = {**params, "wrapped_key": keyring.wrap(data_key, context)}
        stored = await self._meta.swap_wrapped_key(record, keyring.key_id, fresh)
        if stored is not None and stored.blob_id is not None:
            await self._io.run(self._blobs.write_sidecar, stored.blob_id,
                               record_to_sidecar(stored))
