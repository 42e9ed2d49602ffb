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

The document (JSON, one node's, never leaves the machine, holds no secret):
    {"format": 1, "node_id": ..., "published_at": seconds, "eligible": [node ids],
     "peers": [{PeerState's fields; last_verdict as its value}, ...]}
Unknown fields of a peer are ignored and absent ones defaulted.

`document_of`, `peers_of` and `mirrored` are pure; the file IO runs on the IO pool.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from twisted.application.service import MultiService
from twisted.logger import Logger

from objstore.cluster.membership import Membership, PeerState, Verdict
from objstore.config import Cluster
from objstore.private_files import OWNER_ONLY_FILE
from objstore.threads import Runner
from objstore.timers import ReactorClock, safe_timer

log = Logger()

VIEW_FILE = "cluster-membership.json"
FORMAT = 1
STALE_AFTER_INTERVALS = 4
MIN_STALE_SECONDS = 3.0
_FIELDS = {f.name: f for f in dataclasses.fields(PeerState)}


def view_path(runtime_dir: str) -> str:
    return os.path.join(runtime_dir, VIEW_FILE)


def stale_after_seconds(cluster: Cluster) -> float:
    """How old a snapshot may be before the peers count as unknown."""
    return max(STALE_AFTER_INTERVALS * cluster.probe_interval_seconds, MIN_STALE_SECONDS)


# -- pure -------------------------------------------------------------------------------


def document_of(membership: Membership, *, now: float) -> dict[str, Any]:
    """The snapshot of `membership` at `now`."""
    peers = []
    for address in sorted(membership.peers):
        entry = dataclasses.asdict(membership.peers[address])
        verdict = entry["last_verdict"]
        entry["last_verdict"] = verdict.value if verdict is not None else None
        peers.append(entry)
    return {"format": FORMAT, "node_id": membership.self_id, "published_at": now,
            "eligible": [peer.node_id for peer in membership.eligible_peers()],
            "peers": peers}


def _peer(entry: Mapping[str, Any]) -> PeerState:
    values = {name: value for name, value in entry.items() if name in _FIELDS}
    verdict = values.get("last_verdict")
    values["last_verdict"] = Verdict(verdict) if verdict is not None else None
    return PeerState(**values)


def peers_of(document: Mapping[str, Any], self_id: str) -> dict[str, PeerState] | None:
    """The peers of a snapshot; None when it is not one of this node's (another format,
    another node id, malformed)."""
    if document.get("format") != FORMAT or document.get("node_id") != self_id:
        return None
    try:
        found = [_peer(entry) for entry in document["peers"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not all(isinstance(peer.address, str) for peer in found):
        return None
    return {peer.address: peer for peer in found}


def fresh(document: Mapping[str, Any] | None, *, now: float, stale_after: float) -> bool:
    published = document.get("published_at") if document is not None else None
    if isinstance(published, bool) or not isinstance(published, int | float):
        return False
    return now - published <= stale_after


def unknown(peers: Mapping[str, PeerState]) -> dict[str, PeerState]:
    """The same addresses, nothing known of them: never alive, never eligible."""
    return {address: PeerState(address=address, first_seen=peer.first_seen,
                               node_id=peer.node_id)
            for address, peer in peers.items()}


def mirrored(membership: Membership, document: Mapping[str, Any] | None, *, now: float,
             stale_after: float) -> tuple[dict[str, PeerState], bool]:
    """The peers `membership` takes from `document` at `now`, and whether the snapshot
    was usable (fresh and this node's); unusable: the known addresses, all unknown."""
    peers = peers_of(document, membership.self_id) if document is not None else None
    if peers is None or not fresh(document, now=now, stale_after=stale_after):
        return unknown(membership.peers), False
    return peers, True


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


class MembershipPublisher(MultiService):
    """In the probing worker: writes its membership to `path` every probe interval."""

    def __init__(self, membership: Membership, path: str, *, cluster: Cluster,
                 clock: ReactorClock, runner: Runner) -> None:
        super().__init__()
        self._membership = membership
        self._path = path
        self._clock = clock
        self._runner = runner
        safe_timer(cluster.probe_interval_seconds, self.publish, clock=clock,
                   what="cluster membership publish").setServiceParent(self)

    async def publish(self) -> None:
        document = document_of(self._membership, now=self._clock.seconds())
        await self._runner.run(write_view, self._path, document)


class MembershipMirror(MultiService):
    """In every other worker: takes the published membership every probe interval."""

    def __init__(self, membership: Membership, path: str, *, cluster: Cluster,
                 clock: ReactorClock, runner: Runner,
                 read: Callable[[str], dict[str, Any] | None] = read_view) -> None:
        super().__init__()
        self.membership = membership
        self._path = path
        self._clock = clock
        self._runner = runner
        self._read = read
        self._stale_after = stale_after_seconds(cluster)
        self._usable: bool | None = None
        safe_timer(cluster.probe_interval_seconds, self.refresh, clock=clock,
                   what="cluster membership mirror").setServiceParent(self)

    async def refresh(self) -> None:
        document = await self._runner.run(self._read, self._path)
        peers, usable = mirrored(self.membership, document, now=self._clock.seconds(),
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
