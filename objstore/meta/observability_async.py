"""The Deferred-returning audit and metrics queries of `MetaStore` (mixed into it): inserts
and purges on the writer pool, reads on the reader pool, with the retries every other query
gets. No SQL here.
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet.defer import Deferred

from objstore.meta.async_base import AsyncQueryMixin
from objstore.meta.audit_queries import PURGE_BATCH, AuditFilter, AuditRecord
from objstore.meta.metrics_queries import BucketUsage, MetricsSample


class AsyncObservabilityQueries(AsyncQueryMixin):
    # -- audit log -----------------------------------------------------------------------
    def insert_audit_records(self, records: Sequence[AuditRecord]) -> Deferred[int]:
        return self._write(self._store.insert_audit_records, records)

    def query_audit(self, query: AuditFilter) -> Deferred[list[AuditRecord]]:
        return self._read(self._store.query_audit, query)

    def purge_audit(self, before_ts: float, batch_size: int = PURGE_BATCH) -> Deferred[int]:
        return self._write(self._store.purge_audit, before_ts, batch_size)

    # -- metrics -------------------------------------------------------------------------
    def insert_metrics_sample(self, sample: MetricsSample) -> Deferred[None]:
        return self._write(self._store.insert_metrics_sample, sample)

    def query_metrics_history(
        self, since: float | None = None, until: float | None = None, limit: int = 1000
    ) -> Deferred[list[MetricsSample]]:
        return self._read(self._store.query_metrics_history, since, until, limit)

    def purge_metrics_history(self, before_ts: float) -> Deferred[int]:
        return self._write(self._store.purge_metrics_history, before_ts)

    def usage_by_bucket(self, limit: int) -> Deferred[list[BucketUsage]]:
        return self._read(self._store.usage_by_bucket, limit)
