"""The node's readiness state as GET /admin/health reports it (Health states of the spec).

States, by precedence: draining (503, SIGTERM received), maintenance (503, a job in mode
`maintenance` is running on this node: `maintenance_job` names it), syncing (503, a
cluster node whose first reconcile pass toward every eligible peer is not done),
read_only (503, only asked with `?writable=1`, while the cluster write gate is closed),
healthy (200 ok). A single node (no `cluster`) is never syncing nor read_only, so its
answers are what they always were. `?verbose=1` answers 200 on a live process (a
liveness probe reading the same endpoint must not kill a syncing node), with the cluster
snapshot when there is one.

`ClusterHealth` is what the cluster tells the health endpoint: whether writes are
accepted (the write gate), whether it is syncing (part 2: anti-entropy), and its snapshot
(`cluster.views.cluster_view`, worker_leader included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class ClusterHealth(Protocol):
    def writable(self) -> bool:
        """The cluster write gate is open."""

    def syncing(self) -> bool: ...

    def snapshot(self) -> dict[str, Any]:
        """The /admin/cluster document."""


@dataclass
class HealthState:
    draining: bool = False
    cluster: ClusterHealth | None = None  # set on a cluster node
    # The id of the maintenance-mode job running on this node, if any (workers/jobs.py).
    maintenance_job: Callable[[], str | None] | None = None

    def status(self, *, writable: bool = False) -> tuple[int, str]:
        """(HTTP status, body status) for a readiness probe; `writable`: ?writable=1."""
        if self.draining:
            return 503, "draining"
        if self.maintenance_job is not None and self.maintenance_job() is not None:
            return 503, "maintenance"
        cluster = self.cluster
        if cluster is not None and cluster.syncing():
            return 503, "syncing"
        if writable and cluster is not None and not cluster.writable():
            return 503, "read_only"
        return 200, "ok"

    def verbose(self) -> dict[str, Any]:
        """The ?verbose=1 document (always answered 200): the status a plain probe would
        get, and on a cluster node the cluster snapshot and the worker leader."""
        document: dict[str, Any] = {"status": self.status()[1]}
        job = self.maintenance_job() if self.maintenance_job is not None else None
        if job is not None:
            document["maintenance_job"] = job
        if self.cluster is not None:
            snapshot = self.cluster.snapshot()
            document["worker_leader"] = snapshot.get("worker_leader")
            document["cluster"] = snapshot
        return document
