"""POST /cluster/v1/admin/<family>: a peer asks this node for its part of a per-node view
(spec Cluster protocol, "proxied node-local view queries"): `audit`, `metrics-history`
(node_views.FAMILIES; the notification events and the replication journal are one line
each there once they exist).

The body is the filter as a JSON object of text values (the admin query's parameters:
since, until, limit, cursor, bucket, ...; other values ignored, rule 14); `node` is
ignored, so a proxied query is always answered here and never travels on. The answer is
this node's own: {node, <rows>, next_cursor?, cursors?} (`cursors`: one per row of a paged
family, so a node=all merge can resume this node mid-page). A malformed filter is this
node's 400, which the asking node forwards; a family this node does not have is 404.

Authorization is the cluster's (`cluster_route`: a verified peer); the asking node
authorized its admin caller (svc:ViewServerInfo) before proxying.

The routes are declared on `ClusterApi`'s Klein app by `register_admin_proxy_routes`,
called once from the class body of `ClusterApi` (cluster/api.py), which passes its
`cluster_route` (this module never imports api.py, which imports nothing of it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from klein import Klein

from objstore.admin.api import json_body
from objstore.admin.view_params import json_params
from objstore.errors import AdminError
from objstore.http.site import ObjstoreRequest
from objstore.json_input import parse_json

if TYPE_CHECKING:
    from objstore.cluster.api import ClusterApi, VerifiedPeer


def register_admin_proxy_routes(app: Klein, cluster_route: Callable[..., Any]) -> None:
    """Declare POST /admin/<family> on `app` (ClusterApi's) with `cluster_route`."""

    @cluster_route(app, "/admin/<family>", methods=["POST"])
    async def admin_view(self: ClusterApi, request: ObjstoreRequest, peer: VerifiedPeer,
                         family: str) -> bytes:
        views = self.node_views
        if views is None:
            raise AdminError("ServiceUnavailable", "This node answers no per-node views.")
        body = await self._json_bytes(request)  # a route of ClusterApi: its body reader
        try:
            document = parse_json(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise AdminError("BadRequest", f"A view query is a JSON object: {error}") from None
        return json_body(request, 200, await views.local(family, json_params(document)))
