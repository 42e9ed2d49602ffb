"""A three-node cluster whose nodes run two worker processes each: worker 0 of a node
probes and publishes the membership, worker 1 mirrors it (cluster/shared_view.py), so
both workers show the same authenticated peers and the same gate, writes served by either
worker are replicated, the node's gauges are not summed over workers, and with two nodes
stopped the gate of the third is closed in every one of its workers."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.cluster.harness import Node, start_cluster, wait_for
from tests.integration.admin_client import AdminClient
from tests.integration.worker_pins import pinned_admins, s3_call

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b", "c")
WORKERS = 2
BUCKET = "per-worker"
DEADLINE = 30.0


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES, workers=WORKERS) as started:
        yield started


def pinned(node: Node) -> dict[int, AdminClient]:
    """One admin client per worker index of `node`, each on its own kept-alive connection."""
    return pinned_admins(node.daemon, DEADLINE)


def view(admin: AdminClient) -> dict[str, object]:
    document: dict[str, object] = admin.ok("GET", "/cluster")
    return document


def trusts_both(admin: AdminClient) -> bool:
    peers = [n for n in view(admin)["nodes"] if n["state"] != "self"]  # type: ignore[attr-defined]
    return len(peers) == 2 and all(p["authenticated"] and p["eligible"] for p in peers)


def gauge(admin: AdminClient, name: str) -> float:
    reply = admin.get("/metrics")
    assert reply.status == 200
    found = re.search(rf"^{name} (\S+)$", reply.body.decode(), re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


def test_every_worker_of_every_node_sees_the_peers_authenticated(
        nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        for index, admin in pinned(node).items():
            wait_for(f"worker {index} of node {name} trusts both peers",
                     lambda admin=admin: trusts_both(admin), deadline=DEADLINE)
            document = view(admin)
            assert document["gate"] == "open" and document["eligible_node_count"] == 3
            expected = {other.node_id for other in nodes.values() if other is not node}
            assert {n["node_id"] for n in document["nodes"]  # type: ignore[attr-defined]
                    if n["state"] != "self"} == expected
            # the node's gauges come from the probing worker only (published within a
            # second): never summed over the workers
            wait_for(f"worker {index} of node {name} shows 3 eligible nodes",
                     lambda admin=admin: gauge(admin, "objstore_cluster_eligible_nodes") == 3,
                     deadline=DEADLINE)
            assert gauge(admin, "objstore_cluster_write_quorum") == 2.0


def test_a_write_served_by_either_worker_is_replicated(nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        for admin in pinned(node).values():
            wait_for(f"node {name} trusts both peers", lambda admin=admin: trusts_both(admin),
                     deadline=DEADLINE)
        node.s3.create_bucket(Bucket=BUCKET)  # buckets are not replicated yet
    for index, admin in pinned(nodes["a"]).items():
        body = f"written through worker {index} of a".encode() * 100
        put = s3_call(admin, "PUT", f"/{BUCKET}/from-worker-{index}", body=body)
        assert put.status == 200, put.data
        for name in ("b", "c"):
            got = nodes[name].s3.get_object(Bucket=BUCKET, Key=f"from-worker-{index}")
            assert got["Body"].read() == body


def test_without_a_quorum_every_worker_refuses_writes(nodes: dict[str, Node]) -> None:
    a = nodes["a"]
    workers = pinned(a)
    nodes["b"].daemon.stop()
    nodes["c"].daemon.stop()
    for index, admin in workers.items():
        wait_for(f"worker {index} of node a sees the gate closed",
                 lambda admin=admin: view(admin)["gate"] == "closed", deadline=DEADLINE)
    for index, admin in workers.items():
        refused = s3_call(admin, "PUT", f"/{BUCKET}/refused-{index}", body=b"no quorum")
        assert refused.status == 503, (index, refused.data)
        assert b"ServiceUnavailable" in refused.data
        assert refused.headers["Retry-After"] == "5"
        health = admin.http.request("GET", "/admin/health?writable=1")
        assert health.status == 503
        kept = s3_call(admin, "GET", f"/{BUCKET}/from-worker-0")
        assert kept.status == 200  # reads still served
