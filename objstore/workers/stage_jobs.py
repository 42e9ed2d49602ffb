"""The `encrypt`, `decrypt`, `compress` and `decompress` maintenance jobs: every version of
a bucket (or of every bucket), under a prefix, whose stages differ from what the job asks
is rewritten in place through engine/stage_rewrite.py (versions, tags, lock state,
metadata and ETags kept, also when changed meanwhile; an overwrite or delete racing the
rewrite wins).

* encrypt: unencrypted versions get SSE-S3 under the active master key (compression kept);
* decrypt: SSE-S3 versions are stored without encryption (compression kept);
* compress: uncompressed versions of a bucket with a compression setting get it (content
  types that are compressed already are left, as on PUT; encryption kept, with a new
  data key);
* decompress: compressed versions are stored without compression (encryption kept).

Multipart objects (their parts), and versions whose encryption this build can not
rewrite (a format with more than one data key, customer keys), are left as they are and
counted in the job's log. Each step walks a page of versions after the cursor (JSON
`[bucket, key, version_id]` of the last one walked), so a restart resumes after the last
recorded page; the walk selects by stages, so a version rewritten but not yet recorded is
not rewritten twice. `rate_bytes_per_sec` (0: unlimited) paces the bytes read.
"""

from __future__ import annotations

from typing import Any

from objstore.blobs.plan import MASTER_KEY_ENCRYPTIONS, SSE_S3, StagePlan
from objstore.crypto.packages import FORMAT
from objstore.engine.job_rules import JobError, JobRecord, Progress
from objstore.engine.stage_plan import BucketStageSettings, already_compressed
from objstore.engine.stage_rewrite import StageRewriter
from objstore.meta.records import ObjectRecord
from objstore.workers.key_rotation import dump_cursor, parse_cursor

PAGE = 20
# job type -> the versions it walks (meta/rewrap_queries.py STAGE_FILTERS)
WALKS = {"encrypt": "plain", "decrypt": "encrypted", "compress": "uncompressed",
         "decompress": "compressed"}


def _sse_s3_rewritable(record: ObjectRecord) -> bool:
    params = record.encryption_params or {}
    return (record.encryption_algorithm in MASTER_KEY_ENCRYPTIONS
            and params.get("format") == FORMAT
            and set(params) == {"format", "wrapped_key"})


def target_plan(job_type: str, record: ObjectRecord, bucket: BucketStageSettings,
                key_id: str | None) -> StagePlan | None:
    """The plan `record` is rewritten to by `job_type`; None: leave it as it is. Pure."""
    if record.parts or record.is_delete_marker:
        return None
    encrypted = record.encryption_algorithm is not None
    if encrypted and not _sse_s3_rewritable(record):
        return None
    encryption = record.encryption_algorithm if encrypted else None  # SSE-S3 or aws:kms
    compression = record.compression
    level = bucket.compression_level if bucket.compression == compression else None
    if job_type == "encrypt":
        if encrypted or key_id is None:
            return None
        encryption = SSE_S3
    elif job_type == "decrypt":
        if not encrypted:
            return None
        encryption = None
    elif job_type == "compress":
        if compression is not None or bucket.compression is None \
                or already_compressed(record.content_type):
            return None
        compression, level = bucket.compression, bucket.compression_level
    elif job_type == "decompress":
        if compression is None:
            return None
        compression, level = None, None
    else:
        return None
    return StagePlan(compression=compression, encryption=encryption,
                     key_id=key_id if encryption is not None else None,
                     compression_level=level if compression is not None else None)


class StageJobRunner:
    """One of the four rewrite jobs. `services`: meta, blobs, io, locks (KeyLocks) and
    bucket_config (its `stage_settings(bucket)`)."""

    def __init__(self, job: JobRecord, context: Any) -> None:
        self._job = job
        self._context = context
        services = context.services
        self._meta = services["meta"]
        self._blobs = services["blobs"]
        self._bucket_config = services["bucket_config"]
        self._rewriter = StageRewriter(self._meta, self._blobs, services["io"],
                                       services["locks"])
        self._walk = WALKS[job.job_type]
        self._bucket = job.params.get("bucket")
        self._prefix = job.params.get("prefix") or ""
        self._rate = int(job.params.get("rate_bytes_per_sec") or 0)
        self._total, self._done = job.total, job.done
        self._settings: dict[str, BucketStageSettings] = {}
        self._rewritten = self._raced = self._left = 0
        self._bytes = 0
        self._began = context.clock.seconds()

    async def step(self, cursor: str | None) -> Progress:
        key_id = self._blobs.stages.key_id
        if self._job.job_type == "encrypt" and key_id is None:
            raise JobError("encrypt needs [encryption] enabled on this node")
        if cursor is None and self._total == 0:
            self._total, _ = await self._meta.count_versions_by_stages(
                self._walk, bucket=self._bucket, prefix=self._prefix)
        page: list[ObjectRecord] = await self._meta.versions_by_stages(
            self._walk, parse_cursor(cursor), PAGE, bucket=self._bucket, prefix=self._prefix)
        for record in page:
            plan = target_plan(self._job.job_type, record, await self._settings_of(record),
                               key_id)
            if plan is None:
                self._left += 1
            elif await self._rewriter.rewrite(record, plan):
                self._rewritten += 1
                await self._pace(record.size)
            else:
                self._raced += 1
            self._done += 1
        if len(page) < PAGE:
            await self._context.log("info", f"{self._rewritten} versions rewritten, "
                                    f"{self._raced} changed meanwhile (left to the change), "
                                    f"{self._left} left as they are (multipart or not "
                                    "rewritable by this job)")
            # Versions rewritten in a step a kill cut short leave the walk (it selects by
            # stages) without being counted again: at the end every one was walked.
            done = max(self._total, self._done)
            return Progress(cursor, done, done, finished=True)
        return Progress(dump_cursor(page[-1]), self._done, max(self._total, self._done))

    async def _settings_of(self, record: ObjectRecord) -> BucketStageSettings:
        found = self._settings.get(record.bucket)
        if found is None:
            found = await self._bucket_config.stage_settings(record.bucket)
            self._settings[record.bucket] = found
        return found

    async def _pace(self, size: int) -> None:
        self._bytes += size
        if self._rate <= 0:
            return
        ahead = self._bytes / self._rate - (self._context.clock.seconds() - self._began)
        if ahead > 0:
            await self._context.sleep(ahead)
