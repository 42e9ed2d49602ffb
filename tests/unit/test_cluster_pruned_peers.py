"""The pruned peers' record across a restart: the document's rules, and the recorder on
an injected clock with tmp files (no socket, no sleep)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from twisted.internet.task import Clock

from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.pruned_peers import (
    PrunedPeersRecorder,
    document_of,
    pruned_path,
    remembered,
)
from objstore.cluster.views import tombstone_gc_blocked
from objstore.config import Cluster
from objstore.threads import InlinePool

NOW = 1_700_000_000.0
DAY = 86400.0
A, B = "http://a.test:9000", "http://b.test:9000"
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, peers=(A, B),
                  probe_interval_seconds=1.0, tombstone_grace_seconds=DAY)
GOOD = ProbeResult(200, mac_ok=True, fingerprint_ok=True, node_id="node-a")
DOWN = ProbeResult(None)


def with_a_pruned(now: float = NOW) -> Membership:
    """b answers; a answered once at `now` - 30 days, then died and was pruned."""
    view = Membership("self")
    view.propose([A, B], now=now - 31 * DAY)
    view.observe(A, GOOD, now=now - 30 * DAY)
    view.observe(A, DOWN, now=now - 30 * DAY + 1)
    view.observe(A, DOWN, now=now - 30 * DAY + 2)
    view.observe(B, ProbeResult(200, mac_ok=True, fingerprint_ok=True, node_id="node-b"),
                 now=now)
    view.prune(now=now, prune_seconds=7 * DAY)
    assert view.peers[A].pruned
    return view


def test_the_record_round_trips_through_json() -> None:
    document = json.loads(json.dumps(document_of(with_a_pruned())))
    [peer] = remembered(document, "self")
    assert (peer.address, peer.node_id, peer.pruned) == (A, "node-a", True)
    assert peer.last_seen == NOW - 30 * DAY and peer.last_authenticated == NOW - 30 * DAY
    assert peer.first_seen == NOW - 31 * DAY


def test_a_foreign_or_malformed_record_is_ignored() -> None:
    document = document_of(with_a_pruned())
    assert remembered(None, "self") == []
    assert remembered({**document, "node_id": "other"}, "self") == []
    assert remembered({**document, "format": 2}, "self") == []
    assert remembered({**document, "peers": "x"}, "self") == []
    good = document["peers"][0]
    bad = [{"address": 1, "first_seen": 1.0}, {"address": "x"},
           {**good, "last_seen": "yesterday"}, {**good, "node_id": 7},
           {**good, "first_seen": True}, "nope"]
    assert [p.address for p in remembered({**document, "peers": [*bad, good]}, "self")] == [A]


def recorder(view: Membership, path: str, clock: Clock) -> PrunedPeersRecorder:
    return PrunedPeersRecorder(view, path, cluster=CLUSTER, clock=clock, runner=InlinePool())


def test_a_restarted_node_keeps_its_pruned_peer_pruned_and_the_purge_unblocked(
        tmp_path: Path) -> None:
    path = pruned_path(str(tmp_path))
    clock = Clock()
    clock.advance(NOW)
    view = with_a_pruned()
    service = recorder(view, path, clock)
    service.startService()  # reads no record, writes the pruned set
    assert [p.address for p in remembered(json.loads(Path(path).read_text()), "self")] == [A]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    service.stopService()

    # the restart: a fresh view, discovery proposing both, a's probe failing
    restarted = Membership("self")
    restarted.propose([A, B], now=NOW + 10)
    restarted.observe(A, DOWN, now=NOW + 10)
    restarted.observe(B, ProbeResult(200, mac_ok=True, fingerprint_ok=True,
                                     node_id="node-b"), now=NOW + 10)
    assert tombstone_gc_blocked(restarted, CLUSTER, now=NOW + 10)  # a never seen: blocks
    again = recorder(restarted, path, clock)
    again.startService()
    a = restarted.peers[A]
    assert a.pruned and a.last_seen == NOW - 30 * DAY and a.node_id == "node-a"
    assert not tombstone_gc_blocked(restarted, CLUSTER, now=NOW + 10)

    # a answers: back, and the record forgets it at the next tick
    restarted.observe(A, GOOD, now=NOW + 11)
    assert not restarted.peers[A].pruned
    mtime_before = os.stat(path).st_mtime_ns
    clock.advance(1.0)
    assert remembered(json.loads(Path(path).read_text()), "self") == []
    os.utime(path, ns=(mtime_before, mtime_before))
    clock.advance(1.0)  # nothing changed: not written again
    assert os.stat(path).st_mtime_ns == mtime_before
    again.stopService()
