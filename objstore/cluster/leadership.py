"""Who runs the cluster-wide singletons (rule 11): the worker leader, decided after every
membership tick, and the role taken or given up accordingly.

The worker leader is the eligible node (this one included) with the lowest node_id
(`membership.worker_leader`). The lifecycle worker (and, once it exists, the
maintenance-job worker) runs only there; the node-local duties (audit purge, storage
figures, metrics history) run on every node and are not decided here. When a node takes
the role and when it gives it up over successive ticks is `leader_rule.LeaderRule`.

Two nodes that cannot see each other (a partition) both lead, each on its side: nothing
short of a consensus protocol avoids that; the lifecycle worker re-reads each object
before acting on it, and the deletion it sends is last-writer-wins everywhere.

`WorkerLeadership` applies the rule to the node's `LeaderDuties` (roles.py) after each
probe tick (`ClusterProber(after_tick=...)`). Only worker 0 of a node drives it: the
other workers never hold the role.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger

from objstore.cluster.leader_rule import LeaderRule

log = Logger()


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
