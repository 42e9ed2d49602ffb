"""`TombstonePurgeCollector`: the tombstone purge's figures at scrape time (tombstones
purged, ticks skipped while blocked, the blocked state). Registered in worker 0 of every
node only, where the purge runs (service.py): with several workers the figures are
summed over the workers, and the others would add nothing."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from objstore.cluster.tombstone_purge import PurgeStats


class TombstonePurgeCollector(Collector):
    def __init__(self, stats: PurgeStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        yield CounterMetricFamily(
            "objstore_tombstones_purged",
            "Tombstones removed after their grace window (cluster rule 7).",
            value=float(stats.purged))
        yield CounterMetricFamily(
            "objstore_tombstone_purge_skipped",
            "Tombstone purge ticks skipped: some known peer was not seen within the grace "
            "window.", value=float(stats.skipped))
        yield GaugeMetricFamily(
            "objstore_tombstone_gc_blocked",
            "1 while the tombstone purge is blocked (some known peer not seen within the "
            "grace window), else 0.", value=1.0 if stats.blocked else 0.0)


__all__ = ["TombstonePurgeCollector"]
