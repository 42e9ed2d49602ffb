"""GET /admin/cluster as data: the spec's per-node and cluster-level fields of the Cluster
structures, computed from the `Membership` view and the config alone.

Per node (this node first, then each known peer address): node_id, address, state
("self", "alive", "dead", "pruned" (no authenticated answer for peer_prune_days:
membership.py), or "unknown" before any answer), pruned, alive, authenticated,
config_ok (false: configuration drift), eligible (THE predicate), verdict (of the last
answer), legacy, loop, last_seen, clock_offset_seconds, probe_latency_seconds (of the
last answered probe), the figures of the last authenticated ping (disk_total,
disk_available, max_seq, protocol: its cluster protocol version, rule 14) and the sync
object (hwm, lag, last_reconcile, first_pass_done, skipped_entries), filled from
anti-entropy's cursors (`cluster/anti_entropy.py` `peer_sync`, given as `peer_sync`;
empty before its first pass).

Cluster level: eligible_node_count, live_node_count, size_exceeded, tombstone_gc_blocked
(rule 7: some known peer, not pruned, was not seen within the tombstone grace window),
syncing (given: part 2), worker_leader; and, beyond the spec, node_id, consistency, cluster_size,
write_quorum, protocol (this node's) and the write gate's state (with the upgrade rule).

Pure: no I/O, no Twisted, no clock (callers pass `now`). Never a secret or fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from objstore.cluster.gate import gate_state, size_exceeded
from objstore.cluster.membership import Membership, PeerState, eligible
from objstore.cluster.wire import PROTOCOL_VERSION
from objstore.config import Cluster
from objstore.utc_dates import iso_milliseconds


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return iso_milliseconds(timestamp)


def empty_sync() -> dict[str, Any]:
    """The sync object before anti-entropy has run toward a peer."""
    return {"hwm": None, "lag": None, "last_reconcile": None, "first_pass_done": False,
            "skipped_entries": 0}


def peer_state_word(peer: PeerState) -> str:
    if peer.is_self:
        return "self"
    if peer.pruned:
        return "pruned"
    if peer.alive:
        return "alive"
    return "dead" if peer.last_seen is not None or peer.consecutive_failures else "unknown"


PeerSync = Callable[[PeerState], dict[str, Any] | None]


def peer_entry(peer: PeerState, peer_sync: PeerSync | None = None) -> dict[str, Any]:
    sync = peer_sync(peer) if peer_sync is not None else None
    return {
        "node_id": peer.node_id,
        "address": peer.address,
        "state": peer_state_word(peer),
        "pruned": peer.pruned,
        "alive": peer.alive,
        "authenticated": peer.authenticated,
        "config_ok": peer.config_ok,
        "eligible": eligible(peer),
        "verdict": peer.last_verdict.value if peer.last_verdict is not None else None,
        "legacy": peer.legacy,
        "loop": peer.is_self,
        "last_seen": iso(peer.last_seen),
        "consecutive_failures": peer.consecutive_failures,
        "clock_offset_seconds": peer.clock_offset_seconds,
        "probe_latency_seconds": peer.probe_latency_seconds,
        "protocol": peer.protocol,
        "disk_total": peer.disk_total,
        "disk_available": peer.disk_available,
        "max_seq": peer.max_seq,
        "sync": sync if sync is not None else empty_sync(),
    }


def self_entry(membership: Membership, cluster: Cluster, *, now: float,
               protocol: int = PROTOCOL_VERSION) -> dict[str, Any]:
    return {
        "node_id": membership.self_id, "address": cluster.advertise_url or None,
        "state": "self", "pruned": False, "alive": True, "authenticated": True, "config_ok": True,
        "eligible": True, "verdict": None, "legacy": False, "loop": False,
        "last_seen": iso(now), "consecutive_failures": 0, "clock_offset_seconds": 0.0,
        "probe_latency_seconds": None, "protocol": protocol, "disk_total": None,
        "disk_available": None, "max_seq": None, "sync": None,
    }


def tombstone_gc_blocked(membership: Membership, cluster: Cluster, *, now: float) -> bool:
    """Rule 7: purging tombstones is safe only when every known peer was seen within the
    grace window; a loop entry is this node, not a peer, and a pruned peer has left
    (membership.py: it blocks nothing until it answers again)."""
    return bool(unseen_within_grace(membership, cluster, now=now))


def unseen_within_grace(membership: Membership, cluster: Cluster, *,
                        now: float) -> list[PeerState]:
    """The peers that block the tombstone purge (`tombstone_gc_blocked`)."""
    grace = cluster.tombstone_grace_total_seconds
    return [peer for peer in membership.peers.values()
            if not peer.is_self and not peer.pruned
            and (peer.last_seen is None or now - peer.last_seen > grace)]


def cluster_view(membership: Membership, cluster: Cluster, *, now: float,
                 syncing: bool = False, protocol: int = PROTOCOL_VERSION,
                 peer_sync: PeerSync | None = None) -> dict[str, Any]:
    """The document of GET /admin/cluster; `protocol` is this node's version."""
    eligible_nodes = membership.eligible_node_count()
    protocols = [peer.protocol for peer in membership.eligible_peers()]
    peers = [peer_entry(membership.peers[address], peer_sync)
             for address in sorted(membership.peers)]
    return {
        "node_id": membership.self_id,
        "consistency": cluster.consistency,
        "cluster_size": cluster.cluster_size,
        "write_quorum": cluster.write_quorum,
        "protocol": protocol,
        "gate": gate_state(eligible_nodes, cluster, own_protocol=protocol,
                           peer_protocols=protocols).value,
        "eligible_node_count": eligible_nodes,
        "live_node_count": membership.live_node_count(),
        "size_exceeded": size_exceeded(eligible_nodes, cluster),
        "tombstone_gc_blocked": tombstone_gc_blocked(membership, cluster, now=now),
        "syncing": syncing,
        "worker_leader": membership.worker_leader(),
        "nodes": [self_entry(membership, cluster, now=now, protocol=protocol), *peers],
    }
