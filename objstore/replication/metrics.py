"""Prometheus figures of replication on this node: journal entries by status and the age
of the oldest PENDING one (sampled by the worker, `JournalFigures`), and the worker's
counters (completed, failed after the last retry, retried, skipped, bytes sent)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from objstore.replication.worker import ReplicationWorker

STATUSES = ("PENDING", "COMPLETED", "FAILED", "SKIPPED")


class ReplicationCollector(Collector):
    def __init__(self, worker: ReplicationWorker, clock: Callable[[], float]) -> None:
        self._worker = worker
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        counts = self._worker.counts
        entries = GaugeMetricFamily("objstore_replication_journal_entries",
                                    "Replication journal entries on this node by status.",
                                    labels=["status"])
        for status in STATUSES:
            entries.add_metric([status], counts.get(status, 0))
        yield entries
        oldest = counts.get("oldest_pending_at", 0)
        yield GaugeMetricFamily("objstore_replication_oldest_pending_seconds",
                                "Age of the oldest PENDING journal entry (0: none).",
                                value=max(0.0, self._clock() - oldest) if oldest else 0.0)
        stats = self._worker.stats
        for name, value, text in (
                ("completed", stats.completed, "Journal entries replicated."),
                ("failed", stats.failed, "Journal entries FAILED after the final retry."),
                ("retried", stats.retried, "Failed attempts that will be retried."),
                ("skipped", stats.skipped, "Entries whose source version was gone."),
                ("sent_bytes", stats.bytes_sent, "Object bytes sent to destinations.")):
            counter = CounterMetricFamily(f"objstore_replication_{name}", text)
            counter.add_metric([], value)
            yield counter


__all__ = ["ReplicationCollector"]
