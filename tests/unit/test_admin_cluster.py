"""GET /admin/cluster and the cluster's part of GET /admin/health, in memory (the admin
API of resource_fixtures: real site, gate and SigV4; a Membership built from probe
outcomes, no sockets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from objstore.admin.cluster_routes import FAMILIES, ClusterRoutes
from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.write_gate import ClusterStatus, ClusterWriteGate, single_node_view
from objstore.config import Cluster
from objstore.http.health import HealthState
from tests.unit.resource_fixtures import ALICE, NOW, Node

URL = "http://s3.test/admin"
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, consistency="quorum",
                  advertise_url="http://self.test:9000")


def status(*eligible: str, syncing: bool = False) -> ClusterStatus:
    membership = Membership("node-self")
    for node in eligible:
        membership.observe(f"http://{node}.test:9000", ProbeResult(
            status=200, mac_ok=True, fingerprint_ok=True, node_id=node), now=NOW)
    gate = ClusterWriteGate(membership, CLUSTER, lambda: 1 << 40)
    return ClusterStatus(gate, lambda: NOW, is_syncing=lambda: syncing)


def body(answer: Any) -> Any:
    return json.loads(answer.body)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


# -- HealthState, pure ------------------------------------------------------------------


def test_a_single_node_is_never_read_only_nor_syncing() -> None:
    health = HealthState()
    assert health.status() == health.status(writable=True) == (200, "ok")
    assert health.verbose() == {"status": "ok"}
    health.draining = True
    assert health.status(writable=True) == (503, "draining")


def test_precedence_draining_syncing_read_only() -> None:
    health = HealthState(cluster=status(syncing=True))  # closed gate and syncing
    assert health.status(writable=True) == (503, "syncing")
    health.draining = True
    assert health.status(writable=True) == (503, "draining")
    health = HealthState(cluster=status())
    assert health.status() == (200, "ok")  # read_only only when asked
    assert health.status(writable=True) == (503, "read_only")
    assert HealthState(cluster=status("a")).status(writable=True) == (200, "ok")


# -- through the admin API --------------------------------------------------------------


def test_writable_answers_503_read_only_with_retry_after(node: Node) -> None:
    node.health.cluster = status()
    answer = node.send("GET", f"{URL}/health?writable=1", who=None)
    assert (answer.status, body(answer)) == (503, {"status": "read_only"})
    assert answer.headers["retry-after"] == "5"
    plain = node.send("GET", f"{URL}/health", who=None)
    assert (plain.status, body(plain)) == (200, {"status": "ok"})
    assert "retry-after" not in plain.headers


def test_verbose_is_200_with_the_cluster_snapshot(node: Node) -> None:
    node.health.cluster = status("a", syncing=True)
    answer = node.send("GET", f"{URL}/health?verbose=1", who=None)
    document = body(answer)
    assert answer.status == 200 and document["status"] == "syncing"
    assert document["worker_leader"] == "a"  # the lowest eligible node id
    assert document["cluster"]["eligible_node_count"] == 2
    assert document["cluster"]["gate"] == "open"


def test_single_node_health_answers_as_before(node: Node) -> None:
    for query in ("", "?writable=1", "?verbose=1"):
        answer = node.send("GET", f"{URL}/health{query}", who=None)
        assert (answer.status, body(answer)) == (200, {"status": "ok"})


def test_admin_cluster_answers_the_live_view(node: Node) -> None:
    node.admin.mount(FAMILIES, ClusterRoutes(gate=node.admin.authorize,
                                             view=status("a").snapshot))
    answer = node.send("GET", f"{URL}/cluster")
    document = body(answer)
    assert answer.status == 200 and document["enabled"] is True
    assert [n["node_id"] for n in document["nodes"]] == ["node-self", "a"]
    for field in ("eligible_node_count", "live_node_count", "size_exceeded",
                  "tombstone_gc_blocked", "syncing", "worker_leader"):
        assert field in document
    assert [r.operation for r in node.records()] == ["admin:GetClusterStatus"]


def test_admin_cluster_on_a_single_node_says_disabled(node: Node) -> None:
    view = single_node_view(Cluster(), "node-self", now=NOW)
    node.admin.mount(FAMILIES, ClusterRoutes(gate=node.admin.authorize, view=lambda: view))
    document = body(node.send("GET", f"{URL}/cluster"))
    assert document["enabled"] is False and document["gate"] == "open"
    assert (document["eligible_node_count"], document["worker_leader"]) == (1, "node-self")
    assert [n["node_id"] for n in document["nodes"]] == ["node-self"]


def test_admin_cluster_needs_view_server_info(node: Node) -> None:
    node.admin.mount(FAMILIES, ClusterRoutes(gate=node.admin.authorize,
                                             view=status().snapshot))
    assert node.send("GET", f"{URL}/cluster", who=None).status == 403
    assert node.send("GET", f"{URL}/cluster", who=ALICE).status == 403
    node.authorizer.grants.add(("svc:ViewServerInfo", "*"))
    assert node.send("GET", f"{URL}/cluster", who=ALICE).status == 200


def test_the_service_seams_follow_cluster_enabled() -> None:
    from dataclasses import replace
    from types import SimpleNamespace

    from objstore.cluster.wiring import cluster_document, cluster_parts

    class Space:
        def available_bytes(self) -> int:
            return 1 << 40

    def config(enabled: bool) -> Any:
        return SimpleNamespace(cluster=replace(CLUSTER, enabled=enabled))

    assert cluster_parts(config(False), "n", Space(), lambda: NOW) is None  # type: ignore[arg-type]
    single = cluster_document(config(False), "n", None, lambda: NOW)()
    assert (single["enabled"], single["node_id"]) == (False, "n")
    parts = cluster_parts(config(True), "n", Space(), lambda: NOW)  # type: ignore[arg-type]
    assert parts is not None and parts.membership.self_id == "n"
    assert HealthState(cluster=parts.status).status(writable=True) == (503, "read_only")
    live = cluster_document(config(True), "n", parts, lambda: NOW)()
    assert (live["enabled"], live["gate"]) == (True, "closed")  # no peer probed yet
