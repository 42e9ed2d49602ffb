"""The membership snapshot that the probing worker of a node publishes and the other
workers mirror (cluster/shared_view.py does the files and timers), as data.

The document (JSON, one node's, never leaves the machine, holds no secret):
    {"format": 1, "node_id": ..., "published_at": seconds, "eligible": [node ids],
     "peers": [{PeerState's fields; last_verdict as its value}, ...]}
A peer's unknown fields are ignored and absent ones defaulted. A snapshot that is not
this node's (another format or node id, malformed) or older than `stale_after_seconds`
(STALE_AFTER_INTERVALS probe intervals, at least MIN_STALE_SECONDS) is unusable: the
mirror then knows the peers' addresses but nothing of them (`unknown`: never alive,
never eligible), so the quorum gate closes.

Pure: no I/O, no Twisted, no clock (callers pass `now`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from objstore.cluster.membership import Membership, PeerState, Verdict
from objstore.config import Cluster

FORMAT = 1
STALE_AFTER_INTERVALS = 4
MIN_STALE_SECONDS = 3.0
_FIELDS = {f.name: f for f in dataclasses.fields(PeerState)}


def stale_after_seconds(cluster: Cluster) -> float:
    """How old a snapshot may be before the peers count as unknown."""
    return max(STALE_AFTER_INTERVALS * cluster.probe_interval_seconds, MIN_STALE_SECONDS)


def document_of(membership: Membership, *, now: float) -> dict[str, Any]:
    """The snapshot of `membership` at `now`."""
    peers = []
    for address in sorted(membership.peers):
        entry = dataclasses.asdict(membership.peers[address])
        verdict = entry["last_verdict"]
        entry["last_verdict"] = verdict.value if verdict is not None else None
        peers.append(entry)
    return {"format": FORMAT, "node_id": membership.self_id, "published_at": now,
            "eligible": [peer.node_id for peer in membership.eligible_peers()],
            "peers": peers}


def _peer(entry: Mapping[str, Any]) -> PeerState:
    values = {name: value for name, value in entry.items() if name in _FIELDS}
    verdict = values.get("last_verdict")
    values["last_verdict"] = Verdict(verdict) if verdict is not None else None
    return PeerState(**values)


def peers_of(document: Mapping[str, Any], self_id: str) -> dict[str, PeerState] | None:
    """The peers of a snapshot; None when it is not one of this node's (another format,
    another node id, malformed)."""
    if document.get("format") != FORMAT or document.get("node_id") != self_id:
        return None
    try:
        found = [_peer(entry) for entry in document["peers"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not all(isinstance(peer.address, str) for peer in found):
        return None
    return {peer.address: peer for peer in found}


def fresh(document: Mapping[str, Any] | None, *, now: float, stale_after: float) -> bool:
    published = document.get("published_at") if document is not None else None
    if isinstance(published, bool) or not isinstance(published, int | float):
        return False
    return now - published <= stale_after


def unknown(peers: Mapping[str, PeerState]) -> dict[str, PeerState]:
    """The same addresses, nothing known of them: never alive, never eligible; a pruned
    peer stays pruned, with its last_seen (what it was is not live state)."""
    return {address: PeerState(address=address, first_seen=peer.first_seen,
                               node_id=peer.node_id, pruned=peer.pruned,
                               last_seen=peer.last_seen if peer.pruned else None)
            for address, peer in peers.items()}


def mirrored(membership: Membership, document: Mapping[str, Any] | None, *, now: float,
             stale_after: float) -> tuple[dict[str, PeerState], bool]:
    """The peers `membership` takes from `document` at `now`, and whether the snapshot
    was usable (fresh and this node's); unusable: the known addresses, all unknown."""
    peers = peers_of(document, membership.self_id) if document is not None else None
    if peers is None or not fresh(document, now=now, stale_after=stale_after):
        return unknown(membership.peers), False
    return peers, True
