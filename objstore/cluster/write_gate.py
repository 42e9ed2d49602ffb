"""The cluster node's `WriteGate` (engine/replicator.py): the write gate and the capacity
guard of gate.py, asked of the live `Membership` view before every local write of an
object data-plane change.

Order: the gate first (503 ServiceUnavailable, closed, size exceeded or, rule 14, this
node the only eligible one of the newest protocol version `protocol`; quorum mode only,
available mode never closes it), then, for a write that brings bytes (`size_bytes` > 0),
the capacity guard (507 InsufficientStorage when this node or an eligible peer would keep
less than `[cluster] capacity_reserve_bytes` after storing them). A deletion (0 bytes) is
never refused for capacity: it frees space. This node's free bytes come from its space
guard (`SpaceGuard.available_bytes`), the peers' from their last authenticated ping; bytes
this node already holds (`held_bytes`: a completion's parts) count as free here, since the
write adds them only to the peers.

`state()` is the gate's current state, for /admin/health?writable=1, /admin/cluster and
the metrics; `refusals` counts the writes refused, by reason, for the metrics.
`ClusterStatus` is what the health endpoint and /admin/cluster read of a cluster node;
`single_node_view` the /admin/cluster document of a node without [cluster] enabled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from objstore.cluster.gate import (
    GateState,
    capacity_error,
    capacity_ok,
    eligible_free_bytes,
    gate_error,
    gate_state,
)
from objstore.cluster.membership import Membership
from objstore.cluster.views import PeerSync, cluster_view
from objstore.cluster.wire import PROTOCOL_VERSION
from objstore.config import Cluster
from objstore.metrics.collectors import GateFigures


@dataclass
class ClusterWriteGate:
    membership: Membership
    cluster: Cluster
    own_free_bytes: Callable[[], int]
    refusals: dict[str, int] = field(default_factory=dict)  # reason -> count
    protocol: int = PROTOCOL_VERSION  # this node's (rule 14: the upgrade rule)

    def state(self) -> GateState:
        peers = self.membership.eligible_peers()
        return gate_state(1 + len(peers), self.cluster, own_protocol=self.protocol,
                          peer_protocols=[peer.protocol for peer in peers])

    def check_write(self, size_bytes: int, *, held_bytes: int = 0) -> None:
        state = self.state()
        refusal = gate_error(state)
        if refusal is not None:
            self._count(state.value)
            raise refusal
        if size_bytes > 0 and not capacity_ok(
                eligible_free_bytes(self.own_free_bytes() + max(held_bytes, 0),
                                    self.membership.eligible_peers()),
                write_bytes=size_bytes, reserve_bytes=self.cluster.capacity_reserve_bytes):
            self._count("capacity")
            raise capacity_error()

    def figures(self) -> GateFigures:
        """For the metrics collector, at scrape time."""
        return GateFigures(self.state().value, self.membership.eligible_node_count(),
                           self.cluster.write_quorum, dict(self.refusals))

    def _count(self, reason: str) -> None:
        self.refusals[reason] = self.refusals.get(reason, 0) + 1


@dataclass
class ClusterStatus:
    """What /admin/health and /admin/cluster read of a cluster node (`http.health
    .ClusterHealth`): the gate, syncing and each peer's sync object (anti-entropy's:
    `start_cluster` sets both) and the snapshot of `cluster_view` at `clock()`."""

    gate: ClusterWriteGate
    clock: Callable[[], float]
    is_syncing: Callable[[], bool] = lambda: False
    peer_sync: PeerSync | None = None

    def writable(self) -> bool:
        return self.gate.state() is GateState.OPEN

    def syncing(self) -> bool:
        return self.is_syncing()

    def snapshot(self) -> dict[str, Any]:
        return {"enabled": True, **cluster_view(self.gate.membership, self.gate.cluster,
                                                now=self.clock(), syncing=self.syncing(),
                                                protocol=self.gate.protocol,
                                                peer_sync=self.peer_sync)}


def single_node_view(cluster: Cluster, node_id: str, *, now: float) -> dict[str, Any]:
    """GET /admin/cluster on a node without [cluster] enabled: the same document, saying
    `enabled: false`, with this node alone (open gate, its own worker leader)."""
    alone = replace(cluster, node_id=node_id, cluster_size=1)
    return {"enabled": False, **cluster_view(Membership(node_id), alone, now=now)}
