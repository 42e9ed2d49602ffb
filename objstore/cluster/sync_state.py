"""What anti-entropy knows of its progress toward each peer, as the readers see it: the
node's `syncing` state (health), each peer's `sync` object (/admin/cluster) and the
metrics' figures; and that state as a document, so that with several workers the one that
runs anti-entropy (worker 0) can publish it and the others answer the same (cluster/
sync_view.py writes and reads the file).

`SyncState` holds the cursors (as stored) and the in-memory progress of this process
(`sync_rules.PeerProgress`); its answers follow `sync_rules`. Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from objstore.cluster.membership import Membership, PeerState
from objstore.cluster.views import iso
from objstore.convergence.sync_rules import PeerProgress, SyncCursor, lag, syncing

FORMAT = 1


@dataclass(frozen=True, slots=True)
class PeerSyncFigures:
    """One peer's sync state for the metrics (`metrics.collectors.PeerSyncFigures`)."""

    node_id: str
    lag: int | None
    skipped_entries: int
    first_pass_done: bool


@dataclass
class SyncState:
    cursors: dict[str, SyncCursor] = field(default_factory=dict)
    progress: dict[str, PeerProgress] = field(default_factory=dict)
    loaded: bool = False  # the cursors were read (before: syncing if a peer is eligible)

    def is_syncing(self, membership: Membership) -> bool:
        ids = [peer.node_id for peer in membership.eligible_peers() if peer.node_id]
        return syncing(ids, self.progress, loaded=self.loaded)

    def peer_sync(self, peer: PeerState) -> dict[str, Any] | None:
        """The `sync` object of a peer in /admin/cluster (None: its node id is unknown)."""
        if peer.node_id is None:
            return None
        cursor = self.cursors.get(peer.node_id)
        progress = self.progress.get(peer.node_id, PeerProgress())
        return {
            "hwm": cursor.cursor if cursor is not None else None,
            "lag": lag(cursor, peer.max_seq),
            "last_reconcile": iso(cursor.last_reconcile) if cursor is not None else None,
            "first_pass_done": progress.passed,
            "skipped_entries": cursor.skipped_entries if cursor is not None else 0,
        }

    def figures(self, membership: Membership) -> list[PeerSyncFigures]:
        max_seqs = {peer.node_id: peer.max_seq for peer in membership.peers.values()
                    if peer.node_id is not None}
        return [PeerSyncFigures(node_id, lag(cursor, max_seqs.get(node_id)),
                                cursor.skipped_entries,
                                self.progress.get(node_id, PeerProgress()).passed)
                for node_id, cursor in sorted(self.cursors.items())]


def document_of(state: SyncState, *, now: float) -> dict[str, Any]:
    """The state at `now`, as JSON-ready data."""
    peers = []
    for node_id in sorted(set(state.cursors) | set(state.progress)):
        cursor = state.cursors.get(node_id)
        peers.append({
            "node_id": node_id,
            "cursor": dataclasses.asdict(cursor) if cursor is not None else None,
            "progress": dataclasses.asdict(state.progress.get(node_id, PeerProgress())),
        })
    return {"format": FORMAT, "published_at": now, "loaded": state.loaded, "peers": peers}


def _known(kind: type[Any], values: object) -> Any:
    if not isinstance(values, Mapping):
        raise ValueError("not an object")
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{name: value for name, value in values.items() if name in names})


def state_of(document: Mapping[str, Any] | None, *, now: float, stale_after: float
             ) -> SyncState | None:
    """The state a published document holds; None when there is none, it is older than
    `stale_after` seconds or it cannot be read."""
    if document is None or document.get("format") != FORMAT:
        return None
    published = document.get("published_at")
    if not isinstance(published, int | float) or now - published > stale_after:
        return None
    state = SyncState(loaded=bool(document.get("loaded")))
    try:
        for entry in document.get("peers", []):
            node_id = str(entry["node_id"])
            if entry.get("cursor") is not None:
                state.cursors[node_id] = _known(SyncCursor, entry["cursor"])
            state.progress[node_id] = _known(PeerProgress, entry.get("progress", {}))
    except (KeyError, TypeError, ValueError):
        return None
    return state
