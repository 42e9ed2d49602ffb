"""GET /admin/metrics and GET /admin/metrics/history (Klein, mounted by `AdminApi`).

/metrics is the Prometheus scrape target: no authentication and never rate-limited (so it
never passes the admin gate), text exposition format 0.0.4 rendered from the node's own
registry. `render` may return the bytes or a Deferred of them: with several worker
processes (`NodeMetrics.scrape`) the workers' metric files are read on a thread pool.
/metrics/history needs svc:ViewServerInfo and answers {node, samples} newest
first, filtered by since/until (ISO 8601) and limit (default 1000, at most 10000).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from klein import Klein
from twisted.internet.defer import Deferred

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.audit_routes import check_node, parse_limit, parse_time
from objstore.admin.gate import VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.views import JsonObject, iso
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.metrics_queries import MAX_SAMPLES, MetricsSample
from objstore.metrics.registry import CONTENT_TYPE

FAMILIES = ("metrics",)
DEFAULT_SAMPLES = 1000


def sample_view(sample: MetricsSample) -> JsonObject:
    return {
        "time": iso(sample.ts),
        "node_id": sample.node_id,
        "interval_seconds": round(sample.interval_seconds, 3),
        "requests": sample.requests,
        "errors": sample.errors,
        "server_errors": sample.server_errors,
        "bytes_in": sample.bytes_in,
        "bytes_out": sample.bytes_out,
        "buckets": sample.buckets,
        "objects": sample.objects,
        "stored_bytes": sample.stored_bytes,
    }


class MetricsRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(
        self,
        *,
        gate: AdminGate,
        meta: MetaStore,
        render: Callable[[], bytes | Deferred[bytes]],
        node_id: str,
    ) -> None:
        self._gate = gate
        self._meta = meta
        self._render = render
        self._node_id = node_id

    def resource(self) -> object:
        return self.app.resource()

    @app.route("/metrics", methods=["GET"])
    async def metrics(self, request: ObjstoreRequest) -> bytes:
        rendered = self._render()
        body = await rendered if isinstance(rendered, Deferred) else rendered
        request.setHeader("Content-Type", CONTENT_TYPE)
        request.setHeader("Content-Length", str(len(body)))
        return body

    @authorized_route(app, "/metrics/history", methods=["GET"], action=VIEW_SERVER_INFO)
    async def history(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        everywhere = check_node(request, self._node_id)
        samples = await self._meta.query_metrics_history(
            parse_time(request, "since"), parse_time(request, "until"),
            parse_limit(request, DEFAULT_SAMPLES, MAX_SAMPLES),
        )
        body: dict[str, Any] = {"node": self._node_id,
                                "samples": [sample_view(s) for s in samples]}
        if everywhere:
            body["sources"] = [{"node_id": self._node_id, "total": len(samples)}]
        return json_body(request, 200, body)
