"""The cluster collector: peers, gate and fan-out figures at scrape time, rendered by a
real prometheus registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from objstore.cluster.fanout import FanOutStats
from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.write_gate import ClusterWriteGate
from objstore.config import Cluster
from objstore.errors import S3Error
from objstore.metrics.collectors import ClusterCollector

CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, consistency="quorum")


def scrape(membership: Membership, gate: ClusterWriteGate, stats: FanOutStats | None
           ) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(ClusterCollector(peers=lambda: membership.peers.values(),
                                       gate=gate.figures, fanout=stats))
    samples = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_peers_gate_and_fanout_are_exposed() -> None:
    membership = Membership("self")
    membership.observe("http://a:9000", ProbeResult(status=200, mac_ok=True,
                                                    fingerprint_ok=True, node_id="a",
                                                    clock_offset_seconds=0.5), now=1.0)
    membership.observe("http://x:9000", ProbeResult(status=200, node_id="x"), now=1.0)
    gate = ClusterWriteGate(membership, CLUSTER, lambda: 1 << 40)
    stats = FanOutStats(writes=3, acks=2, missed_acks=1, shortfalls=1, ops_sent=4)
    found = scrape(membership, gate, stats)
    assert found['objstore_cluster_peer_eligible{node_id="a",peer="http://a:9000"}'] == 1.0
    assert found['objstore_cluster_peer_alive{node_id="x",peer="http://x:9000"}'] == 1.0
    assert found['objstore_cluster_peer_eligible{node_id="x",peer="http://x:9000"}'] == 0.0
    assert found[
        'objstore_cluster_peer_clock_offset_seconds{node_id="a",peer="http://a:9000"}'] == 0.5
    assert found['objstore_cluster_gate_state{state="open"}'] == 1.0
    assert found["objstore_cluster_eligible_nodes"] == 2.0
    assert found["objstore_cluster_fanout_writes_total"] == 3.0
    assert found["objstore_cluster_fanout_shortfalls_total"] == 1.0
    assert found['objstore_cluster_fanout_ops_total{result="accepted"}'] == 4.0


def test_a_closed_gate_and_its_refusals() -> None:
    membership = Membership("self")
    gate = ClusterWriteGate(membership, CLUSTER, lambda: 1 << 40)
    try:
        gate.check_write(1)
    except S3Error:
        pass
    found = scrape(membership, gate, None)
    assert found['objstore_cluster_gate_state{state="closed"}'] == 1.0
    assert found['objstore_cluster_gate_state{state="open"}'] == 0.0
    assert found['objstore_cluster_write_refusals_total{reason="closed"}'] == 1.0
    assert not [name for name in found if "fanout" in name]
