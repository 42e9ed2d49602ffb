"""`UploadPeersCollector`: the counts of multipart uploads across nodes at scrape time
(cluster/upload_peers.py: control-plane refresh rounds asked by the multipart engine,
part blobs a completion fetched from a peer, part blobs no peer gave). Registered only
when the cluster is enabled (cluster/wiring.py)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from objstore.cluster.upload_peers import UploadPeersStats


class UploadPeersCollector(Collector):
    def __init__(self, stats: UploadPeersStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        for name, help_text, value in (
            ("objstore_cluster_upload_refresh_rounds",
             "Rounds of control-plane pulls from every eligible peer asked by a multipart "
             "request about an upload or parts not known here.", stats.rounds),
            ("objstore_cluster_upload_refresh_incomplete_rounds",
             "Refresh rounds that could not hear every node of the cluster (one down, "
             "timed out or failing): a part not found after one is answered with 503, "
             "not InvalidPart.", stats.incomplete_rounds),
            ("objstore_cluster_upload_parts_fetched",
             "Part blobs a multipart completion fetched from a peer.", stats.parts_fetched),
            ("objstore_cluster_upload_parts_unavailable",
             "Part blobs a multipart completion needed that no eligible peer gave.",
             stats.parts_unavailable),
        ):
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], float(value))
            yield family


__all__ = ["UploadPeersCollector"]
