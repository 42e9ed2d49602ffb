"""The cluster write gate, the acknowledgement count after fan-out and the capacity guard.

Three questions a quorum write asks, each from plain numbers (the eligible node count from
`Membership.eligible_node_count`, the acknowledgements the fan-out collected, free bytes):

1. Before writing: is the gate open? (`gate_state`, the spec's "Cluster write gate")
       open           write_quorum <= eligible nodes (self included) <= cluster_size
       closed         eligible nodes < write_quorum: 503 ServiceUnavailable
       size exceeded  eligible nodes > cluster_size: 503 with its own message; fail closed,
                      no override (more nodes than configured could form two disjoint
                      majorities, and two sides of a partition would both accept writes)
       upgrade pending  quorum met, but this node's protocol version is newer than that of
                      every other eligible node (rule 14, rolling upgrade): 503 with its
                      own message until a second eligible node speaks our version (or a
                      newer one). A peer that reports no version speaks LEGACY_PROTOCOL.
   Size is checked first: past cluster_size the quorum is met anyway; then the quorum;
   then the upgrade rule (`upgrade_pending`, only with at least one other eligible node:
   a node alone is nobody's first upgraded node).
   In available mode the gate never closes, for quorum or size: writes are accepted
   locally and reconciled later, no majority is ever relied on (so no split majority to
   fear), and the spec has `?writable=1` answer 200 in available mode. `size_exceeded` is
   still computed in both modes, for /admin/cluster and the logs.
2. After the local write and the fan-out: did enough peers acknowledge? An acknowledgement
   (`Ack`, from `ack_from_response`) counts only when applied AND has_blob; a legacy empty
   200 counts in full; 1 (this node) + counted acks >= write_quorum (`quorum_satisfied`).
   Below it: 503, and the local copy stays (`quorum_error`). Available mode ignores acks.
3. Before accepting bytes: does the smallest eligible node (self included) keep at least
   the reserve (`[cluster] capacity_reserve_bytes`) once they are written? If not: 507
   InsufficientStorage (`capacity_ok`).

Pure: no I/O, no Twisted. The refusals are `S3Error`s of the one error table; every 503
gets `Retry-After: 5` where it is rendered.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from objstore.cluster.membership import PeerState
from objstore.config import Cluster
from objstore.convergence.ack import Ack, quorum_satisfied
from objstore.errors import S3Error

CLOSED_MESSAGE = ("The cluster cannot reach its write quorum: too few nodes are eligible. "
                  "Writes are refused until enough nodes are back; reads still work.")
SIZE_EXCEEDED_MESSAGE = ("More nodes are eligible than [cluster] cluster_size allows. Writes "
                         "are refused until cluster_size or the membership is corrected.")
QUORUM_MESSAGE = ("Too few nodes acknowledged the write. It is stored on this node and will "
                  "reach the others; retry to confirm it.")
CAPACITY_MESSAGE = "The smallest node of the cluster does not have room for this write."


UPGRADE_MESSAGE = ("This node runs a newer cluster protocol than every other eligible node: "
                   "quorum writes are refused until a second node of this version is up "
                   "(rolling upgrade). Reads still work.")

# The protocol version of a peer whose ping reports none (every version reports it).
LEGACY_PROTOCOL = 1


class GateState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"  # no quorum
    SIZE_EXCEEDED = "size_exceeded"
    UPGRADE_PENDING = "upgrade_pending"  # rule 14: the first upgraded node


def size_exceeded(eligible_nodes: int, cluster: Cluster) -> bool:
    """More eligible nodes (self included) than [cluster] cluster_size: in either mode."""
    return eligible_nodes > cluster.cluster_size


def upgrade_pending(own_protocol: int, peer_protocols: Iterable[int | None]) -> bool:
    """Rule 14: this node's protocol is newer than every other eligible node's (their
    versions given; none given: no other eligible node, so no upgrade to wait for)."""
    versions = [LEGACY_PROTOCOL if v is None else v for v in peer_protocols]
    return bool(versions) and all(own_protocol > version for version in versions)


def gate_state(eligible_nodes: int, cluster: Cluster, *, own_protocol: int | None = None,
               peer_protocols: Iterable[int | None] = ()) -> GateState:
    """The gate; the upgrade rule is asked only when `own_protocol` is given, with the
    protocol versions of the eligible peers."""
    if cluster.consistency != "quorum":
        return GateState.OPEN
    if size_exceeded(eligible_nodes, cluster):
        return GateState.SIZE_EXCEEDED
    if eligible_nodes < cluster.write_quorum:
        return GateState.CLOSED
    if own_protocol is not None and upgrade_pending(own_protocol, peer_protocols):
        return GateState.UPGRADE_PENDING
    return GateState.OPEN


def gate_error(state: GateState) -> S3Error | None:
    """The refusal of a write while the gate is in `state`; None when it is open."""
    if state is GateState.CLOSED:
        return S3Error("ServiceUnavailable", CLOSED_MESSAGE)
    if state is GateState.SIZE_EXCEEDED:
        return S3Error("ServiceUnavailable", SIZE_EXCEEDED_MESSAGE)
    if state is GateState.UPGRADE_PENDING:
        return S3Error("ServiceUnavailable", UPGRADE_MESSAGE)
    return None


# -- acknowledgements -----------------------------------------------------------------


def write_acknowledged(acks: Iterable[Ack | None], cluster: Cluster) -> bool:
    """Whether the client may be told the write succeeded (available mode: always)."""
    return cluster.consistency != "quorum" or quorum_satisfied(acks, cluster.write_quorum)


def quorum_error() -> S3Error:
    return S3Error("ServiceUnavailable", QUORUM_MESSAGE)


# -- capacity -------------------------------------------------------------------------


def eligible_free_bytes(self_free_bytes: int, eligible_peers: Iterable[PeerState]
                        ) -> list[int]:
    """Free bytes of this node and of each eligible peer that reported them."""
    return [self_free_bytes, *(p.disk_available for p in eligible_peers
                               if p.disk_available is not None)]


def capacity_ok(free_bytes: Iterable[int], *, write_bytes: int, reserve_bytes: int) -> bool:
    """The smallest node keeps `reserve_bytes` after storing `write_bytes`."""
    smallest = min(free_bytes, default=None)
    return smallest is None or smallest - max(write_bytes, 0) >= reserve_bytes


def capacity_error() -> S3Error:
    return S3Error("InsufficientStorage", CAPACITY_MESSAGE)
