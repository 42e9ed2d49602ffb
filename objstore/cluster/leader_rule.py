"""The worker leader's rule over time (rule 11), pure: fed the leader the membership names
at each tick, `LeaderRule` says whether this node holds the role now.

- A node gives the role up at the first tick naming another node.
- Failover is at the next tick: a node that has seen another node named since it started
  takes the role at the first tick naming it (the leader it knew died or drifted).
- A node that has seen no other leader since it started (it just started, or it came
  back) takes the role only after `startup_ticks` consecutive ticks naming it. Its first
  ticks may run before its peers have seen it (its listener starts after the prober); a
  previous leader gives the role up at its first tick seeing this node eligible, so the
  wait keeps the two from running the singletons at once.

No Twisted, no I/O, no clock; cluster/leadership.py applies it.
"""

from __future__ import annotations

from dataclasses import dataclass

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
