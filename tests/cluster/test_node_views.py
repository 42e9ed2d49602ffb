"""Per-node views behind a load balancer across three real daemons: GET /admin/audit and
/admin/metrics/history asked of node-a answer for node-a, for a peer (node=<id>, proxied
through POST /cluster/v1/admin/...) or for every node (node=all: merged newest first,
each row labelled with its node, a sources array); an unknown node is 404, a peer's own
400 is forwarded; once node-c is stopped it is 503 by name and an error among the sources
of node=all while the others answer."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.harness import Node, all_trusted, peers_of, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b", "c")
FAST_HISTORY = "[metrics]\nhistory_interval_seconds = 1\n"


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES,
                       extra_config={name: FAST_HISTORY for name in NAMES}) as started:
        for name, node in started.items():
            wait_for(f"node {name} trusts both peers", lambda node=node: all_trusted(node, 2))
            node.s3.create_bucket(Bucket=f"views-{name}")  # audited on that node only
        for name, node in started.items():
            wait_for(f"node {name} wrote its audit record",
                     lambda name=name, node=node: len(entries(node, f"bucket=views-{name}"))
                     == 1)
        yield started


def get(node: Node, path: str, status: int = 200) -> Any:
    reply = node.admin.get(path)
    assert reply.status == status, (path, reply.status, reply.body)
    return reply.json


def entries(node: Node, query: str) -> list[dict[str, Any]]:
    return list(get(node, f"/audit?operation=CreateBucket&{query}")["entries"])


def times(rows: list[dict[str, Any]]) -> list[float]:
    return [datetime.datetime.fromisoformat(row["time"]).timestamp() for row in rows]


def test_local_and_proxied_audit(nodes: dict[str, Node]) -> None:
    a = nodes["a"]
    local = get(a, "/audit?bucket=views-a")
    assert local["node"] == "node-a"
    assert {row["node_id"] for row in local["entries"]} == {"node-a"}
    assert get(a, "/audit?node=node-a&bucket=views-b")["entries"] == []  # not node-a's
    proxied = get(a, "/audit?node=node-b&operation=CreateBucket&bucket=views-b")
    assert proxied["node"] == "node-b"
    assert [(row["node_id"], row["bucket"]) for row in proxied["entries"]] == [
        ("node-b", "views-b")]
    assert get(a, "/audit?node=node-b&bucket=views-a")["entries"] == []


def test_all_nodes_merge_newest_first(nodes: dict[str, Node]) -> None:
    body = get(nodes["b"], "/audit?node=all&operation=CreateBucket")
    assert body["node"] == "node-b"
    rows = body["entries"]
    assert {(row["node_id"], row["bucket"]) for row in rows} == {
        (f"node-{name}", f"views-{name}") for name in NAMES}
    assert times(rows) == sorted(times(rows), reverse=True)
    assert sorted(body["sources"], key=lambda s: s["node_id"]) == [
        {"node_id": f"node-{name}", "total": 1} for name in NAMES]


def test_a_page_keeps_the_newest_rows_across_nodes(nodes: dict[str, Node]) -> None:
    first = get(nodes["a"], "/audit?node=all&operation=CreateBucket&limit=2")
    assert len(first["entries"]) == 2 and first["next_cursor"]
    rest = get(nodes["a"], "/audit?node=all&operation=CreateBucket&limit=2&cursor="
               + first["next_cursor"])
    assert len(rest["entries"]) == 1 and rest["next_cursor"] is None
    both = first["entries"] + rest["entries"]
    assert {row["bucket"] for row in both} == {f"views-{name}" for name in NAMES}
    assert times(both) == sorted(times(both), reverse=True)


def test_metrics_history_of_all_nodes(nodes: dict[str, Node]) -> None:
    def every_node_sampled() -> bool:
        sources = get(nodes["c"], "/metrics/history?node=all&limit=5")["sources"]
        # A sample from every node, and at least a page of them in all (limit=5 below).
        return len(sources) == 3 and all(s.get("total", 0) > 0 for s in sources) \
            and sum(s["total"] for s in sources) >= 5

    wait_for("every node wrote a metrics sample", every_node_sampled)
    body = get(nodes["c"], "/metrics/history?node=all&limit=5")
    assert body["node"] == "node-c" and len(body["samples"]) == 5
    assert times(body["samples"]) == sorted(times(body["samples"]), reverse=True)
    assert get(nodes["c"], "/metrics/history?node=node-a&limit=2")["node"] == "node-a"


def test_unknown_nodes_and_the_peers_own_refusals(nodes: dict[str, Node]) -> None:
    assert get(nodes["a"], "/audit?node=node-z", 404)["error"] == "NotFound"
    refused = get(nodes["a"], "/audit?node=node-b&since=yesterday", 400)
    assert refused["error"] == "BadRequest" and "since" in refused["message"]
    assert get(nodes["a"], "/audit?node=all&since=yesterday", 400)["error"] == "BadRequest"


def test_a_stopped_node_is_an_error_among_the_sources(nodes: dict[str, Node]) -> None:
    nodes["c"].daemon.stop()
    wait_for("node-a sees node-c dead",
             lambda: [p["state"] for p in peers_of(nodes["a"]) if p["node_id"] == "node-c"]
             == ["dead"])
    assert get(nodes["a"], "/audit?node=node-c", 503)["error"] == "ServiceUnavailable"
    body = get(nodes["a"], "/audit?node=all&operation=CreateBucket")
    sources = {source["node_id"]: source for source in body["sources"]}
    assert sources["node-a"] == {"node_id": "node-a", "total": 1}
    assert sources["node-b"] == {"node_id": "node-b", "total": 1}
    assert sources["node-c"]["status"] == 503 and "error" in sources["node-c"]
    assert {row["bucket"] for row in body["entries"]} == {"views-a", "views-b"}
