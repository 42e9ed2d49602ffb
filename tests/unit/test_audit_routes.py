"""GET /admin/audit, /admin/metrics and /admin/metrics/history in memory: Klein resources
driven by StubTreq, a fake gate and a fake store."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from treq.testing import StubTreq
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from objstore.admin.audit_routes import AuditRoutes, decode_cursor, encode_cursor
from objstore.admin.metrics_routes import MetricsRoutes
from objstore.errors import AdminError
from objstore.meta.audit_queries import AuditFilter, AuditRecord
from objstore.meta.metrics_queries import MetricsSample

# [999...9, 1]: a cursor whose timestamp no float can hold.
HUGE_TS_CURSOR = base64.urlsafe_b64encode(b"[" + b"9" * 400 + b", 1]").decode()

NOW = 1_700_000_000.0


class Gate:
    def __init__(self) -> None:
        self.actions: list[str | None] = []
        self.deny = False

    async def __call__(self, request: Any, action: str | None) -> Any:
        self.actions.append(action)
        if self.deny:
            raise AdminError("AccessDenied", f"This endpoint needs {action}.")
        return None


class FakeMeta:
    def __init__(self, records: list[AuditRecord]) -> None:
        self.records = records  # newest first
        self.queries: list[AuditFilter] = []
        self.history_calls: list[tuple[Any, ...]] = []

    def query_audit(self, query: AuditFilter) -> Deferred[list[AuditRecord]]:
        self.queries.append(query)
        rows = self.records
        if query.before is not None:
            rows = [r for r in rows if (r.ts, r.id or 0) < query.before]
        return defer.succeed(rows[: query.limit])

    def query_metrics_history(self, since: Any, until: Any, limit: int
                              ) -> Deferred[list[MetricsSample]]:
        self.history_calls.append((since, until, limit))
        return defer.succeed([MetricsSample(NOW, "node-a", 60.0, 5, 1, 0, 10, 20, 1, 2, 3)])


def record(n: int) -> AuditRecord:
    return AuditRecord(ts=NOW + n, operation="GetObject", node_id="node-a", bucket="b",
                       key=f"k{n}", username="alice", status=200, id=n, details={"v": n})


def fired(d: Deferred[Any]) -> Any:
    """The result of a Deferred that has already fired (StubTreq answers synchronously)."""
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]


def get(resource: object, path: str) -> tuple[int, Any, str]:
    client = StubTreq(resource)
    response = fired(client.get(f"http://objstore.test{path}"))
    body = fired(client.content(response))
    content_type = response.headers.getRawHeaders("content-type", [""])[0]
    parsed = json.loads(body) if content_type == "application/json" else body
    return response.code, parsed, content_type


@pytest.fixture
def audit() -> tuple[AuditRoutes, FakeMeta, Gate]:
    meta = FakeMeta([record(n) for n in range(5, 0, -1)])
    gate = Gate()
    return AuditRoutes(gate=gate, meta=meta, node_id="node-a"), meta, gate  # type: ignore[arg-type]


def test_audit_pages_with_an_opaque_cursor(audit: tuple[AuditRoutes, FakeMeta, Gate]) -> None:
    routes, meta, gate = audit
    status, body, _ = get(routes.resource(), "/audit?limit=2")
    assert status == 200 and gate.actions == ["svc:ViewServerInfo"]
    assert body["node"] == "node-a"
    assert [e["key"] for e in body["entries"]] == ["k5", "k4"]
    first = body["entries"][0]
    assert first["time"] == "2023-11-14T22:13:25.000+00:00"
    assert first["user_id"] is None and first["details"] == {"v": 5}
    assert meta.queries[-1].limit == 3  # one more than the page, to know if more exist
    cursor = body["next_cursor"]
    status, body, _ = get(routes.resource(), f"/audit?limit=2&cursor={cursor}")
    assert [e["key"] for e in body["entries"]] == ["k3", "k2"]
    status, body, _ = get(routes.resource(), f"/audit?limit=2&cursor={body['next_cursor']}")
    assert [e["key"] for e in body["entries"]] == ["k1"] and body["next_cursor"] is None


def test_audit_filters_are_passed_on(audit: tuple[AuditRoutes, FakeMeta, Gate]) -> None:
    routes, meta, _ = audit
    since = quote("2023-11-14T22:13:21Z")
    until = quote("2023-11-14T23:13:21+01:00")
    status, _, _ = get(routes.resource(), f"/audit?bucket=b&operation=GetObject&user=alice"
                                          f"&since={since}&until={until}")
    assert status == 200
    query = meta.queries[-1]
    assert (query.bucket, query.operation, query.user) == ("b", "GetObject", "alice")
    assert (query.since, query.until, query.limit) == (NOW + 1, NOW + 1, 101)
    get(routes.resource(), "/audit?since=2023-11-14T22:13:21")  # no offset: UTC
    assert meta.queries[-1].since == NOW + 1


@pytest.mark.parametrize("query", [
    "limit=0", "limit=1001", "limit=x", "since=yesterday", "until=2023-13-01", "cursor=!!!",
    "cursor=" + encode_cursor(AuditRecord(ts=1.0, operation="x", id=None)),
    "limit=%C2%B2", "limit=" + "9" * 5000, "limit=%D9%A3",  # were ValueErrors: 500s
    "cursor=" + HUGE_TS_CURSOR,  # a timestamp too large for a float: OverflowError
])
def test_bad_parameters_are_json_400(audit: tuple[AuditRoutes, FakeMeta, Gate],
                                     query: str) -> None:
    routes, _, _ = audit
    status, body, _ = get(routes.resource(), f"/audit?{query}")
    assert status == 400 and body["error"] == "BadRequest", body


def test_node_parameter(audit: tuple[AuditRoutes, FakeMeta, Gate]) -> None:
    routes, _, _ = audit
    assert get(routes.resource(), "/audit?node=node-a")[0] == 200
    status, body, _ = get(routes.resource(), "/audit?node=all&limit=2")
    assert status == 200 and body["sources"] == [{"node_id": "node-a", "total": 2}]
    status, body, _ = get(routes.resource(), "/audit?node=node-z")
    assert status == 404 and body["error"] == "NotFound"


def test_audit_needs_the_gate(audit: tuple[AuditRoutes, FakeMeta, Gate]) -> None:
    routes, meta, gate = audit
    gate.deny = True
    status, body, _ = get(routes.resource(), "/audit")
    assert status == 403 and body["error"] == "AccessDenied"
    assert meta.queries == []


def test_cursor_round_trip() -> None:
    assert decode_cursor(encode_cursor(record(7))) == (NOW + 7, 7)


def metrics_routes(render: Callable[[], bytes]) -> tuple[MetricsRoutes, FakeMeta, Gate]:
    meta, gate = FakeMeta([]), Gate()
    routes = MetricsRoutes(gate=gate, meta=meta, render=render, node_id="node-a")  # type: ignore[arg-type]
    return routes, meta, gate


def test_metrics_needs_no_gate() -> None:
    routes, _, gate = metrics_routes(lambda: b"# HELP x y\n# TYPE x gauge\nx 1\n")
    gate.deny = True
    status, body, content_type = get(routes.resource(), "/metrics")
    assert status == 200 and body.startswith(b"# HELP x")
    assert content_type.startswith("text/plain; version=0.0.4")
    assert gate.actions == []


def test_metrics_history_needs_the_gate_and_labels_the_node() -> None:
    routes, meta, gate = metrics_routes(lambda: b"")
    status, body, _ = get(routes.resource(), "/metrics/history?limit=5&since=2023-11-14T22:13:20Z")
    assert status == 200 and gate.actions == ["svc:ViewServerInfo"]
    assert body["node"] == "node-a"
    assert body["samples"][0]["requests"] == 5 and body["samples"][0]["stored_bytes"] == 3
    assert meta.history_calls == [(NOW, None, 5)]
    gate.deny = True
    assert get(routes.resource(), "/metrics/history")[0] == 403
