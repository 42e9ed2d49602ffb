"""The per-node views (spec "Per-node views behind a load balancer"): the merge and the
target of `node=` as pure rules, `NodeViews` with fake sources, and the proxied query
node to node through the real POST /cluster/v1/admin/<family> route and a real
ClusterClient behind StubTreq. No socket, no reactor."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.web.resource import Resource

from objstore.admin.view_params import ViewParams
from objstore.cluster.api import ClusterApi
from objstore.cluster.client import ClusterClient, Exchange
from objstore.cluster.membership import Membership, PeerState, ProbeResult
from objstore.cluster.node_views import AUDIT, METRICS_HISTORY, NodeViews, peer_body
from objstore.cluster.view_merge import (
    PeerTarget,
    SourceAnswer,
    Where,
    decode_sources_cursor,
    encode_sources_cursor,
    merge_sources,
    resolve_target,
    row_time,
)
from objstore.config import ServerLimits
from objstore.errors import AdminError
from objstore.http.health import HealthState
from objstore.http.root import RootResource
from tests.unit.conftest import run
from tests.unit.test_cluster_api import CLUSTER, FIGURES, NOW, served

B, C = "http://node-b.test", "http://node-c.test"


def at(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(NOW + seconds, datetime.UTC).isoformat(
        timespec="milliseconds")


def rows(*seconds: float, tag: str = "") -> list[dict[str, Any]]:
    return [{"time": at(s), "id": f"{tag}{s:g}"} for s in seconds]


def ids(document: Mapping[str, Any], key: str = "entries") -> list[str]:
    return [row["id"] for row in document[key]]


# -- the merge, pure ----------------------------------------------------------------------


def test_rows_merge_newest_first_labelled_and_the_newest_page_is_kept() -> None:
    answers = [
        SourceAnswer("node-a", {"entries": rows(9, 5, 1, tag="a"), "next_cursor": None}),
        SourceAnswer("node-b", {"entries": rows(8, 7, 2, tag="b"), "next_cursor": None}),
        SourceAnswer("node-c", error="BadGateway: no answer", status=502),
    ]
    merged = merge_sources(answers, AUDIT, limit=4)
    assert ids(merged) == ["a9", "b8", "b7", "a5"]
    assert [row["node_id"] for row in merged["entries"]] == ["node-a", "node-b", "node-b",
                                                             "node-a"]
    assert merged["sources"] == [
        {"node_id": "node-a", "total": 3}, {"node_id": "node-b", "total": 3},
        {"node_id": "node-c", "error": "BadGateway: no answer", "status": 502}]


def test_ties_keep_the_order_of_the_sources_and_bad_times_go_last() -> None:
    answers = [SourceAnswer("node-a", {"samples": [{"time": "never", "id": "x"},
                                                   *rows(3, tag="a")]}),
               SourceAnswer("node-b", {"samples": rows(3, tag="b")})]
    merged = merge_sources(answers, METRICS_HISTORY, limit=10)
    assert ids(merged, "samples") == ["a3", "b3", "x"]
    assert "next_cursor" not in merged  # the metrics history does not page


def test_times_without_offset_are_utc() -> None:
    assert row_time({"time": "2023-11-14T22:13:20"}, "time") == NOW
    assert row_time({"time": "2023-11-14T23:13:20+01:00"}, "time") == NOW


def test_the_composite_cursor_resumes_each_source_after_its_last_kept_row() -> None:
    answers = [
        SourceAnswer("node-a", {"entries": rows(9, 5, tag="a"), "next_cursor": "a-after-5",
                                "cursors": ["a-after-9", "a-after-5"]}),
        SourceAnswer("node-b", {"entries": rows(8, 7, tag="b"), "next_cursor": None,
                                "cursors": ["b-after-8", "b-after-7"]}),
        SourceAnswer("node-c", {"entries": rows(1, tag="c"), "next_cursor": "c-more",
                                "cursors": ["c-after-1"]}),
        SourceAnswer("node-d", error="ServiceUnavailable: down", status=503),
    ]
    merged = merge_sources(answers, AUDIT, limit=2,
                           cursors={"node-a": "", "node-b": "", "node-c": "c-start",
                                    "node-d": ""})
    assert ids(merged) == ["a9", "b8"]
    assert decode_sources_cursor(merged["next_cursor"]) == {
        "node-a": "a-after-9", "node-b": "b-after-8",
        "node-c": "c-start",  # none kept: asked again from where it was
        "node-d": None}  # failed: its error is in this page's sources


def test_the_last_page_has_no_cursor() -> None:
    answers = [SourceAnswer("node-a", {"entries": rows(2, 1), "next_cursor": None,
                                       "cursors": ["x", "y"]})]
    assert merge_sources(answers, AUDIT, limit=5)["next_cursor"] is None


@pytest.mark.parametrize("text", ["junk", encode_sources_cursor({}) + "!",
                                  "eyJzb3VyY2VzIjogWzFdfQ"])  # {"sources": [1]}
def test_a_cursor_not_ours_is_400(text: str) -> None:
    with pytest.raises(AdminError) as caught:
        decode_sources_cursor(text)
    assert caught.value.status == 400


def peer(node_id: str, address: str, *, eligible: bool = True) -> PeerState:
    return PeerState(address=address, first_seen=NOW, node_id=node_id, alive=eligible,
                     authenticated=eligible, config_ok=True, last_seen=NOW)


def test_the_node_parameter_names_a_target() -> None:
    peers = [peer("node-b", B), peer("node-c", C, eligible=False)]
    assert resolve_target(None, "node-a", peers) is Where.LOCAL
    assert resolve_target("node-a", "node-a", peers) is Where.LOCAL
    assert resolve_target("all", "node-a", peers) is Where.ALL
    assert resolve_target("node-b", "node-a", peers) == PeerTarget("node-b", B)
    with pytest.raises(AdminError) as caught:
        resolve_target("node-c", "node-a", peers)
    assert caught.value.status == 503
    with pytest.raises(AdminError) as caught:
        resolve_target("node-z", "node-a", peers)
    assert caught.value.status == 404


def test_a_peers_answer_is_its_body_or_the_error_to_answer() -> None:
    assert peer_body("node-b", 200, b'{"entries": []}') == {"entries": []}
    refusals = [
        (400, b'{"error": "BadRequest", "message": "since is bad"}', 400, "BadRequest"),
        (404, b'{"error": "Odd", "message": "gone"}', 404, "NotFound"),
        (403, b'{"error": "AccessDenied", "message": "signature"}', 403, "AccessDenied"),
        (500, b'{"error": "InternalError", "message": "bug"}', 502, "BadGateway"),
        (200, b"not json", 502, "BadGateway"),
        (418, b"<html>", 502, "BadGateway"),
    ]
    for status, body, expected, code in refusals:
        with pytest.raises(AdminError) as caught:
            peer_body("node-b", status, body)
        assert (caught.value.status, caught.value.code) == (expected, code), body
    with pytest.raises(AdminError) as caught:
        peer_body("node-b", 400, b'{"error": "BadRequest", "message": "since is bad"}')
    assert caught.value.message == "since is bad"


# -- NodeViews with fake sources -----------------------------------------------------------


@dataclass
class PagedSource:
    """A node's audit log: rows newest first, a page from `cursor` (the index to resume
    at), each row's cursor its following index."""

    entries: list[dict[str, Any]]
    asked: list[dict[str, str]] = field(default_factory=list)

    async def __call__(self, params: ViewParams) -> dict[str, Any]:
        self.asked.append(dict(params))
        if params.get("since") == "bad":
            raise AdminError("BadRequest", "since must be an ISO 8601 timestamp.")
        start = int(params.get("cursor") or 0)
        limit = int(params.get("limit") or AUDIT.default_limit)
        page = self.entries[start:start + limit]
        more = start + limit < len(self.entries)
        return {"entries": page, "next_cursor": str(start + limit) if more else None,
                "cursors": [str(start + i + 1) for i in range(len(page))]}


@dataclass
class FakeClient:
    """Peers by address: a source, an exception (no answer) or a fixed (status, body)."""

    peers: dict[str, Any]
    asked: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    async def view_query(self, base_url: str, family: str, params: ViewParams) -> Exchange:
        self.asked.append((base_url, family, dict(params)))
        answer = self.peers[base_url]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, tuple):
            return Exchange(*answer)
        return Exchange(200, json.dumps({"node": base_url, **await answer(params)}).encode())


def membership_of(*peers: PeerState) -> Membership:
    membership = Membership("node-a")
    for state in peers:
        membership.peers[state.address] = state
    return membership


def views(local: PagedSource, client: FakeClient, *peers: PeerState) -> NodeViews:
    return NodeViews(node_id="node-a", local={"audit": local},
                     membership=membership_of(*peers), client=client)


def test_a_peer_is_asked_without_node_and_its_answer_names_it() -> None:
    source = PagedSource(rows(3, 2, 1, tag="b"))
    client = FakeClient({B: source})
    body = run(views(PagedSource([]), client, peer("node-b", B)).answer(
        "audit", {"node": "node-b", "limit": "2", "bucket": "x"}))
    assert client.asked == [(B, "audit", {"limit": "2", "bucket": "x"})]
    assert body == {"node": "node-b", "entries": rows(3, 2, tag="b"), "next_cursor": "2"}


@pytest.mark.parametrize(("answer", "status"), [
    (ConnectionRefusedError(), 502),
    ((400, b'{"error": "BadRequest", "message": "limit must be"}'), 400),
    ((503, b'{"error": "ServiceUnavailable", "message": "draining"}'), 502),
])
def test_a_peers_failure_is_the_answer(answer: Any, status: int) -> None:
    node = views(PagedSource([]), FakeClient({B: answer}), peer("node-b", B))
    with pytest.raises(AdminError) as caught:
        run(node.answer("audit", {"node": "node-b"}))
    assert caught.value.status == status


def test_unknown_and_ineligible_nodes() -> None:
    node = views(PagedSource([]), FakeClient({}), peer("node-c", C, eligible=False))
    for wanted, status in (("node-z", 404), ("node-c", 503)):
        with pytest.raises(AdminError) as caught:
            run(node.answer("audit", {"node": wanted}))
        assert caught.value.status == status


def test_all_asks_every_eligible_node_and_reports_each_source() -> None:
    client = FakeClient({B: PagedSource(rows(8, 4, tag="b")), C: ConnectionRefusedError()})
    node = views(PagedSource(rows(9, 5, tag="a")), client, peer("node-b", B),
                 peer("node-c", C), peer("node-d", "http://node-d.test", eligible=False))
    body = run(node.answer("audit", {"node": "all", "limit": "3"}))
    assert body["node"] == "node-a"
    assert ids(body) == ["a9", "b8", "a5"]
    assert body["sources"] == [
        {"node_id": "node-a", "total": 2}, {"node_id": "node-b", "total": 2},
        {"node_id": "node-c", "status": 502,
         "error": "BadGateway: Node 'node-c' did not answer: ConnectionRefusedError."},
        {"node_id": "node-d", "status": 503,  # known, not eligible: reported, not asked
         "error": "ServiceUnavailable: the node is known but not eligible (see GET "
                  "/admin/cluster)"}]
    assert [address for address, _, _ in client.asked] == [B, C]


def test_all_fails_on_this_nodes_own_refusal() -> None:
    node = views(PagedSource([]), FakeClient({B: PagedSource([])}), peer("node-b", B))
    with pytest.raises(AdminError) as caught:
        run(node.answer("audit", {"node": "all", "since": "bad"}))
    assert caught.value.status == 400


def test_paging_through_all_nodes_gives_every_row_once_newest_first() -> None:
    logs = {"node-a": rows(*range(30, 0, -3), tag="a"),
            "node-b": rows(*range(29, 0, -2), tag="b"),
            "node-c": rows(20, 19, tag="c")}
    client = FakeClient({B: PagedSource(logs["node-b"]), C: PagedSource(logs["node-c"])})
    node = views(PagedSource(logs["node-a"]), client, peer("node-b", B), peer("node-c", C))
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(20):
        params = {"node": "all", "limit": "4", **({"cursor": cursor} if cursor else {})}
        body = run(node.answer("audit", params))
        assert len(body["entries"]) <= 4
        seen += ids(body)
        cursor = body["next_cursor"]
        if cursor is None:
            break
    everything = sorted((row for log in logs.values() for row in log),
                        key=lambda row: row_time(row, "time"), reverse=True)
    assert seen == [row["id"] for row in everything]


def test_a_single_node_answers_all_alone_and_knows_no_other_node() -> None:
    node = NodeViews(node_id="node-a", local={"audit": PagedSource(rows(2, 1))})
    body = run(node.answer("audit", {"node": "all"}))
    assert body["sources"] == [{"node_id": "node-a", "total": 2}]
    assert run(node.answer("audit", {}))["node"] == "node-a"
    with pytest.raises(AdminError) as caught:
        run(node.answer("audit", {"node": "node-b"}))
    assert caught.value.status == 404


# -- node to node through POST /cluster/v1/admin/<family> -----------------------------------


class Pair:
    """Node B's cluster API answering its audit views; node A's views reach it through a
    real ClusterClient."""

    def __init__(self, tmp_path: Path, b_local: dict[str, Any] | None = None) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.b_audit = PagedSource(rows(5, 4, 3, tag="b"))
        b_views = NodeViews(node_id="node-b", local={"audit": self.b_audit, **(b_local or {})})
        api = ClusterApi(cluster=CLUSTER, node_id="node-b", health=HealthState(),
                         figures=self._figures, clock=self.clock.seconds, node_views=b_views)
        root = RootResource(s3=Resource(), admin=Resource(), limits=ServerLimits(),
                            domains=(), cluster=api.resource())
        client = ClusterClient(cluster=CLUSTER, node_id="node-a",
                               http=served(root, str(tmp_path)), clock=self.clock)
        membership = Membership("node-a")
        membership.observe(B, ProbeResult(status=200, mac_ok=True, fingerprint_ok=True,
                                          node_id="node-b"), now=NOW)
        self.a = NodeViews(node_id="node-a", local={"audit": PagedSource(rows(6, tag="a"))},
                           membership=membership, client=client)
        self.client = client

    async def _figures(self) -> Any:
        return FIGURES


def test_a_proxied_query_is_answered_by_the_peers_route(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    body = run(pair.a.answer("audit", {"node": "node-b", "limit": "2"}))
    assert body == {"node": "node-b", "entries": rows(5, 4, tag="b"), "next_cursor": "2"}
    assert pair.b_audit.asked == [{"limit": "2"}]
    merged = run(pair.a.answer("audit", {"node": "all", "limit": "2"}))
    assert ids(merged) == ["a6", "b5"]
    assert [s["total"] for s in merged["sources"]] == [1, 2]


def test_the_peers_own_refusal_is_forwarded(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    with pytest.raises(AdminError) as caught:
        run(pair.a.answer("audit", {"node": "node-b", "since": "bad"}))
    assert (caught.value.status, caught.value.message) == (
        400, "since must be an ISO 8601 timestamp.")


def test_the_route_ignores_node_and_non_text_values_and_knows_its_families(
        tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    answer = run(pair.client.request("POST", B, "/cluster/v1/admin/audit",
                                     body=b'{"node": "node-c", "limit": 1, "bucket": "x",'
                                          b' "future": {"a": 1}}'))
    assert answer.status == 200
    assert json.loads(answer.body)["node"] == "node-b"
    assert pair.b_audit.asked == [{"bucket": "x"}]
    missing = run(pair.client.view_query(B, "replication-journal", {}))
    assert missing.status == 404
    not_json = run(pair.client.request("POST", B, "/cluster/v1/admin/audit", body=b"[1]"))
    assert not_json.status == 400


def test_notification_events_are_a_family_proxied_like_the_audit(tmp_path: Path) -> None:
    asked: list[Any] = []

    async def events(params: Any) -> dict[str, Any]:
        asked.append(dict(params))
        return {"events": [{"id": 3, "time": "2023-11-14T22:13:20+00:00", "status": "failed"}],
                "next_cursor": None, "cursors": ["3"]}

    pair = Pair(tmp_path, b_local={"notification-events": events})
    body = run(pair.a.answer("notification-events", {"node": "node-b", "status": "failed"}))
    assert body["node"] == "node-b" and body["events"][0]["id"] == 3
    assert asked == [{"status": "failed"}]
