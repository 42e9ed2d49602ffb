"""Roles a running process can take on and give up: the worker leader's duties.

A node has work that must run in exactly one of its processes (worker 0): the audit
purge, the storage figures and the metrics history, node-local on every node. Within them,
a cluster has work that must run on exactly one node: the lifecycle worker and the
maintenance-job worker. Each set is a `LeaderDuties`; the cluster-wide one is
a child of the node's, held always on a single node, and on a cluster node only while the
worker-leader rule names this node (cluster/leadership.py: taken and given up after each
membership tick). Worker 0 of a node holds the node's duties from its start.

`LeaderDuties` holds those services. Its children start only while the role is held, in
the order they were added, and stop in reverse order, each stop finished before the next
begins (as `OrderedMultiService`). Taking the role while the node is stopped only records
it; the node's start then starts the children. It never decides who the leader is.
"""

from __future__ import annotations

from typing import Any

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger

log = Logger()


class LeaderDuties(service.MultiService):
    def __init__(self, *, held: bool = False) -> None:
        super().__init__()
        self._held = held
        self._changing: defer.Deferred[None] | None = None

    @property
    def held(self) -> bool:
        return self._held

    def startService(self) -> None:  # noqa: N802 (Twisted's name)
        service.Service.startService(self)
        if self._held:
            self._start_children()

    @defer.inlineCallbacks
    def stopService(self) -> Any:  # noqa: N802
        service.Service.stopService(self)
        if self._changing is not None:
            yield self._changing
        if self._held:
            yield self._stop_children()

    @defer.inlineCallbacks
    def take(self) -> Any:
        """Hold the role: start the duties now if the node is running."""
        if self._changing is not None:
            yield self._changing
        if self._held:
            return
        self._held = True
        if self.running:
            log.info("taking the worker leader's duties")
            self._start_children()

    @defer.inlineCallbacks
    def give_up(self) -> Any:
        """Stop the duties (each finishes what it is doing first) and release the role."""
        if self._changing is not None:
            yield self._changing
        if not self._held:
            return
        self._held = False
        if self.running:
            log.info("giving up the worker leader's duties")
            self._changing = self._stop_children()
            try:
                yield self._changing
            finally:
                self._changing = None

    def _start_children(self) -> None:
        for child in self:
            child.startService()

    @defer.inlineCallbacks
    def _stop_children(self) -> Any:
        for child in reversed(list(self)):
            if child.running:
                yield defer.maybeDeferred(child.stopService)
