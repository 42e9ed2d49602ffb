"""Who runs the cluster-wide singletons (rule 11): the worker leader, decided after every
membership tick, and the role taken or given up accordingly.

The worker leader is the eligible node (this one included) with the lowest node_id
(`membership.worker_leader`). The lifecycle worker (and, once it exists, the
maintenance-job worker) runs only there; the node-local duties (audit purge, storage
figures, metrics history) run on every node and are not decided here.

`LeaderRule` is the decision, pure (no Twisted, no clock): fed the leader named at each
tick, it says whether this node should hold the role now.

- A node gives the role up at the first tick naming another node.
- Failover is at the next tick: a node that has seen another node named since it started
  takes the role at the first tick naming it (the leader it knew died or drifted).
- A node that has seen no other leader since it started (it just started, or it came
  back) takes the role only after `startup_ticks` consecutive ticks naming it. Its first
  ticks may run before its peers have seen it (its listener starts after the prober); a
  previous leader gives the role up at its first tick seeing this node eligible, so the
  wait keeps the two from running the singletons at once.

Two nodes that cannot see each other (a partition) both lead, each on its side: nothing
short of a consensus protocol avoids that; the lifecycle worker re-reads each object
before acting on it, and the deletion it sends is last-writer-wins everywhere.

`WorkerLeadership` applies the rule to the node's `LeaderDuties` (roles.py) after each
probe tick (`ClusterProber(after_tick=...)`). Only worker 0 of a node drives it: the
other workers never hold the role.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger

log = Logger()

STARTUP_TICKS = 3


@dataclass
class LeaderRule:
    """Whether this node holds the worker leader's role, one tick after another."""

    self_id: str
    startup_ticks: int = STARTUP_TICKS
    holding: bool = False
    streak: int = 0  # consecutive ticks naming this node
    seen_other: bool = False  # some other node was named since this node started

    def tick(self, named: str) -> bool:
        """The leader the membership names now -> whether this node holds the role."""
        if named != self.self_id:
            self.streak = 0
            self.seen_other = True
            self.holding = False
            return False
        self.streak += 1
        if not self.holding and (self.seen_other or self.streak >= self.startup_ticks):
            self.holding = True
        return self.holding


class Role(Protocol):
    """What `WorkerLeadership` asks of the duties (`roles.LeaderDuties`)."""

    @property
    def held(self) -> bool: ...

    def take(self) -> Any: ...

    def give_up(self) -> Any: ...


class WorkerLeadership:
    """After each membership tick: the rule, then the role taken or given up. Never
    waits for the duties to start or stop (a lifecycle cycle finishes its current action
    first): the prober's next tick is not held up."""

    def __init__(self, *, self_id: str, named: Callable[[], str], role: Role,
                 rule: LeaderRule | None = None) -> None:
        self._named = named
        self._role = role
        self.rule = rule if rule is not None else LeaderRule(self_id)

    def after_tick(self) -> None:
        named = self._named()
        should_hold = self.rule.tick(named)
        if should_hold and not self._role.held:
            log.info("cluster: this node is the worker leader: taking the cluster-wide "
                     "duties (lifecycle)")
            self._apply(self._role.take)
        elif not should_hold and self._role.held:
            log.info("cluster: {leader} is the worker leader: giving up the cluster-wide "
                     "duties", leader=named)
            self._apply(self._role.give_up)

    @staticmethod
    def _apply(change: Callable[[], Any]) -> None:
        done: Deferred[Any] = maybeDeferred(change)
        done.addErrback(lambda failure: log.failure(
            "cluster: changing the worker leader's duties failed", failure))
