"""The tombstone purge's rules (cluster/tombstone_purge_rules.py) and its service
(cluster/tombstone_purge.py) on a `task.Clock` with a fake store: rule 7 over a
membership (a peer not seen within the grace blocks, a loop entry does not, a single node
never is), the interval and cutoff, the warning once per transition, the batches and the
counts, and the collector's figures."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.cluster import tombstone_purge as purge_module
from objstore.cluster.membership import Membership, PeerState, Verdict
from objstore.cluster.tombstone_purge import TombstonePurge
from objstore.cluster.tombstone_purge_metrics import TombstonePurgeCollector
from objstore.cluster.tombstone_purge_rules import (
    BlockedLatch,
    Transition,
    purge_blocked,
    purge_cutoff,
    purge_interval,
    unseen_peers,
)
from objstore.config import Cluster

GRACE = 100.0
NOW = 1_800_000_000.0
CLUSTER = Cluster(tombstone_grace_seconds=GRACE)


def membership(*peers: PeerState) -> Membership:
    return Membership("self-id", {peer.address: peer for peer in peers})


def peer(address: str, last_seen: float | None, *, loop: bool = False) -> PeerState:
    return PeerState(address=address, first_seen=NOW - 1000, node_id=f"id-{address}",
                     last_seen=last_seen,
                     last_verdict=Verdict.SELF if loop else Verdict.AUTHENTICATED)


# -- the rules ---------------------------------------------------------------------------

def test_a_single_node_is_never_blocked() -> None:
    assert not purge_blocked(None, CLUSTER, now=NOW)
    assert unseen_peers(None, CLUSTER, now=NOW) == []


def test_blocked_while_a_known_peer_was_not_seen_within_the_grace() -> None:
    assert not purge_blocked(membership(), CLUSTER, now=NOW)
    recent = peer("a", NOW - GRACE)
    assert not purge_blocked(membership(recent), CLUSTER, now=NOW)
    stale = peer("b", NOW - GRACE - 1)
    assert purge_blocked(membership(recent, stale), CLUSTER, now=NOW)
    assert unseen_peers(membership(recent, stale), CLUSTER, now=NOW) == ["id-b"]
    never = PeerState(address="c", first_seen=NOW)  # proposed, never answered
    assert purge_blocked(membership(recent, never), CLUSTER, now=NOW)
    assert unseen_peers(membership(never), CLUSTER, now=NOW) == ["c"]


def test_a_pruned_peer_blocks_nothing() -> None:
    gone = replace(peer("b", NOW - 30 * GRACE), pruned=True)
    assert not purge_blocked(membership(peer("a", NOW), gone), CLUSTER, now=NOW)
    assert unseen_peers(membership(gone), CLUSTER, now=NOW) == []
    never = PeerState(address="c", first_seen=NOW - 30 * GRACE, pruned=True)
    assert not purge_blocked(membership(never), CLUSTER, now=NOW)


def test_a_loop_entry_is_not_a_peer() -> None:
    loop = peer("me", None, loop=True)
    assert not purge_blocked(membership(loop, peer("a", NOW)), CLUSTER, now=NOW)
    assert unseen_peers(membership(loop), CLUSTER, now=NOW) == []


def test_the_grace_of_days_applies_without_seconds() -> None:
    days = Cluster(tombstone_grace_days=2)
    assert not purge_blocked(membership(peer("a", NOW - 86400 * 2)), days, now=NOW)
    assert purge_blocked(membership(peer("a", NOW - 86400 * 2 - 1)), days, now=NOW)


@pytest.mark.parametrize(("grace", "interval"), [
    (1.0, 1.0), (2.0, 1.0), (40.0, 10.0), (14400.0, 3600.0), (7 * 86400.0, 3600.0)])
def test_the_interval_is_a_quarter_of_the_grace_within_a_second_and_an_hour(
        grace: float, interval: float) -> None:
    assert purge_interval(grace) == interval


def test_the_cutoff_is_the_grace_before_now() -> None:
    assert purge_cutoff(NOW, GRACE) == NOW - GRACE


def test_the_latch_reports_transitions_only() -> None:
    latch = BlockedLatch()
    assert [latch.update(b) for b in (False, True, True, False, False, True)] == [
        None, Transition.BLOCKED, None, Transition.UNBLOCKED, None, Transition.BLOCKED]


# -- the service ---------------------------------------------------------------------------

class FakeRows:
    """Tombstones by deleted_at; a purge removes up to a batch older than the cutoff."""

    def __init__(self, stamps: list[float]) -> None:
        self.stamps = sorted(stamps)
        self.calls: list[tuple[float, int]] = []

    def purge_tombstones(self, before: float, batch_size: int = 5000) -> Deferred[int]:
        self.calls.append((before, batch_size))
        doomed = [s for s in self.stamps if s < before][:batch_size]
        for s in doomed:
            self.stamps.remove(s)
        return defer.succeed(len(doomed))


class Switch:
    def __init__(self) -> None:
        self.blocked = False

    def __call__(self, now: float) -> bool:
        return self.blocked


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    monkeypatch.setattr(purge_module, "log", Logger(observer=found.append))
    return found


def started(rows: FakeRows, switch: Switch, clock: task.Clock,
            batch_size: int = 5000) -> TombstonePurge:
    service = TombstonePurge(rows=rows, grace_seconds=GRACE, clock=clock, blocked=switch,
                             unseen=lambda now: ["id-b"], batch_size=batch_size)
    service.startService()
    return service


def warnings(logged: list[dict[str, Any]]) -> list[str]:
    return [event["log_format"] for event in logged
            if event["log_level"].name in ("warn", "info") and "purged" not in
            event["log_format"]]


def test_the_first_purge_waits_one_interval(logged: list[dict[str, Any]]) -> None:
    clock = task.Clock()
    clock.advance(NOW)
    rows = FakeRows([NOW - 500, NOW - 50])
    service = started(rows, Switch(), clock)
    assert service.interval_seconds == 25.0
    assert rows.calls == []  # the tick at start only records the state

    clock.advance(25)

    assert rows.calls == [(NOW + 25 - GRACE, 5000)]
    assert rows.stamps == [NOW - 50]
    assert service.stats.purged == 1
    clock.advance(25)  # at NOW + 50, NOW - 50 is exactly the grace old: kept
    assert rows.stamps == [NOW - 50]
    clock.advance(25)
    assert rows.stamps == [] and service.stats.purged == 2
    service.stopService()


def test_batches_follow_while_full(logged: list[dict[str, Any]]) -> None:
    clock = task.Clock()
    clock.advance(NOW)
    rows = FakeRows([NOW - 500 + i for i in range(7)])
    service = started(rows, Switch(), clock, batch_size=3)

    clock.advance(25)

    assert [size for _, size in rows.calls] == [3, 3, 3]
    assert rows.stamps == [] and service.stats.purged == 7
    assert any("purged {n}" in event["log_format"] for event in logged)
    service.stopService()


def test_blocked_skips_and_warns_once_per_transition(logged: list[dict[str, Any]]) -> None:
    clock = task.Clock()
    clock.advance(NOW)
    rows = FakeRows([NOW - 500])
    switch = Switch()
    switch.blocked = True
    service = started(rows, switch, clock)
    assert service.stats.blocked
    for _ in range(4):
        clock.advance(25)
    assert rows.calls == [] and rows.stamps == [NOW - 500]
    assert service.stats.skipped == 5  # the tick at start too
    assert len(warnings(logged)) == 1
    warning = logged[0]
    assert warning["log_level"].name == "warn" and warning["peers"] == "id-b"

    switch.blocked = False
    clock.advance(25)
    clock.advance(25)
    assert rows.stamps == [] and not service.stats.blocked
    switch.blocked = True
    clock.advance(25)
    clock.advance(25)
    levels = [logged_event["log_level"].name for logged_event in logged
              if "purged" not in logged_event["log_format"]]
    assert levels == ["warn", "info", "warn"]
    service.stopService()


def test_the_collector_shows_the_counts_and_the_state() -> None:
    clock = task.Clock()
    clock.advance(NOW)
    rows = FakeRows([NOW - 500, NOW - 400])
    switch = Switch()
    service = started(rows, switch, clock)
    clock.advance(25)
    switch.blocked = True
    clock.advance(25)

    figures = {family.name: family.samples[0].value
               for family in TombstonePurgeCollector(service.stats).collect()}

    assert figures == {"objstore_tombstones_purged": 2.0,
                       "objstore_tombstone_purge_skipped": 1.0,
                       "objstore_tombstone_gc_blocked": 1.0}
    service.stopService()
