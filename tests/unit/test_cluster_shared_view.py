"""One membership view per node across workers: the probing worker publishes its view to
a private file every probe interval, the others mirror it; a missing, stale, foreign or
unreadable snapshot means the peers are unknown (the quorum gate closes). Clock and tmp
files, no socket, no sleep."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from twisted.internet.task import Clock

from objstore.cluster.gate import GateState
from objstore.cluster.membership import Membership, ProbeResult, Verdict
from objstore.cluster.shared_view import (
    MembershipMirror,
    MembershipPublisher,
    read_view,
    view_path,
    write_view,
)
from objstore.cluster.view_snapshot import (
    MIN_STALE_SECONDS,
    document_of,
    mirrored,
    peers_of,
    stale_after_seconds,
)
from objstore.cluster.write_gate import ClusterStatus, ClusterWriteGate
from objstore.config import Cluster
from objstore.threads import InlinePool

NOW = 1_700_000_000.0
A, B = "http://a.test:9000", "http://b.test:9000"
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, peers=(A, B),
                  probe_interval_seconds=1.0)


def probed() -> Membership:
    """Worker 0's view: a trusted, b answering without the secret."""
    membership = Membership("self")
    membership.observe(A, ProbeResult(status=200, mac_ok=True, fingerprint_ok=True,
                                      node_id="a", disk_available=7, max_seq=3, protocol=1,
                                      latency_seconds=0.004, clock_offset_seconds=0.2),
                       now=NOW)
    membership.observe(B, ProbeResult(status=200, node_id="b"), now=NOW)
    return membership


def test_a_snapshot_carries_every_peer_and_its_figures() -> None:
    source = probed()
    document = json.loads(json.dumps(document_of(source, now=NOW)))  # through JSON
    assert document["eligible"] == ["a"] and document["published_at"] == NOW
    assert peers_of(document, "self") == source.peers
    assert peers_of(document, "self")[B].last_verdict is Verdict.UNTRUSTED


def test_unknown_fields_are_ignored_and_absent_ones_defaulted() -> None:
    document = document_of(probed(), now=NOW)
    document["peers"][0]["from_a_later_version"] = 1
    del document["peers"][0]["probe_latency_seconds"]
    peers = peers_of(document, "self")
    assert peers is not None and peers[A].probe_latency_seconds is None
    assert peers[A].authenticated


def test_a_snapshot_of_another_node_or_format_is_refused() -> None:
    document = document_of(probed(), now=NOW)
    assert peers_of({**document, "node_id": "other"}, "self") is None
    assert peers_of({**document, "format": 99}, "self") is None
    assert peers_of({**document, "peers": [{"first_seen": 1.0}]}, "self") is None
    assert peers_of({**document, "peers": "nope"}, "self") is None


def test_a_fresh_snapshot_is_taken_a_stale_one_makes_the_peers_unknown() -> None:
    document = document_of(probed(), now=NOW)
    local = Membership("self")
    peers, usable = mirrored(local, document, now=NOW + 2.0, stale_after=3.0)
    assert usable and peers[A].authenticated
    local.peers.update(peers)
    peers, usable = mirrored(local, document, now=NOW + 3.5, stale_after=3.0)
    assert not usable
    assert set(peers) == {A, B} and not any(p.alive or p.authenticated
                                            for p in peers.values())
    assert peers[A].node_id == "a"  # the address is still known, its state is not
    assert mirrored(local, None, now=NOW, stale_after=3.0)[1] is False
    assert mirrored(local, {**document, "published_at": "x"}, now=NOW,
                    stale_after=3.0)[1] is False


def test_a_pruned_peer_is_mirrored_and_stays_pruned_in_a_stale_snapshot() -> None:
    source = probed()
    for _ in range(2):
        source.observe(A, ProbeResult(status=None), now=NOW + 1)
    source.observe(B, ProbeResult(status=200, mac_ok=True, fingerprint_ok=True,
                                  node_id="b"), now=NOW + 10)
    source.prune(now=NOW + 10, prune_seconds=5)
    document = json.loads(json.dumps(document_of(source, now=NOW + 10)))
    local = Membership("self")
    peers, usable = mirrored(local, document, now=NOW + 10, stale_after=3.0)
    assert usable and peers == source.peers and peers[A].pruned
    assert peers[A].last_authenticated == NOW
    local.peers.update(peers)
    peers, usable = mirrored(local, document, now=NOW + 20, stale_after=3.0)
    assert not usable and peers[A].pruned and peers[A].last_seen == NOW
    assert not peers[B].pruned and peers[B].last_seen is None  # unknown, as before


def test_stale_after_a_few_probe_intervals() -> None:
    assert stale_after_seconds(CLUSTER) == max(4.0, MIN_STALE_SECONDS)
    fast = Cluster(enabled=True, probe_interval_seconds=0.3)
    assert stale_after_seconds(fast) == MIN_STALE_SECONDS


def test_the_file_is_replaced_whole_and_owner_only(tmp_path: Path) -> None:
    path = view_path(str(tmp_path))
    before = os.umask(0o002)  # a loose umask does not widen the file
    try:
        write_view(path, {"format": 1, "n": 1})
    finally:
        os.umask(before)
    write_view(path, {"format": 1, "n": 2})
    assert read_view(path) == {"format": 1, "n": 2}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temporary left
    assert read_view(str(tmp_path / "missing")) is None
    Path(path).write_text("{not json")
    assert read_view(path) is None
    Path(path).write_text("[1]")
    assert read_view(path) is None


def test_every_worker_reads_the_probing_workers_view(tmp_path: Path) -> None:
    """Worker 0 publishes on its timer; worker 1's mirror takes it on its own: the gate,
    /admin/cluster and the eligible peers agree; when worker 0 stops publishing, worker
    1's gate closes once the snapshot is stale (fail closed)."""
    clock = Clock()
    clock.advance(NOW)
    path = view_path(str(tmp_path))
    source = probed()
    source.observe(B, ProbeResult(status=200, mac_ok=True, fingerprint_ok=True,
                                  node_id="b"), now=NOW)
    publisher = MembershipPublisher(source, path, cluster=CLUSTER, clock=clock,
                                    runner=InlinePool())
    mirror_view = Membership("self")
    mirror = MembershipMirror(mirror_view, path, cluster=CLUSTER, clock=clock,
                              runner=InlinePool())
    gate = ClusterWriteGate(mirror_view, CLUSTER, lambda: 1 << 40)
    status = ClusterStatus(gate, clock=clock.seconds)
    mirror.startService()  # before any snapshot: peers unknown, the gate closed
    assert gate.state() is GateState.CLOSED
    publisher.startService()
    clock.advance(1.0)
    assert gate.state() is GateState.OPEN
    assert [p.node_id for p in mirror_view.eligible_peers()] == ["a", "b"]
    assert status.snapshot()["nodes"][1:] == ClusterStatus(
        ClusterWriteGate(source, CLUSTER, lambda: 1 << 40), clock=clock.seconds
    ).snapshot()["nodes"][1:]
    source.observe(A, ProbeResult(status=None), now=clock.seconds())
    source.observe(A, ProbeResult(status=None), now=clock.seconds())  # a is dead
    clock.advance(1.0)  # published; the mirror read just before: one interval behind
    clock.advance(1.0)
    assert [p.node_id for p in mirror_view.eligible_peers()] == ["b"]
    publisher.stopService()
    clock.advance(2.0)
    assert gate.state() is GateState.OPEN  # not stale yet
    clock.advance(3.0)
    assert gate.state() is GateState.CLOSED
    assert mirror_view.eligible_node_count() == 1 and set(mirror_view.peers) == {A, B}
    publisher.startService()  # worker 0 back
    clock.advance(1.0)
    assert gate.state() is GateState.OPEN
    publisher.stopService()
    mirror.stopService()
