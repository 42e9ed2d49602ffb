"""One membership view per node across its worker processes ([server] workers > 1).

Exactly one worker probes (worker 0, the one holding the node's duties: `ClusterProber`);
it publishes its `Membership` (every peer's state with its figures and protocol version,
and the eligible node ids) to a node-local file of the runtime directory every probe
interval (`MembershipPublisher`): written to a temporary file created 0600
(private_files.py's rule), then renamed over the old one, so a reader sees one whole
snapshot or the previous one. Every other worker reads the file every probe interval and
replaces the peers of its own `Membership` with the snapshot's (`MembershipMirror`), so
the write gate, /admin/cluster, health and each worker's fan-out ask the same view.

A snapshot older than `stale_after_seconds` (a few probe intervals, at least
MIN_STALE_SECONDS: the publisher is stuck or gone), missing or unreadable means the peers
are unknown: the mirror keeps their addresses but no peer is alive or eligible, so in
quorum mode the gate closes (fail closed) until a fresh snapshot arrives. Timestamps are
the publisher's clock: both processes read the same machine's clock.

The document and the rules of a usable snapshot are cluster/view_snapshot.py's (pure);
the file IO runs on the IO pool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from twisted.application.service import MultiService
from twisted.logger import Logger

from objstore.cluster.membership import Membership
from objstore.cluster.view_snapshot import document_of, mirrored, stale_after_seconds
from objstore.config import Cluster
from objstore.private_files import OWNER_ONLY_FILE
from objstore.threads import Runner
from objstore.timers import ReactorClock, safe_timer

log = Logger()

VIEW_FILE = "cluster-membership.json"


def view_path(runtime_dir: str) -> str:
    return os.path.join(runtime_dir, VIEW_FILE)


# -- files (blocking: the IO pool) ----------------------------------------------------------


def write_view(path: str, document: Mapping[str, Any]) -> None:
    """Replace the snapshot at `path` atomically; the file is owner-only."""
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                 OWNER_ONLY_FILE)
    try:
        os.fchmod(fd, OWNER_ONLY_FILE)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            fd = -1
            json.dump(document, stream, separators=(",", ":"))
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(temporary, path)


def read_view(path: str) -> dict[str, Any] | None:
    """The snapshot at `path`; None when there is none or it is unreadable."""
    try:
        with open(path, encoding="utf-8") as stream:
            document = json.load(stream)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


# -- the services -----------------------------------------------------------------------------


class NodeFilePublisher(MultiService):
    """In the worker that owns a node-wide state: writes `document(now)` to `path` every
    `interval` seconds (`write_view`: atomic, owner-only). The membership's and
    anti-entropy's (sync_view.py) publishers are this."""

    def __init__(self, document: Callable[[float], Mapping[str, Any]], path: str, *,
                 interval: float, clock: ReactorClock, runner: Runner, what: str) -> None:
        super().__init__()
        self._document = document
        self._path = path
        self._clock = clock
        self._runner = runner
        safe_timer(interval, self.publish, clock=clock, what=what).setServiceParent(self)

    async def publish(self) -> None:
        await self._runner.run(write_view, self._path, self._document(self._clock.seconds()))


class NodeFileMirror(MultiService):
    """In every other worker: reads the published document every `interval` seconds and
    hands it (None: missing or unreadable) to `take`, with the time it was read."""

    def __init__(self, path: str, *, interval: float, clock: ReactorClock, runner: Runner,
                 read: Callable[[str], dict[str, Any] | None], what: str) -> None:
        super().__init__()
        self._path = path
        self._clock = clock
        self._runner = runner
        self._read = read
        safe_timer(interval, self.refresh, clock=clock, what=what).setServiceParent(self)

    async def refresh(self) -> None:
        document = await self._runner.run(self._read, self._path)
        self.take(document, now=self._clock.seconds())

    def take(self, document: dict[str, Any] | None, *, now: float) -> None:
        raise NotImplementedError


class MembershipPublisher(NodeFilePublisher):
    """In the probing worker: writes its membership to `path` every probe interval."""

    def __init__(self, membership: Membership, path: str, *, cluster: Cluster,
                 clock: ReactorClock, runner: Runner) -> None:
        super().__init__(lambda now: document_of(membership, now=now), path,
                         interval=cluster.probe_interval_seconds, clock=clock, runner=runner,
                         what="cluster membership publish")


class MembershipMirror(NodeFileMirror):
    """In every other worker: takes the published membership every probe interval."""

    def __init__(self, membership: Membership, path: str, *, cluster: Cluster,
                 clock: ReactorClock, runner: Runner,
                 read: Callable[[str], dict[str, Any] | None] = read_view) -> None:
        super().__init__(path, interval=cluster.probe_interval_seconds, clock=clock,
                         runner=runner, read=read, what="cluster membership mirror")
        self.membership = membership
        self._stale_after = stale_after_seconds(cluster)
        self._usable: bool | None = None

    def take(self, document: dict[str, Any] | None, *, now: float) -> None:
        peers, usable = mirrored(self.membership, document, now=now,
                                 stale_after=self._stale_after)
        self.membership.peers.clear()
        self.membership.peers.update(peers)
        if usable != self._usable:  # once per transition
            if usable:
                log.info("cluster membership: reading the probing worker's view")
            elif self._usable is not None:
                log.warn("cluster membership: the probing worker's view is missing or "
                         "older than {seconds}s; peers unknown until it is back",
                         seconds=self._stale_after)
            self._usable = usable
