"""`TombstonePurge`: the service that removes tombstones past their grace window (spec
Cluster rules 7, issue 14), one of a node's own duties: it runs in worker 0 of every
node, cluster or single (service.py parents it under the node's duties, beside the audit
purge), not as a cluster-wide singleton: each node purges its own database.

Each tick (every `purge_interval(grace)`: a quarter of the grace, within [1 s, 1 h], on
an injected clock) asks the rule (`purge_blocked`): when some known peer was not seen
within the grace window the purge is skipped, and the change of state is logged once (a
warning naming the unseen peers when it becomes blocked, an info line when it is no
longer), not at every tick. Otherwise the tombstones older than `now - grace` go, one
bounded batch per write transaction (`meta/tombstone_purge_queries.py`), batch after
batch while they come back full and the service runs.

The first tick, at start, only records the state: the purge proper starts one interval
later, so a cluster node that just started has probed its peers before it decides that
none is missing (its membership starts empty, and an empty membership blocks nothing).

`stats` holds what the metrics show (`TombstonePurgeCollector`): tombstones purged, ticks
skipped while blocked, and the blocked state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.cluster.tombstone_purge_rules import (
    BlockedLatch,
    Transition,
    purge_cutoff,
    purge_interval,
)
from objstore.meta.tombstone_purge_queries import PURGE_BATCH
from objstore.timers import ReactorClock, safe_timer

log = Logger()


class TombstoneRows(Protocol):
    def purge_tombstones(self, before: float, batch_size: int = ...) -> Deferred[int]: ...


@dataclass
class PurgeStats:
    purged: int = 0  # tombstones removed since start
    skipped: int = 0  # ticks skipped because the purge was blocked
    blocked: bool = False  # the last tick's verdict


class TombstonePurge(MultiService):
    """`blocked(now)` is the rule (purge_blocked over the live membership; always False on
    a single node); `unseen(now)` names the peers it waits for (for the warning)."""

    def __init__(self, *, rows: TombstoneRows, grace_seconds: float, clock: ReactorClock,
                 blocked: Callable[[float], bool],
                 unseen: Callable[[float], list[str]] = lambda now: [],
                 batch_size: int = PURGE_BATCH) -> None:
        super().__init__()
        self._rows = rows
        self.grace_seconds = grace_seconds
        self.interval_seconds = purge_interval(grace_seconds)
        self._clock = clock
        self._blocked = blocked
        self._unseen = unseen
        self._batch_size = batch_size
        self._latch = BlockedLatch()
        self._ticks = 0
        self.stats = PurgeStats()
        safe_timer(self.interval_seconds, self.tick, clock=clock,
                   what="tombstone purge").setServiceParent(self)

    async def tick(self) -> int:
        """One tick: the first only records the state (see the module's docstring)."""
        self._ticks += 1
        now = self._clock.seconds()
        if not self._observe(now) or self._ticks == 1:
            return 0
        return await self.purge(now)

    def _observe(self, now: float) -> bool:
        """Record the rule's verdict; True when the purge may run."""
        blocked = self._blocked(now)
        self.stats.blocked = blocked
        change = self._latch.update(blocked)
        if change is Transition.BLOCKED:
            log.warn("tombstone purge blocked: peers not seen within the grace window "
                     "({grace:.0f} s): {peers}", grace=self.grace_seconds,
                     peers=", ".join(self._unseen(now)) or "?")
        elif change is Transition.UNBLOCKED:
            log.info("tombstone purge resumed: every known peer was seen within the grace "
                     "window")
        if blocked:
            self.stats.skipped += 1
        return not blocked

    async def purge(self, now: float) -> int:
        """Delete the tombstones past their grace, a batch per transaction."""
        cutoff = purge_cutoff(now, self.grace_seconds)
        total = 0
        while True:
            removed = await self._rows.purge_tombstones(cutoff, self._batch_size)
            total += removed
            self.stats.purged += removed
            if removed < self._batch_size or not self.running:
                break
        if total:
            log.info("purged {n} tombstones older than the grace window", n=total)
        return total


__all__ = ["PurgeStats", "TombstonePurge", "TombstoneRows"]
