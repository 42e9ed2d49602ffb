"""Anti-entropy's state across a node's workers ([server] workers > 1).

Anti-entropy runs in the probing worker only (worker 0: one pass per node, one set of
cursors). It publishes its `SyncState` (sync_state.py) to a node-local file of the
runtime directory every poll (`SyncPublisher`, the same atomic owner-only write as the
membership's: shared_view.write_view); every other worker reads it every poll
(`SyncMirror`), so /admin/health's `syncing`, /admin/cluster's `sync` objects and the
metrics answer the same whichever worker takes the request.

A missing, unreadable or stale document (older than the membership's stale limit:
view_snapshot.stale_after_seconds) gives a state not yet loaded: the mirror then says
syncing while an eligible peer is known (its membership mirror fails closed the same way).
File IO runs on the IO pool.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from objstore.cluster.membership import Membership, PeerState
from objstore.cluster.shared_view import NodeFileMirror, NodeFilePublisher, read_view
from objstore.cluster.sync_state import PeerSyncFigures, SyncState, document_of, state_of
from objstore.cluster.view_snapshot import stale_after_seconds
from objstore.config import Cluster
from objstore.threads import Runner
from objstore.timers import ReactorClock

SYNC_FILE = "cluster-sync.json"


def sync_path(runtime_dir: str) -> str:
    return os.path.join(runtime_dir, SYNC_FILE)


def poll_seconds(cluster: Cluster) -> float:
    """How often anti-entropy looks for due peers (and its state is published)."""
    return min(cluster.anti_entropy_interval_seconds, cluster.probe_interval_seconds)


class SyncAnswers:
    """What health, /admin/cluster and the metrics ask of anti-entropy's state, answered
    from `state` over `_membership`: by `AntiEntropy` in worker 0, by `SyncMirror`
    elsewhere."""

    state: SyncState
    _membership: Membership

    def is_syncing(self) -> bool:
        return self.state.is_syncing(self._membership)

    def peer_sync(self, peer: PeerState) -> dict[str, Any] | None:
        """The `sync` object of a peer in /admin/cluster."""
        return self.state.peer_sync(peer)

    def figures(self) -> list[PeerSyncFigures]:
        return self.state.figures(self._membership)


class SyncPublisher(NodeFilePublisher):
    """In the worker that runs anti-entropy: writes `state` to `path` every poll."""

    def __init__(self, state: SyncState, path: str, *, cluster: Cluster,
                 clock: ReactorClock, runner: Runner) -> None:
        super().__init__(lambda now: document_of(state, now=now), path,
                         interval=poll_seconds(cluster), clock=clock, runner=runner,
                         what="cluster sync state publish")


class SyncMirror(NodeFileMirror, SyncAnswers):
    """In every other worker: the published state, read every poll; answers what
    `AntiEntropy` answers in worker 0 (`SyncAnswers`)."""

    def __init__(self, membership: Membership, path: str, *, cluster: Cluster,
                 clock: ReactorClock, runner: Runner,
                 read: Callable[[str], dict[str, Any] | None] = read_view) -> None:
        super().__init__(path, interval=poll_seconds(cluster), clock=clock, runner=runner,
                         read=read, what="cluster sync state mirror")
        self._membership = membership
        self._stale_after = stale_after_seconds(cluster)
        self.state = SyncState()

    def take(self, document: dict[str, Any] | None, *, now: float) -> None:
        state = state_of(document, now=now, stale_after=self._stale_after)
        self.state = state if state is not None else SyncState()
