"""GET /admin/metrics and GET /admin/metrics/history (Klein, mounted by `AdminApi`).

/metrics is the Prometheus scrape target: no authentication and never rate-limited (so it
never passes the admin gate), text exposition format 0.0.4 rendered from the node's own
registry. `render` may return the bytes or a Deferred of them: with several worker
processes (`NodeMetrics.scrape`) the workers' metric files are read on a thread pool.
/metrics/history needs svc:ViewServerInfo and answers {node, samples} newest
first, filtered by since/until (ISO 8601) and limit (default 1000, at most 10000); node
(absent or this node, a peer's node id, or "all" with `sources`: cluster/node_views.py).
`history_page` is this node's own answer, wherever it was asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from klein import Klein
from twisted.internet.defer import Deferred

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.view_params import ViewParams, parse_limit, parse_time, query_params
from objstore.admin.views import JsonObject, iso
from objstore.cluster.node_views import METRICS_HISTORY, NodeViews
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.metrics_queries import MAX_SAMPLES, MetricsSample
from objstore.metrics.registry import CONTENT_TYPE

FAMILIES = ("metrics",)
DEFAULT_SAMPLES = METRICS_HISTORY.default_limit


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


async def history_page(meta: MetaStore, params: ViewParams) -> dict[str, Any]:
    """This node's metrics history for a filter: {samples}, newest first."""
    samples = await meta.query_metrics_history(
        parse_time(params, "since"), parse_time(params, "until"),
        parse_limit(params, DEFAULT_SAMPLES, MAX_SAMPLES))
    return {"samples": [sample_view(s) for s in samples]}


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
        views: NodeViews | None = None,
    ) -> None:
        """`views`: the node's per-node views; by default this node alone."""
        self._gate = gate
        self._render = render
        self._views = views if views is not None else NodeViews(
            node_id=node_id,
            local={METRICS_HISTORY.name: lambda params: history_page(meta, params)})

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
        return json_body(request, 200, await self._views.answer(METRICS_HISTORY.name,
                                                                query_params(request)))
