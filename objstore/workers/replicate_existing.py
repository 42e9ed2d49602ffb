"""The `replicate-existing` maintenance job: journals, for replication, the current version
of every key of a bucket that an enabled rule with ExistingObjectReplication covers
(objects written before the rule), a page of keys per step (replication/existing.py
`journal_page`, shared with POST /admin/replication/existing/{bucket}).

The cursor is the last key journaled, so a job paused, or found running after a restart,
goes on after it; a page done twice journals nothing new (entries are keyed by the row's
negated seq). The entries are this node's journal (the node running the job sends them).
The configuration is read at each step: a rule removed meanwhile fails the job with its
reason. Params: bucket (required). `services`: meta (the async store), replication (the
`ReplicationConfigService`).
"""

from __future__ import annotations

from typing import Any

from objstore.engine.job_rules import JobError, JobRecord, Progress
from objstore.errors import AdminError, S3Error
from objstore.replication.existing import PAGE, existing_rules, journal_page

JOB_TYPE = "replicate-existing"
STEP_KEYS = PAGE  # keys listed per step


class ReplicateExistingRunner:
    def __init__(self, job: JobRecord, context: Any) -> None:
        self._context = context
        self._meta = context.services["meta"]
        self._replication = context.services["replication"]
        self._bucket = str(job.params["bucket"])
        self._total = job.total
        self._done = job.done

    async def step(self, cursor: str | None) -> Progress:
        try:
            config = await self._replication.get(self._bucket)
            existing_rules(config)
        except (S3Error, AdminError) as error:
            raise JobError(f"{self._bucket}: {error.message or error.code}") from None
        if cursor is None and self._total == 0:
            self._total, _ = await self._meta.bucket_usage(self._bucket)
        added, listed, last = await journal_page(self._meta, config, self._bucket,
                                                 cursor or "", self._context.clock.seconds(),
                                                 page_size=STEP_KEYS)
        self._done += listed
        if added:
            await self._context.log("info", f"{added} entries journaled")
        if last is None:
            return Progress(cursor, self._done, self._done, finished=True)
        return Progress(last, self._done, max(self._total, self._done))


__all__ = ["JOB_TYPE", "ReplicateExistingRunner"]
