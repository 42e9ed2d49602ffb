"""`ControlReconciler`: pulls a peer's control-plane snapshot and merges it into this node
(Cluster rules 3, 6, 13), then tells the node's caches.

- `reconcile_control(peer_node_id, base_url)`: one pull and merge (raises on failure).
  The anti-entropy tick calls it per eligible peer; an op notice schedules it.
- `notice(peer_node_id)`: an op notice from a peer (POST /cluster/v1/op of a kind that is
  not a row): a pull of that peer's snapshot is scheduled in the background, at most one
  in flight per peer; notices arriving meanwhile are coalesced into ONE more pull after
  it. A peer that is not eligible (THE predicate) is not pulled from.
- `snapshot()`: this node's own snapshot (what POST /cluster/v1/control-snapshot answers):
  read on the DB reader pool, encoded on the IO pool. It holds credential secrets: never
  logged.

After a merge that changed something, the control record (what `objstore recover`
rebuilds from) is brought in line on the IO pool (`control_mirror.py`), an upload the
merge removed loses its upload record (so `recover` does not reopen it; its parts' blobs
stay: a completed upload's object may reference them, `check --repair` reclaims the
others), then the node's caches forget what changed, as the admin
routes make them do: the IAM caches (`ControlListeners.iam`), the bucket caches
(`.buckets`: bucket records and every cache of the buckets scope, lifecycle
configurations included), each changed setting key (`.setting`: the lifecycle interval);
and each change passes the change hook with `Origin.PEER` (sinks that send changes on
ignore it; the audit log does not record it). Decoding and merging never run on the
reactor thread (IO pool, DB writer pool).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import Deferred, DeferredLock
from twisted.logger import Logger

from objstore.cluster.control_mirror import ControlFiles, mirror
from objstore.cluster.control_wire import decode_snapshot, encode_snapshot
from objstore.cluster.membership import PeerState
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind, Origin
from objstore.iam.identity import Principal
from objstore.meta.control_snapshot_queries import MergeOutcome
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.convergence.control_merge import FamilyState

log = Logger()


class ControlStore(Protocol):
    """What the reconciler asks of the MetaStore."""

    def control_state(self, replicated_setting: Callable[[str], bool]
                      ) -> Deferred[dict[str, FamilyState]]: ...

    def merge_control_snapshot(self, incoming: dict[str, FamilyState],
                               replicated_setting: Callable[[str], bool]
                               ) -> Deferred[MergeOutcome]: ...


class UploadRecords(Protocol):
    """`BlobStore`'s upload records (what `recover` reopens uploads from)."""

    def remove_upload_record(self, upload_id: str) -> None: ...


class SnapshotFetcher(Protocol):
    async def control_snapshot(self, base_url: str) -> bytes: ...


def _nothing(*_args: Any) -> None:
    return None


@dataclass
class ControlListeners:
    """What a merge tells the node (each may be set after construction)."""

    iam: Callable[[], None] = _nothing
    buckets: Callable[[], None] = _nothing
    setting: Callable[[str], None] = _nothing


@dataclass
class _Pulls:
    running: bool = False
    again: bool = False


class PeerMismatch(Exception):
    """The snapshot names another node than the one pulled from."""


@dataclass
class ControlStats:
    pulls: int = 0
    failures: int = 0
    merges_changed: int = 0
    conflicts: int = 0
    skipped: int = 0
    pulls_by_peer: dict[str, int] = field(default_factory=dict)


class ControlReconciler:
    def __init__(self, *, node_id: str, meta: ControlStore, io: Runner,
                 replicated_setting: Callable[[str], bool],
                 peers: Callable[[], Iterable[PeerState]],
                 changes: ChangeHook | None = None,
                 listeners: ControlListeners | None = None,
                 client: SnapshotFetcher | None = None,
                 control: ControlFiles | None = None,
                 uploads: UploadRecords | None = None) -> None:
        self._node_id = node_id
        self._meta = meta
        self._io = io
        self._replicated_setting = replicated_setting
        self._peers = peers
        self._changes = changes or ChangeHook()
        self.listeners = listeners or ControlListeners()
        self.client = client  # set when the cluster client exists (wiring.start_cluster)
        self._control = control  # the control record, kept in line with each merge
        self._uploads = uploads  # an upload the merge removed loses its upload record
        self._locks: dict[str, DeferredLock] = {}
        self._pulls: dict[str, _Pulls] = {}
        self.stats = ControlStats()

    # -- this node's snapshot --------------------------------------------------------------
    async def snapshot(self) -> bytes:
        state = await self._meta.control_state(self._replicated_setting)
        encoded: bytes = await self._io.run(encode_snapshot, self._node_id, state)
        return encoded

    # -- pulling a peer's ------------------------------------------------------------------
    async def reconcile_control(self, peer_node_id: str, base_url: str) -> None:
        """Pull the peer's snapshot and merge it here; raises on failure (no answer, a
        refusal, a malformed snapshot, a database error). One merge per peer at a time."""
        lock = self._locks.setdefault(peer_node_id, DeferredLock())
        await lock.acquire()
        try:
            await self._reconcile(peer_node_id, base_url)
        except Exception:
            self.stats.failures += 1
            raise
        finally:
            lock.release()

    async def _reconcile(self, peer_node_id: str, base_url: str) -> None:
        if self.client is None:
            raise RuntimeError("the cluster client is not started")
        self.stats.pulls += 1
        self.stats.pulls_by_peer[peer_node_id] = self.stats.pulls_by_peer.get(
            peer_node_id, 0) + 1
        body = await self.client.control_snapshot(base_url)
        decoded = await self._io.run(decode_snapshot, body)
        if decoded.node_id and decoded.node_id != peer_node_id:
            raise PeerMismatch(f"the snapshot of {base_url} names node {decoded.node_id}, "
                               f"not {peer_node_id}")
        outcome = await self._meta.merge_control_snapshot(decoded.families,
                                                          self._replicated_setting)
        self.stats.conflicts += outcome.conflicts
        self.stats.skipped += outcome.skipped
        if outcome.conflicts:
            log.debug("control merge from {peer}: {n} rows skipped (a name another entity "
                      "holds here)", peer=peer_node_id, n=outcome.conflicts)
        if outcome.changed:
            if self._control is not None:
                await self._io.run(mirror, self._control, outcome)
            if self._uploads is not None:
                for upload_id in outcome.removed.get("upload", []):
                    await self._io.run(self._uploads.remove_upload_record, upload_id)
            self.stats.merges_changed += 1
            log.info("control merge from {peer}: {families}", peer=peer_node_id,
                     families=outcome.families)
            await self._tell(peer_node_id, outcome)

    async def _tell(self, peer_node_id: str, outcome: MergeOutcome) -> None:
        if outcome.iam_changed:
            self.listeners.iam()
        if outcome.buckets or {"bucket", "bucket_config", "upload"} & set(outcome.families):
            self.listeners.buckets()
        for key in sorted(outcome.settings):
            self.listeners.setting(key)
        caller = _peer_caller(peer_node_id)
        changes: list[Change] = []
        if outcome.iam_changed:
            changes.append(Change(ChangeKind.IAM_CHANGED, caller, subject="cluster-merge"))
        changes.extend(Change(ChangeKind.BUCKET_CONFIGURED, caller, bucket=name)
                       for name in sorted(outcome.buckets))
        changes.extend(Change(ChangeKind.SETTING_CHANGED, caller, subject=key)
                       for key in sorted(outcome.settings))
        for change in changes:
            await self._changes.committed(change)

    async def pull_now(self, peer_node_id: str) -> bool:
        """Pull and merge the peer's snapshot now (a replicated row named a bucket this
        node does not hold yet); False when the peer is not eligible. Raises as
        `reconcile_control`."""
        base_url = self._address_of(peer_node_id)
        if base_url is None:
            return False
        await self.reconcile_control(peer_node_id, base_url)
        return True

    # -- op notices ------------------------------------------------------------------------
    def notice(self, peer_node_id: str) -> None:
        """Schedule a pull from the peer (coalesced; see the module docstring)."""
        pulls = self._pulls.setdefault(peer_node_id, _Pulls())
        if pulls.running:
            pulls.again = True
            return
        pulls.running = True
        Deferred.fromCoroutine(self._pull_loop(peer_node_id, pulls))

    async def _pull_loop(self, peer_node_id: str, pulls: _Pulls) -> None:
        try:
            while True:
                pulls.again = False
                base_url = self._address_of(peer_node_id)
                if base_url is None:
                    log.info("op notice from {peer}: not an eligible peer, not pulled",
                             peer=peer_node_id)
                    return
                try:
                    await self.reconcile_control(peer_node_id, base_url)
                except Exception as error:  # noqa: BLE001 (best effort: the next tick repairs)
                    log.info("control pull from {peer} failed: {why!r}", peer=peer_node_id,
                             why=error)
                if not pulls.again:
                    return
        finally:
            pulls.running = False

    def _address_of(self, peer_node_id: str) -> str | None:
        for peer in self._peers():
            if peer.node_id == peer_node_id:
                return peer.address
        return None


def _peer_caller(peer_node_id: str) -> Caller:
    principal = Principal(user_id=f"node:{peer_node_id}", username=peer_node_id,
                          is_root=False, access_key="")
    return Caller(principal, origin=Origin.PEER, operation="Cluster::MergeControl",
                  details={"peer_node_id": peer_node_id})



__all__ = ["ControlListeners", "ControlReconciler", "ControlStats", "ControlStore",
           "PeerMismatch", "SnapshotFetcher"]
