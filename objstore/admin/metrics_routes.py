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

import hmac
from collections.abc import Callable
from typing import Any

from klein import Klein
from twisted.internet.defer import Deferred

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.view_params import ViewParams, parse_limit, parse_time, query_params
from objstore.admin.views import JsonObject, iso
from objstore.cluster.node_views import METRICS_HISTORY, NodeViews
from objstore.errors import AdminError
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


def scrape_allowed(expected: bytes, presented: bytes | None) -> bool:
    """Whether an Authorization header carries the expected "Bearer <token>" (compared in
    constant time)."""
    return presented is not None and hmac.compare_digest(expected, presented.strip())


def read_bearer_token(path: str | None) -> bytes | None:
    """The token of [metrics] bearer_token_file (read once at start), None when unset;
    ValueError when the file holds no token."""
    if path is None:
        return None
    with open(path, "rb") as source:
        token = source.read().strip()
    if not token or any(byte < 0x21 or byte > 0x7E for byte in token):
        raise ValueError(f"[metrics] bearer_token_file {path}: no token (one line of "
                         "printable ASCII without spaces)")
    return token


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
        bearer_token: bytes | None = None,
    ) -> None:
        """`views`: the node's per-node views; by default this node alone. `bearer_token`
        ([metrics] bearer_token_file): the token a scrape must present, None for none."""
        self._gate = gate
        self._bearer = None if bearer_token is None else b"Bearer " + bearer_token
        self._render = render
        self._views = views if views is not None else NodeViews(
            node_id=node_id,
            local={METRICS_HISTORY.name: lambda params: history_page(meta, params)})

    def resource(self) -> object:
        return self.app.resource()

    @app.route("/metrics", methods=["GET"])
    async def metrics(self, request: ObjstoreRequest) -> bytes:
        if self._bearer is not None and not scrape_allowed(
                self._bearer, request.getHeader(b"authorization")):
            request.setHeader("WWW-Authenticate", 'Bearer realm="objstore metrics"')
            raise AdminError("Unauthorized", "GET /admin/metrics needs the bearer token of "
                             "[metrics] bearer_token_file.")
        rendered = self._render()
        body = await rendered if isinstance(rendered, Deferred) else rendered
        request.setHeader("Content-Type", CONTENT_TYPE)
        request.setHeader("Content-Length", str(len(body)))
        return body

    @authorized_route(app, "/metrics/history", methods=["GET"], action=VIEW_SERVER_INFO)
    async def history(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        return json_body(request, 200, await self._views.answer(METRICS_HISTORY.name,
                                                                query_params(request)))
