"""Peers that are gone leave (issue 26, 3), on real daemons: a and b of one cluster in
available mode, and c, a node of another cluster (another secret) that a and b list as
a static peer, so it answers their every probe 403. The tombstone grace is
GRACE_SECONDS and peer pruning PRUNE_SECONDS ([cluster] peer_prune_seconds, the test
override of peer_prune_days), longer than the grace.

b stopped: a's purge is blocked once b is unseen past the grace, then b is pruned
(shown "pruned" with its last_seen, not eligible) and the purge proceeds; c, answering
403, is pruned the same way. a restarted still shows b pruned with its last_seen (the
record in its data directory). b started again is back and eligible at its first
authenticated answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.harness import Node, peers_of, start_cluster, wait_for
from tests.integration.probes import database, object_tombstones

pytestmark = pytest.mark.timeout(180)

NAMES = ("a", "b", "c")
BUCKET = "leaving"
GRACE_SECONDS = 2
PRUNE_SECONDS = 6
OTHER_SECRET = "another-cluster-Secret-4b8e1d2f9a"
DEADLINE = 60.0


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides: dict[str, dict[str, str]] = {
        name: {"consistency": '"available"', "request_timeout_seconds": "1",
               "tombstone_grace_seconds": str(GRACE_SECONDS),
               "peer_prune_seconds": str(PRUNE_SECONDS)} for name in NAMES}
    overrides["c"]["secret"] = f'"{OTHER_SECRET}"'  # another cluster
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        for name, other in (("a", "b"), ("b", "a")):
            wait_for(f"{name} trusts {other}",
                     lambda name=name, other=other: entry(started[name],
                                                          started[other])["eligible"],
                     deadline=DEADLINE)
        yield started


def entry(node: Node, peer: Node) -> dict[str, Any]:
    """`node`'s /admin/cluster entry of `peer` (by its address)."""
    [found] = [p for p in peers_of(node) if p["address"] == peer.daemon.endpoint]
    return found


def shows(node: Node, peer: Node, field: str) -> bool:
    """Whether `node` lists `peer` with `field` true (a node just started may not list
    its peers yet: 'not yet', not an error)."""
    found = [p for p in peers_of(node) if p["address"] == peer.daemon.endpoint]
    return bool(found and found[0][field])


def blocked(node: Node) -> bool:
    return bool(node.admin.get("/cluster").json["tombstone_gc_blocked"])


def tombstones(node: Node) -> set[str]:
    with database(node.daemon) as engine:
        return object_tombstones(engine, BUCKET)


def pruned_gauge(node: Node, peer: Node) -> float | None:
    """objstore_cluster_peer_pruned of `peer` in `node`'s metrics (None: not shown)."""
    reply = urllib3.request("GET", f"{node.daemon.endpoint}/admin/metrics")
    assert reply.status == 200
    for family in text_string_to_metric_families(reply.data.decode()):
        for sample in family.samples:
            if (sample.name == "objstore_cluster_peer_pruned"
                    and sample.labels.get("node_id") == peer.node_id):
                return float(sample.value)
    return None


def test_a_dead_peer_is_pruned_and_the_purge_proceeds(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    a.s3.create_bucket(Bucket=BUCKET)
    a.s3.put_object(Bucket=BUCKET, Key="gone", Body=b"x")
    wait_for("a's purge unblocked", lambda: not blocked(a), deadline=DEADLINE)
    b.daemon.stop()
    a.s3.delete_object(Bucket=BUCKET, Key="gone")  # available mode: accepted alone
    key = f"{BUCKET}:null:gone"
    assert key in tombstones(a)
    # unseen past the grace, not yet pruned: the purge waits for b (rule 7)
    wait_for("a blocks its purge on b", lambda: blocked(a) or entry(a, b)["pruned"],
             deadline=DEADLINE)
    wait_for("a prunes b", lambda: entry(a, b)["pruned"], deadline=DEADLINE)
    gone = entry(a, b)
    assert (gone["state"], gone["eligible"], gone["alive"], gone["node_id"]) == (
        "pruned", False, False, "node-b")
    assert gone["last_seen"] is not None
    # re-proposed by static discovery at every probe tick: still pruned, same last_seen
    wait_for("a's purge no longer blocked by b", lambda: not blocked(a), deadline=DEADLINE)
    assert entry(a, b)["last_seen"] == gone["last_seen"] and entry(a, b)["pruned"]
    wait_for("a purges the tombstone", lambda: key not in tombstones(a), deadline=DEADLINE)
    assert pruned_gauge(a, b) == 1.0


def test_a_node_of_another_cluster_answering_403_is_pruned(nodes: dict[str, Node]) -> None:
    a, c = nodes["a"], nodes["c"]
    wait_for("a prunes c", lambda: entry(a, c)["pruned"], deadline=DEADLINE)
    other = entry(a, c)
    assert (other["state"], other["eligible"], other["verdict"], other["alive"]) == (
        "pruned", False, "rejected", True)
    assert other["last_seen"] is not None
    assert a.admin.get("/cluster").json["live_node_count"] == 1


def test_a_restarted_node_still_shows_its_pruned_peer(nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    before = entry(a, b)
    assert before["pruned"]
    record = a.daemon.data_dir / "cluster-pruned-peers.json"

    def recorded() -> set[str]:
        """The pruned peers' addresses in a's record (written a moment after its view)."""
        return ({p["address"] for p in json.loads(record.read_text())["peers"]}
                if record.exists() else set())

    wait_for("a records b and c as pruned",
             lambda: recorded() == {before["address"], entry(a, c)["address"]},
             deadline=DEADLINE)
    a.daemon.stop()
    a.daemon.start()
    # Without the record b would count from discovery again (last_seen None, blocking
    # the purge until pruned anew); with it, b is pruned with the same last_seen.
    wait_for("a shows b pruned after its restart", lambda: shows(a, b, "pruned"),
             deadline=DEADLINE)
    after = entry(a, b)
    assert after["last_seen"] == before["last_seen"] and after["state"] == "pruned"
    wait_for("a's purge unblocked after its restart", lambda: not blocked(a),
             deadline=DEADLINE)


def test_the_pruned_peer_returns_when_it_answers(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    b.daemon.start()
    wait_for("b eligible again on a", lambda: shows(a, b, "eligible"), deadline=DEADLINE)
    back = entry(a, b)
    assert (back["state"], back["pruned"], back["authenticated"]) == ("alive", False, True)
    assert back["last_seen"] is not None
    assert pruned_gauge(a, b) == 0.0
    record = a.daemon.data_dir / "cluster-pruned-peers.json"
    wait_for("a's record forgets b", lambda: entry(a, b)["address"] not in {
        p["address"] for p in json.loads(record.read_text())["peers"]}, deadline=DEADLINE)

