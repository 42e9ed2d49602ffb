"""Anti-entropy's state across workers: `SyncState` as a document and back (sync_state.py,
pure), and the publisher and mirror of its file (sync_view.py) on a Clock with inline
pools: the mirror answers what worker 0 answers; a missing or stale file reads as cursors
not read yet (syncing while a peer is eligible)."""

from __future__ import annotations

import json
from pathlib import Path

from twisted.internet.task import Clock

from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.sync_state import SyncState, document_of, state_of
from objstore.cluster.sync_view import SyncMirror, SyncPublisher, poll_seconds, sync_path
from objstore.config import Cluster
from objstore.convergence.sync_rules import PeerProgress, SyncCursor
from objstore.threads import InlinePool

NOW = 1_700_000_000.0
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3,
                  probe_interval_seconds=1.0, anti_entropy_interval_seconds=10.0)


def membership_with(node_id: str = "node-b", max_seq: int = 9) -> Membership:
    membership = Membership("node-a")
    membership.observe("http://b:9000", ProbeResult(status=200, mac_ok=True,
                                                    fingerprint_ok=True, node_id=node_id,
                                                    max_seq=max_seq), now=NOW)
    return membership


def state() -> SyncState:
    return SyncState(
        cursors={"node-b": SyncCursor("node-b", cursor=7, peer_max_seq=7,
                                      first_pass_done=True, last_reconcile=NOW,
                                      skipped_entries=1)},
        progress={"node-b": PeerProgress(attempted=True, passed=True, known_before=True),
                  "node-c": PeerProgress(attempted=True)},
        loaded=True)


def test_a_state_survives_its_document() -> None:
    original = state()
    document = json.loads(json.dumps(document_of(original, now=NOW)))
    assert state_of(document, now=NOW + 1, stale_after=3) == original


def test_a_stale_missing_or_foreign_document_is_no_state() -> None:
    document = document_of(state(), now=NOW)
    assert state_of(document, now=NOW + 4, stale_after=3) is None
    assert state_of(None, now=NOW, stale_after=3) is None
    assert state_of({**document, "format": 99}, now=NOW, stale_after=3) is None
    assert state_of({**document, "peers": [{"cursor": {}}]}, now=NOW, stale_after=3) is None


def test_the_state_answers_syncing_sync_objects_and_figures() -> None:
    membership = membership_with()
    current = state()
    assert not current.is_syncing(membership)
    peer = membership.eligible_peers()[0]
    sync = current.peer_sync(peer)
    assert sync is not None and (sync["hwm"], sync["lag"], sync["first_pass_done"],
                                 sync["skipped_entries"]) == (7, 2, True, 1)
    assert [(f.node_id, f.lag, f.skipped_entries) for f in current.figures(membership)] == [
        ("node-b", 2, 1)]
    assert SyncState().is_syncing(membership)  # not loaded, a peer eligible
    assert not SyncState().is_syncing(Membership("node-a"))


def test_the_mirror_reads_what_the_publisher_writes(tmp_path: Path) -> None:
    clock = Clock()
    clock.advance(NOW)
    path = sync_path(str(tmp_path))
    published = state()
    publisher = SyncPublisher(published, path, cluster=CLUSTER, clock=clock,
                              runner=InlinePool())
    membership = membership_with()
    mirror = SyncMirror(membership, path, cluster=CLUSTER, clock=clock, runner=InlinePool())
    mirror.startService()  # no file yet: cursors not read, a peer eligible
    assert mirror.is_syncing()
    publisher.startService()
    clock.advance(poll_seconds(CLUSTER))
    assert mirror.state == published and not mirror.is_syncing()
    assert mirror.peer_sync(membership.eligible_peers()[0]) == published.peer_sync(
        membership.eligible_peers()[0])
    publisher.stopService()
    clock.advance(60.0)  # the publisher is gone: the file goes stale
    assert mirror.is_syncing() and mirror.figures() == []
    mirror.stopService()
