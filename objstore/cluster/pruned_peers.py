"""The pruned peers of a node across its restarts: a restarted node must not re-block the
tombstone purge for another peer_prune_days on a peer dead for months (membership.py's
pruning counts from discovery for a peer never heard since start).

The prober's worker (worker 0) records its membership's pruned peers in the data
directory (`PRUNED_FILE`, written like the membership snapshot: a temporary owner-only
file renamed over the old one, on the IO pool) whenever the set of pruned addresses
changes, checked every probe interval (`PrunedPeersRecorder`). At its first tick it
reads the file back and hands the peers to `Membership.restore_pruned`: each is known
again, pruned, with its last_seen, unless the node already had an authenticated answer
from it since it started. Discovery decides the rest as for any pruned peer: one it still
proposes stays pruned until it answers; one it no longer proposes is forgotten.

The document (JSON, never leaves the machine, holds no secret):
    {"format": 1, "node_id": ..., "peers": [{"address", "node_id", "first_seen",
     "last_seen", "last_authenticated"}, ...]}
A file of another format or node id, or malformed, is ignored (the peers then count from
discovery again, as before this record existed). The document's rules are pure
(`document_of`, `remembered`); the service does the timer and the files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from twisted.application.service import MultiService
from twisted.logger import Logger

from objstore.cluster.membership import Membership, PeerState
from objstore.cluster.shared_view import read_view, write_view
from objstore.config import Cluster
from objstore.threads import Runner
from objstore.timers import ReactorClock, safe_timer

log = Logger()

PRUNED_FILE = "cluster-pruned-peers.json"
FORMAT = 1
_NUMBERS = ("first_seen", "last_seen", "last_authenticated")


def pruned_path(data_dir: str) -> str:
    return os.path.join(data_dir, PRUNED_FILE)


def pruned_key(membership: Membership) -> tuple[tuple[str, str | None], ...]:
    """What a change of the record is: the pruned addresses and their node ids."""
    return tuple(sorted((p.address, p.node_id) for p in membership.peers.values()
                        if p.pruned))


def document_of(membership: Membership) -> dict[str, Any]:
    """The record of `membership`'s pruned peers."""
    peers = [{"address": p.address, "node_id": p.node_id, "first_seen": p.first_seen,
              "last_seen": p.last_seen, "last_authenticated": p.last_authenticated}
             for p in sorted(membership.peers.values(), key=lambda p: p.address)
             if p.pruned]
    return {"format": FORMAT, "node_id": membership.self_id, "peers": peers}


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _peer(entry: object) -> PeerState | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("address"), str):
        return None
    node_id = entry.get("node_id")
    if node_id is not None and not isinstance(node_id, str):
        return None
    if not _number(entry.get("first_seen")) or not all(
            entry.get(name) is None or _number(entry.get(name)) for name in _NUMBERS):
        return None
    return PeerState(address=entry["address"], first_seen=float(entry["first_seen"]),
                     node_id=node_id, pruned=True, last_seen=entry.get("last_seen"),
                     last_authenticated=entry.get("last_authenticated"))


def remembered(document: Mapping[str, Any] | None, self_id: str) -> list[PeerState]:
    """The pruned peers of a record; none when it is missing, not this node's (another
    format or node id) or malformed (a bad entry is skipped)."""
    if (document is None or document.get("format") != FORMAT
            or document.get("node_id") != self_id
            or not isinstance(document.get("peers"), list)):
        return []
    return [peer for peer in map(_peer, document["peers"]) if peer is not None]


class PrunedPeersRecorder(MultiService):
    """In the probing worker: restores the record at its first tick, then writes it
    whenever the pruned set changed (checked every probe interval)."""

    def __init__(self, membership: Membership, path: str, *, cluster: Cluster,
                 clock: ReactorClock, runner: Runner) -> None:
        super().__init__()
        self.membership = membership
        self._path = path
        self._runner = runner
        self._written: tuple[tuple[str, str | None], ...] | None = None  # None: not read
        safe_timer(cluster.probe_interval_seconds, self.tick, clock=clock,
                   what="cluster pruned peers record").setServiceParent(self)

    async def tick(self) -> None:
        if self._written is None:
            await self.restore()
        key = pruned_key(self.membership)
        if key != self._written:
            await self._runner.run(write_view, self._path, document_of(self.membership))
            self._written = key

    async def restore(self) -> None:
        peers = remembered(await self._runner.run(read_view, self._path),
                           self.membership.self_id)
        self.membership.restore_pruned(peers)
        if peers:
            log.info("cluster: {n} peer(s) pruned before the restart remain pruned until "
                     "they answer: {peers}", n=len(peers),
                     peers=", ".join(p.node_id or p.address for p in peers))
        self._written = tuple(sorted((p.address, p.node_id) for p in peers))


__all__ = ["PRUNED_FILE", "PrunedPeersRecorder", "document_of", "pruned_key", "pruned_path",
           "remembered"]
