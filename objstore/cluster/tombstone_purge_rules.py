"""The tombstone purge's rules (spec Cluster rules 7), pure: no I/O, no Twisted, no clock
(callers pass `now`).

- **When**: on a cluster node, only when every known peer was seen within the grace
  window (`views.tombstone_gc_blocked`, the predicate /admin/cluster shows; a loop entry
  is this node, not a peer; a pruned peer, membership.py, has left and blocks nothing);
  a single node (no membership) is never blocked.
- **What**: tombstones whose `deleted_at` is older than `now - grace` (`purge_cutoff`).
  A single node keeps them for the grace window too: nothing on a single node reads them
  (the object cache, export/archive and bucket replication do not), but a node that later
  joins a cluster keeps its recent deletions, and one rule is simpler than two.
- **How often**: `purge_interval`: a quarter of the grace window, at least a second and
  at most an hour (a tombstone outlives its grace by at most one interval).
- **Warn once**: `BlockedLatch` reports only the transitions of the blocked state, so a
  node whose peer stays away logs one warning, not one per tick.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from objstore.cluster.membership import Membership
from objstore.cluster.views import tombstone_gc_blocked, unseen_within_grace
from objstore.config import Cluster

MAX_INTERVAL_SECONDS = 3600.0
MIN_INTERVAL_SECONDS = 1.0
GRACE_FRACTION = 0.25


def purge_interval(grace_seconds: float) -> float:
    """Seconds between two purge ticks: a quarter of the grace, within [1 s, 1 h]."""
    return min(MAX_INTERVAL_SECONDS, max(MIN_INTERVAL_SECONDS, grace_seconds * GRACE_FRACTION))


def purge_cutoff(now: float, grace_seconds: float) -> float:
    """Tombstones deleted before this moment are past their grace window."""
    return now - grace_seconds


def purge_blocked(membership: Membership | None, cluster: Cluster, *, now: float) -> bool:
    """Rule 7 on this node: a single node (no membership) is never blocked."""
    return membership is not None and tombstone_gc_blocked(membership, cluster, now=now)


def unseen_peers(membership: Membership | None, cluster: Cluster, *, now: float) -> list[str]:
    """The known peers (node id, else address) not seen within the grace window, for the
    warning (pruned peers left: they block nothing)."""
    if membership is None:
        return []
    return sorted(peer.node_id or peer.address
                  for peer in unseen_within_grace(membership, cluster, now=now))


class Transition(enum.Enum):
    BLOCKED = "blocked"  # the purge was running and is now skipped: warn
    UNBLOCKED = "unblocked"  # the purge runs again


@dataclass
class BlockedLatch:
    """The last blocked state seen; `update` tells a change of it (None: no change). The
    state starts unblocked, so a node blocked from its first tick warns once."""

    blocked: bool = False

    def update(self, blocked: bool) -> Transition | None:
        if blocked == self.blocked:
            return None
        self.blocked = blocked
        return Transition.BLOCKED if blocked else Transition.UNBLOCKED


__all__ = ["BlockedLatch", "Transition", "purge_blocked", "purge_cutoff", "purge_interval",
           "unseen_peers"]
