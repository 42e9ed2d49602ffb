"""GET /admin/cluster as data, from a Membership built by real probe outcomes."""

from __future__ import annotations

from dataclasses import replace

from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.views import cluster_view, tombstone_gc_blocked
from objstore.config import Cluster
from tests.unit.test_cluster_modules import imported_after

NOW = 1_700_000_000.0
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, consistency="quorum",
                  advertise_url="http://c.test:9000", tombstone_grace_seconds=3600.0)
A, B, C, D = (f"http://{n}.test:9000" for n in "abxd")


def ok(node_id: str, **figures: int) -> ProbeResult:
    return ProbeResult(status=200, mac_ok=True, fingerprint_ok=True, node_id=node_id,
                       clock_offset_seconds=0.25, **figures)


def membership() -> Membership:
    view = Membership("node-c")
    view.observe(A, ok("node-a", disk_total=100, disk_available=40, max_seq=7), now=NOW)
    view.observe(B, ProbeResult(status=200, mac_ok=True, fingerprint_ok=False,
                                node_id="node-b"), now=NOW)  # drifted
    view.observe(C, ProbeResult(status=409), now=NOW)  # this node under another address
    view.propose([D], now=NOW)  # never answered
    return view


def nodes_by_address(view: dict[str, object]) -> dict[object, dict[str, object]]:
    nodes = view["nodes"]
    assert isinstance(nodes, list)
    return {node["address"]: node for node in nodes}


def test_cluster_level_fields() -> None:
    view = cluster_view(membership(), CLUSTER, now=NOW + 10)
    assert {k: view[k] for k in ("eligible_node_count", "live_node_count", "size_exceeded",
                                 "tombstone_gc_blocked", "syncing", "worker_leader",
                                 "gate", "write_quorum", "node_id")} == {
        "eligible_node_count": 2, "live_node_count": 3, "size_exceeded": False,
        "tombstone_gc_blocked": True,  # D was never seen
        "syncing": False, "worker_leader": "node-a", "gate": "open", "write_quorum": 2,
        "node_id": "node-c"}


def test_per_node_fields() -> None:
    nodes = nodes_by_address(cluster_view(membership(), CLUSTER, now=NOW + 10))
    me = nodes["http://c.test:9000"]
    assert (me["state"], me["node_id"], me["eligible"]) == ("self", "node-c", True)
    a = nodes[A]
    assert {k: a[k] for k in ("node_id", "state", "alive", "authenticated", "config_ok",
                              "eligible", "verdict", "disk_total", "disk_available",
                              "max_seq", "clock_offset_seconds", "last_seen")} == {
        "node_id": "node-a", "state": "alive", "alive": True, "authenticated": True,
        "config_ok": True, "eligible": True, "verdict": "authenticated", "disk_total": 100,
        "disk_available": 40, "max_seq": 7, "clock_offset_seconds": 0.25,
        "last_seen": "2023-11-14T22:13:20.000+00:00"}
    assert a["sync"] == {"hwm": None, "lag": None, "last_reconcile": None,
                         "first_pass_done": False, "skipped_entries": 0}
    b = nodes[B]
    assert (b["config_ok"], b["eligible"], b["state"]) == (False, False, "alive")
    assert (nodes[C]["loop"], nodes[C]["state"], nodes[C]["eligible"]) == (True, "self", False)
    assert (nodes[D]["state"], nodes[D]["node_id"], nodes[D]["last_seen"]) == (
        "unknown", None, None)


def test_a_dead_peer_keeps_last_seen_and_leaves_the_counts() -> None:
    view = membership()
    for _ in range(2):
        view.observe(A, ProbeResult(status=None), now=NOW + 5)
    document = cluster_view(view, CLUSTER, now=NOW + 10)
    a = nodes_by_address(document)[A]
    assert (a["state"], a["alive"], a["eligible"]) == ("dead", False, False)
    assert a["last_seen"] == "2023-11-14T22:13:20.000+00:00"
    assert document["eligible_node_count"] == 1 and document["gate"] == "closed"


def test_size_exceeded_when_more_eligible_nodes_than_cluster_size() -> None:
    view = membership()
    view.observe(B, ok("node-b"), now=NOW)
    document = cluster_view(view, replace(CLUSTER, cluster_size=2), now=NOW)
    assert document["size_exceeded"] is True and document["gate"] == "size_exceeded"


def test_tombstone_gc_is_blocked_only_by_a_peer_unseen_for_the_grace() -> None:
    view = Membership("node-c")
    view.observe(A, ok("node-a"), now=NOW)
    view.observe(C, ProbeResult(status=409), now=NOW - 10_000)  # a loop entry: not a peer
    assert not tombstone_gc_blocked(view, CLUSTER, now=NOW + 3600)
    assert tombstone_gc_blocked(view, CLUSTER, now=NOW + 3601)


def test_a_pruned_peer_is_shown_with_its_last_seen_not_eligible_and_blocks_no_purge(
        ) -> None:
    view = Membership("node-c")
    view.observe(A, ok("node-a"), now=NOW)
    view.observe(B, ok("node-b"), now=NOW)
    for _ in range(2):
        view.observe(B, ProbeResult(status=None), now=NOW + 1)
    assert tombstone_gc_blocked(view, CLUSTER, now=NOW + 3601)  # B unseen past the grace
    view.observe(A, ok("node-a"), now=NOW + 3601)
    view.prune(now=NOW + 7201, prune_seconds=7200)
    document = cluster_view(view, CLUSTER, now=NOW + 7201)
    b = nodes_by_address(document)[B]
    assert {k: b[k] for k in ("state", "pruned", "eligible", "alive", "node_id",
                              "last_seen")} == {
        "state": "pruned", "pruned": True, "eligible": False, "alive": False,
        "node_id": "node-b", "last_seen": "2023-11-14T22:13:20.000+00:00"}
    assert nodes_by_address(document)[A]["pruned"] is False
    assert document["tombstone_gc_blocked"] is False
    assert document["eligible_node_count"] == 2 and document["live_node_count"] == 2
    # back at its first authenticated answer: eligible, and seen
    view.observe(B, ok("node-b"), now=NOW + 7202)
    b = nodes_by_address(cluster_view(view, CLUSTER, now=NOW + 7202))[B]
    assert (b["state"], b["pruned"], b["eligible"]) == ("alive", False, True)


def test_no_secret_or_fingerprint_in_the_view() -> None:
    text = repr(cluster_view(membership(), CLUSTER, now=NOW))
    assert "s" * 16 not in text and "fingerprint" not in text


def test_the_view_module_imports_no_twisted() -> None:
    loaded = imported_after("objstore.cluster.views")
    assert not {name for name in loaded if name.split(".")[0] in ("twisted", "klein", "treq")}
