"""`ControlCollector`: the control-plane reconciler's counts at scrape time (pulls of
peers' control snapshots, failed pulls, merges that changed something, incoming rows
skipped for a dead parent or a taken unique name). Registered only when the cluster is
enabled (cluster/wiring.py)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from objstore.cluster.control_reconcile import ControlStats


class ControlCollector(Collector):
    def __init__(self, stats: ControlStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        for name, help_text, value in (
            ("objstore_cluster_control_pulls",
             "Pulls of a peer's control-plane snapshot (op notices, reconcile passes).",
             stats.pulls),
            ("objstore_cluster_control_pull_failures",
             "Pulls that failed (no answer, refusal, bad snapshot, database error).",
             stats.failures),
            ("objstore_cluster_control_merges_changed",
             "Merges of a peer's snapshot that changed this node.", stats.merges_changed),
            ("objstore_cluster_control_rows_skipped",
             "Incoming control-plane rows not applied: their parent is dead here.",
             stats.skipped),
            ("objstore_cluster_control_name_conflicts",
             "Incoming control-plane rows not applied: their unique name is held by "
             "another entity here.", stats.conflicts),
        ):
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], float(value))
            yield family


__all__ = ["ControlCollector"]
