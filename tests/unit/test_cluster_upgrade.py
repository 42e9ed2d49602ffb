"""Rule 14 (rolling upgrade) and the probe latency: each peer's protocol version and probe
round trip are recorded in the membership, the first upgraded node refuses quorum writes
until a second one is up, and both figures reach /admin/cluster and the metrics."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from objstore.cluster import gate
from objstore.cluster.auth import config_fingerprint, new_nonce, nonce_mac
from objstore.cluster.client import Exchange, probe_result
from objstore.cluster.gate import UPGRADE_MESSAGE, GateState
from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.views import cluster_view
from objstore.cluster.write_gate import ClusterStatus, ClusterWriteGate
from objstore.config import Cluster
from objstore.errors import S3Error
from objstore.metrics.collectors import ClusterCollector

SECRET = "s" * 16
CLUSTER = Cluster(enabled=True, secret=SECRET, cluster_size=3, consistency="quorum")
AVAILABLE = Cluster(enabled=True, secret=SECRET, cluster_size=3, consistency="available")


def trusted(node: str, protocol: int | None, latency: float | None = 0.01) -> ProbeResult:
    return ProbeResult(status=200, mac_ok=True, fingerprint_ok=True, node_id=node,
                       protocol=protocol, latency_seconds=latency)


def view(*peers: tuple[str, int | None]) -> Membership:
    membership = Membership("self")
    for node, protocol in peers:
        membership.observe(f"http://{node}:9000", trusted(node, protocol), now=1.0)
    return membership


# -- the pure rule ----------------------------------------------------------------------


@pytest.mark.parametrize("own, peers, pending", [
    (2, [1, 1], True),          # the first upgraded node
    (2, [2, 1], False),         # a second upgraded node is up
    (2, [3, 1], False),         # a newer one counts too
    (2, [None], True),          # a peer that reports no version speaks version 1
    (1, [None, 1], False),      # nobody upgraded
    (1, [2], False),            # an old node waits for nobody
    (2, [], False),             # alone: no upgrade to wait for
])
def test_upgrade_pending(own: int, peers: list[int | None], pending: bool) -> None:
    assert gate.upgrade_pending(own, peers) is pending


def test_the_upgrade_rule_comes_after_size_and_quorum() -> None:
    assert gate.gate_state(2, CLUSTER, own_protocol=2,
                           peer_protocols=[1]) is GateState.UPGRADE_PENDING
    assert gate.gate_state(1, CLUSTER, own_protocol=2, peer_protocols=[]) is GateState.CLOSED
    assert gate.gate_state(4, CLUSTER, own_protocol=2,
                           peer_protocols=[1, 1, 1]) is GateState.SIZE_EXCEEDED
    assert gate.gate_state(3, CLUSTER, own_protocol=2, peer_protocols=[1, 2]) is GateState.OPEN
    # without own_protocol the rule is not asked (callers that know no version)
    assert gate.gate_state(2, CLUSTER, peer_protocols=[1]) is GateState.OPEN


def test_available_mode_ignores_the_upgrade_rule() -> None:
    assert gate.gate_state(2, AVAILABLE, own_protocol=2, peer_protocols=[1]) is GateState.OPEN


def test_the_upgrade_refusal_is_its_own_503() -> None:
    refusal = gate.gate_error(GateState.UPGRADE_PENDING)
    assert refusal is not None
    assert (refusal.code, refusal.message) == ("ServiceUnavailable", UPGRADE_MESSAGE)
    assert refusal.status == 503
    assert refusal.message not in (gate.CLOSED_MESSAGE, gate.SIZE_EXCEEDED_MESSAGE)


# -- the membership records the version and the latency --------------------------------


def test_the_protocol_is_taken_from_authenticated_pings_only() -> None:
    membership = Membership("self")
    membership.observe("http://a:9000", trusted("a", 2, 0.02), now=1.0)
    peer = membership.peers["http://a:9000"]
    assert (peer.protocol, peer.probe_latency_seconds) == (2, 0.02)
    # an impostor's answer can not rewrite the version, but its round trip is ours
    membership.observe("http://a:9000", ProbeResult(status=200, node_id="a", protocol=9,
                                                    latency_seconds=0.5), now=2.0)
    peer = membership.peers["http://a:9000"]
    assert (peer.protocol, peer.probe_latency_seconds) == (2, 0.5)
    # a failure keeps the last figures
    membership.observe("http://a:9000", ProbeResult(status=None), now=3.0)
    assert membership.peers["http://a:9000"].probe_latency_seconds == 0.5


def test_the_client_reads_the_protocol_and_times_the_probe() -> None:
    nonce = new_nonce()
    body = json.dumps({"node_id": "b", "nonce_mac": nonce_mac(SECRET.encode(), nonce),
                       "config_fingerprint": config_fingerprint(CLUSTER), "protocol": 3,
                       "time": 100.0}).encode()
    found = probe_result(Exchange(200, body), cluster=CLUSTER, nonce=nonce, sent_at=100.0,
                         received_at=100.25)
    assert found.mac_ok and found.protocol == 3 and found.latency_seconds == 0.25
    absent = probe_result(Exchange(200, json.dumps({"protocol": "2"}).encode()),
                          cluster=CLUSTER, nonce=nonce, sent_at=1.0, received_at=1.0)
    assert absent.protocol is None  # the wrong type is left out


# -- the write gate, /admin/cluster and the metrics -------------------------------------


def refusal(write_gate: ClusterWriteGate) -> S3Error | None:
    try:
        write_gate.check_write(1)
    except S3Error as error:
        return error
    return None


def test_the_first_upgraded_node_refuses_quorum_writes_until_a_second_is_up() -> None:
    membership = view(("a", 1), ("b", 1))
    write_gate = ClusterWriteGate(membership, CLUSTER, lambda: 1 << 40, protocol=2)
    assert write_gate.state() is GateState.UPGRADE_PENDING
    error = refusal(write_gate)
    assert error is not None and error.message == UPGRADE_MESSAGE
    assert write_gate.refusals == {"upgrade_pending": 1}
    membership.observe("http://b:9000", trusted("b", 2), now=2.0)  # b upgraded
    assert write_gate.state() is GateState.OPEN and refusal(write_gate) is None


def test_a_node_of_the_current_version_among_old_ones_is_open() -> None:
    write_gate = ClusterWriteGate(view(("a", 1), ("b", None)), CLUSTER, lambda: 1 << 40)
    assert write_gate.state() is GateState.OPEN


def test_admin_cluster_shows_protocol_latency_and_the_gate() -> None:
    membership = view(("a", 1))
    status = ClusterStatus(ClusterWriteGate(membership, CLUSTER, lambda: 1 << 40, protocol=2),
                           clock=lambda: 5.0)
    document = status.snapshot()
    assert document["protocol"] == 2 and document["gate"] == "upgrade_pending"
    me, peer = document["nodes"]
    assert me["protocol"] == 2
    assert (peer["protocol"], peer["probe_latency_seconds"]) == (1, 0.01)
    plain = cluster_view(membership, CLUSTER, now=5.0)
    assert plain["gate"] == "open"  # this version (1) among version 1


def scrape(collector: ClusterCollector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    samples = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_the_probe_latency_gauge_and_the_upgrade_state() -> None:
    membership = view(("a", 1))
    write_gate = ClusterWriteGate(membership, CLUSTER, lambda: 1 << 40, protocol=2)
    found = scrape(ClusterCollector(peers=lambda: membership.peers.values(),
                                    gate=write_gate.figures, fanout=None))
    assert found['objstore_cluster_peer_probe_latency_seconds{node_id="a",'
                 'peer="http://a:9000"}'] == 0.01
    assert found['objstore_cluster_gate_state{state="upgrade_pending"}'] == 1.0


def test_a_worker_that_does_not_probe_shows_no_node_gauges() -> None:
    membership = view(("a", 1))
    write_gate = ClusterWriteGate(membership, CLUSTER, lambda: 1 << 40, protocol=2)
    refusal(write_gate)
    found = scrape(ClusterCollector(peers=lambda: membership.peers.values(),
                                    gate=write_gate.figures, fanout=None, node_gauges=False))
    assert found == {'objstore_cluster_write_refusals_total{reason="upgrade_pending"}': 1.0}
