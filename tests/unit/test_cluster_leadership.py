"""The worker leader's role across nodes (rule 11): the pure rule fed the leader each tick
names, and the role taken and given up after the prober's ticks (a real `ClusterProber`
and `LeaderDuties` on a Clock, a fake probe). No socket, no sleep."""

from __future__ import annotations

from typing import Any

from twisted.application import service
from twisted.internet import defer
from twisted.internet.task import Clock

from objstore.cluster.leader_rule import STARTUP_TICKS, LeaderRule
from objstore.cluster.leadership import WorkerLeadership
from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.prober import ClusterProber, StaticDiscovery
from objstore.cluster.wiring import ClusterParts, worker_leadership
from objstore.config import Cluster
from objstore.prefork import WorkerRole
from objstore.roles import LeaderDuties

NOW = 1_700_000_000.0
A, C = "http://a.test:9000", "http://c.test:9000"
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, peers=(A, C),
                  probe_interval_seconds=1.0)
FAILED = ProbeResult(status=None)


def authenticated(node_id: str) -> ProbeResult:
    return ProbeResult(status=200, mac_ok=True, fingerprint_ok=True, node_id=node_id,
                       disk_total=10, disk_available=5, max_seq=1)


# -- the rule -------------------------------------------------------------------------------


def test_a_node_that_just_started_waits_before_taking_the_role() -> None:
    rule = LeaderRule("node-a")
    held = [rule.tick("node-a") for _ in range(STARTUP_TICKS + 1)]
    assert held == [False] * (STARTUP_TICKS - 1) + [True, True]


def test_the_role_is_given_up_at_the_first_tick_naming_another_node() -> None:
    rule = LeaderRule("node-b", holding=True, streak=5)
    assert rule.tick("node-a") is False
    assert not rule.holding


def test_failover_is_at_the_next_tick_once_another_leader_was_seen() -> None:
    rule = LeaderRule("node-b")
    assert [rule.tick("node-a") for _ in range(4)] == [False] * 4
    assert rule.tick("node-b") is True  # node-a left the eligible set: take over at once
    assert rule.tick("node-a") is False  # it came back: give up at once
    assert rule.tick("node-b") is True


def test_a_node_never_named_never_holds() -> None:
    rule = LeaderRule("node-c")
    assert not any(rule.tick(leader) for leader in ["node-a"] * 3 + ["node-b"] * 3)


# -- the role after the prober's ticks ----------------------------------------------------


class Duty(service.Service):
    def __init__(self, events: list[str], stop: defer.Deferred[None] | None = None) -> None:
        self.setName("lifecycle")
        self._events = events
        self._stop = stop

    def startService(self) -> None:  # noqa: N802
        super().startService()
        self._events.append("start")

    def stopService(self) -> Any:  # noqa: N802
        super().stopService()
        self._events.append("stop")
        return self._stop


class Node:
    """Node `self_id` probing A (node-a) and C (node-c), answers scripted per tick."""

    def __init__(self, self_id: str, answers: dict[str, list[ProbeResult]],
                 stop: defer.Deferred[None] | None = None) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.events: list[str] = []
        self.duties = LeaderDuties(held=False)
        Duty(self.events, stop).setServiceParent(self.duties)
        self.membership = Membership(self_id)
        self.leadership = WorkerLeadership(self_id=self_id, named=self.membership.worker_leader,
                                           role=self.duties)
        self._answers = answers

        async def probe(address: str, nonce: str) -> ProbeResult:
            queue = self._answers[address]
            return queue.pop(0) if len(queue) > 1 else queue[0]

        self.prober = ClusterProber(membership=self.membership,
                                    discovery=StaticDiscovery(CLUSTER.peers), probe=probe,
                                    cluster=CLUSTER, clock=self.clock,
                                    after_tick=self.leadership.after_tick)

    def start(self) -> None:
        self.duties.startService()
        self.prober.startService()  # the first tick runs at once

    def ticks(self, count: int) -> None:
        for _ in range(count):
            self.clock.advance(CLUSTER.probe_interval_seconds)


def test_the_lowest_eligible_node_takes_the_role_after_its_start_up_ticks() -> None:
    node = Node("node-a", {A: [FAILED], C: [authenticated("node-c")]})
    node.start()
    node.ticks(STARTUP_TICKS - 2)
    assert node.events == [] and not node.duties.held
    node.ticks(1)
    assert node.events == ["start"] and node.duties.held
    node.ticks(5)
    assert node.events == ["start"]  # held, not restarted


def test_a_follower_takes_over_at_the_tick_the_leader_is_dead_and_hands_back() -> None:
    # node-a answers for 3 ticks, then fails twice (dead after 2 failures), then returns.
    a_answers = [authenticated("node-a")] * 3 + [FAILED, FAILED] + [authenticated("node-a")]
    node = Node("node-b", {A: a_answers, C: [authenticated("node-c")]})
    node.start()
    node.ticks(2)
    assert node.events == [] and node.membership.worker_leader() == "node-a"
    node.ticks(1)  # the first failure: node-a is kept alive within the window
    assert node.events == [] and node.membership.worker_leader() == "node-a"
    node.ticks(1)  # the second failure: node-a is dead; this very tick hands over
    assert node.membership.worker_leader() == "node-b"
    assert node.events == ["start"] and node.duties.held
    node.ticks(1)  # node-a answers again: given up at this tick
    assert node.events == ["start", "stop"] and not node.duties.held


def test_giving_up_does_not_hold_up_the_prober() -> None:
    slow: defer.Deferred[None] = defer.Deferred()
    a_answers = [FAILED, FAILED, FAILED, FAILED] + [authenticated("node-a")]
    node = Node("node-b", {A: a_answers, C: [authenticated("node-c")]}, stop=slow)
    node.start()
    node.ticks(STARTUP_TICKS)
    assert node.duties.held
    node.ticks(1)  # node-a is back: the stop is slow (a cycle finishing its action)
    assert node.events[-1] == "stop" and not node.duties.held
    node.ticks(2)  # the prober goes on meanwhile
    assert node.membership.worker_leader() == "node-a"
    slow.callback(None)
    assert not node.duties.held


def test_only_worker_0_drives_the_role() -> None:
    membership = Membership("node-a")
    parts = ClusterParts(membership=membership, gate=None, status=None)  # type: ignore[arg-type]
    duties = LeaderDuties(held=False)
    assert worker_leadership("node-a", parts, duties, WorkerRole(index=1)) is None
    leadership = worker_leadership("node-a", parts, duties, WorkerRole(index=0))
    assert leadership is not None
    for _ in range(STARTUP_TICKS):
        leadership.after_tick()
    assert duties.held
