"""Several worker processes on one listening socket (`[server] workers`).

`supervisor` is the parent: it binds the socket, spawns the workers, restarts one that dies
and drains them all on SIGTERM. `child` is a worker's entry point. `WorkerRole` tells
`objstore.service.build_node` which of the node's processes it is building.
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATIONS_FILE = "generations"  # objstore.meta.coherence.SharedCounters
KEY_LOCKS_FILE = "key-locks"  # objstore.engine.versioning.KeyLocks across processes
METRICS_DIR = "metrics"  # prometheus-client multiprocess files
# objstore.http.ratelimit.SharedTokenBuckets: the limits are per node, not per worker
RATE_LIMITS_IP_FILE = "rate-limits-ip"
RATE_LIMITS_CREDENTIAL_FILE = "rate-limits-credential"


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """Which process of the node this is.

    The single process of a one-worker node is index 0, the leader; it adopts the socket
    the daemon bound before anything else and prepares storage (migrations, root
    credential, spool sweep) before serving. A worker of
    a supervised node adopts the parent's socket (`listen_fd`), shares the parent's runtime
    directory (counters, locks, rate-limit buckets, metrics) and prepares nothing: the
    parent did. The leader (index 0) alone runs the node's singletons: lifecycle, audit
    purge, metrics history and the storage figures.
    """

    index: int = 0
    listen_fd: int | None = None
    runtime_dir: str | None = None
    node_started_at: float | None = None  # the parent's start (uptime is the node's)

    @property
    def leader(self) -> bool:
        return self.index == 0

    @property
    def supervised(self) -> bool:
        return self.listen_fd is not None


SINGLE_PROCESS = WorkerRole()
