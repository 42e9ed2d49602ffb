"""GET /admin/cluster (Klein, mounted by `AdminApi`): the cluster view of this node
(`cluster.views.cluster_view`: per node and cluster-level fields of the spec's Cluster
structures, plus `enabled`). Needs svc:ViewServerInfo (the audit name is
admin:GetClusterStatus).

The route is mounted on every node so the answer is always JSON: on a cluster node it is
the live view (`ClusterStatus.snapshot`, read from the node's Membership); without
[cluster] enabled the same document with `enabled: false` and this node alone
(`single_node_view`): a tool asks one endpoint and reads one shape either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from klein import Klein

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal

FAMILIES = ("cluster",)


class ClusterRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, view: Callable[[], dict[str, Any]]) -> None:
        self._gate = gate
        self._view = view

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/cluster", methods=["GET"], action=VIEW_SERVER_INFO)
    async def cluster(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        return json_body(request, 200, self._view())
