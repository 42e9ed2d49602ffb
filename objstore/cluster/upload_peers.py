"""`PeerUploads`: the engine's `UploadPeers` on a cluster node (engine/upload_peers.py):
multipart uploads whose calls land on different nodes (spec Cluster rules 6).

- **`refresh()`**: one round of control-plane pulls, `ControlReconciler.reconcile_control`
  toward every eligible peer in parallel (a failing peer is logged and skipped). Calls
  are coalesced: while a round runs, later callers wait for ONE next round that starts
  when it ends (a round already under way may have read a peer's snapshot before the
  upload the caller asks about was made there), so a burst of misses costs at most two
  rounds. A caller waits at most `wait_seconds` ([cluster] request_timeout_seconds) for
  its round, then answers with what is merged by then; the round itself is never
  cancelled (merges are transactions, left to finish). It answers whether the round was
  complete (`round_complete`, pure): every eligible peer's pull succeeded, no member
  of the cluster was left out (a peer that answered as one of this cluster and is now
  down or drifted: `unasked_members`), at least cluster_size - 1 peers answered, and
  the round ended within the wait. An incomplete round is why a completion
  whose part is not here answers 503 instead of InvalidPart (engine/upload_peers.py).
- **`fetch_parts(upload, parts)`**: every part blob missing here (a stat on the IO pool)
  is fetched through `PeerBlobRepair.fetch_for`, the blob repair's fetch: the eligible
  peers in turn, the bytes verified against the part row (`expected_part`: its size and
  its ETag, the MD5 of the part), stored durably with the part's sidecar (the one
  UploadPart writes, upload id included, so `recover` reopens the part with its upload),
  undone when the part row went or changed meanwhile; one fetch in flight per blob id.
- **`stats`** (`UploadPeersStats`): rounds, parts fetched, parts no peer gave; exported by
  `cluster/upload_peers_metrics.py`.

Not enabled (`enabled` False: the engine asks nothing) until the reconciler and the blob
repair both have the cluster client (cluster/wiring.py `start_cluster`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from objstore.cluster.blob_repair_rules import ExpectedBlob, content_md5
from objstore.cluster.membership import PeerState, Verdict
from objstore.engine.multipart_rules import part_sidecar
from objstore.meta.records import PartRecord, UploadRecord
from objstore.threads import Runner
from objstore.timers import ReactorClock

if TYPE_CHECKING:
    from objstore.blobs.store import BlobStore
    from objstore.cluster.blob_repair import CurrentBlob, PeerBlobRepair
    from objstore.cluster.control_reconcile import ControlReconciler

log = Logger()


class EligiblePeers(Protocol):
    def eligible_peers(self) -> tuple[PeerState, ...]: ...


class PartRows(Protocol):
    """The part rows `fetch_parts` reads again (`MetaStore.list_parts`)."""

    def list_parts(self, upload_id: str, after_part: int, limit: int
                   ) -> Deferred[list[PartRecord]]: ...


def expected_part(upload: UploadRecord, part: PartRecord) -> ExpectedBlob:
    """(Pure) What the blob of an open upload's part must be: the part's size and MD5 (its
    ETag), with the sidecar UploadPart writes beside it."""
    return ExpectedBlob(part.blob_id, part.size, content_md5(part.etag),
                        part_sidecar(upload, part))


def unasked_members(known: Iterable[PeerState], answered: Collection[str]) -> list[str]:
    """(Pure) The node ids of the peers of this cluster a round did not hear from: known
    peers whose last answer authenticated them (failures keep the last verdict, so a
    node now down or drifted still counts) and that are not among `answered`. Another
    cluster's node, a wrong secret, an older version (404), a loop to itself and an
    address never reached are not counted here (cluster_size counts the nodes never
    reached: `round_complete`)."""
    return sorted({peer.node_id for peer in known
                   if peer.last_verdict is Verdict.AUTHENTICATED and peer.node_id
                   and peer.node_id not in answered})


def round_complete(known: Iterable[PeerState], answered: Collection[str],
                   failed: int, cluster_size: int) -> bool:
    """(Pure) Whether a refresh round heard every node that may hold an upload's rows:
    no pull failed, no member left out, and at least cluster_size - 1 peers answered."""
    return (failed == 0 and len(answered) >= cluster_size - 1
            and not unasked_members(known, answered))


@dataclass
class UploadPeersStats:
    """Counts the metrics collector reads at scrape time (upload_peers_metrics.py)."""

    rounds: int = 0  # refresh rounds started (each pulls every eligible peer)
    incomplete_rounds: int = 0  # rounds that could not hear every node of the cluster
    parts_fetched: int = 0  # part blobs a completion brought from a peer
    parts_unavailable: int = 0  # part blobs no eligible peer gave (a 503 completion)


class PeerUploads:
    def __init__(self, *, peers: EligiblePeers, repair: PeerBlobRepair, rows: PartRows,
                 blobs: BlobStore, io: Runner, clock: ReactorClock,
                 wait_seconds: float, cluster_size: int = 1,
                 known: Callable[[], Iterable[PeerState]] = tuple) -> None:
        self._peers = peers
        self._cluster_size = cluster_size
        self._known = known  # every peer this node knows (Membership.peers), eligible or not
        self._repair = repair
        self._rows = rows
        self._blobs = blobs
        self._io = io
        self._clock = clock
        self._wait_seconds = wait_seconds
        self.control: ControlReconciler | None = None  # set by wiring.add_control_reconciler
        self._round: Deferred[bool] | None = None  # the round running
        self._next: list[Deferred[bool]] = []  # callers waiting for the round after it
        self.stats = UploadPeersStats()

    @property
    def enabled(self) -> bool:
        return (self.control is not None and self.control.client is not None
                and self._repair.enabled)

    # -- refresh ----------------------------------------------------------------------
    async def refresh(self) -> bool:
        waiter: Deferred[bool] = Deferred()
        if self._round is None:
            self._start_round([waiter])
        else:
            self._next.append(waiter)
        timer = self._clock.callLater(self._wait_seconds, _fire, waiter, False)
        try:
            return await waiter
        finally:
            if timer.active():
                timer.cancel()

    def _start_round(self, waiters: list[Deferred[bool]]) -> None:
        self.stats.rounds += 1
        self._round = Deferred.fromCoroutine(self._pull_all())

        def ended(complete: object) -> None:
            if complete is not True:
                self.stats.incomplete_rounds += 1
            for waiter in waiters:
                _fire(waiter, complete is True)
            self._round = None
            if self._next:
                later, self._next = self._next, []
                self._start_round(later)

        self._round.addBoth(ended)

    async def _pull_all(self) -> bool:
        control = self.control
        if control is None:
            return False
        peers = [peer for peer in self._peers.eligible_peers() if peer.node_id]
        pulls = [Deferred.fromCoroutine(self._pull(control, peer)) for peer in peers]
        results = await DeferredList(pulls, consumeErrors=True) if pulls else []
        answered = {peer.node_id for peer, (ok, pulled) in zip(peers, results, strict=True)
                    if ok and pulled is True and peer.node_id}
        failed = len(peers) - len(answered)
        complete = round_complete(self._known(), answered, failed, self._cluster_size)
        if not complete:
            log.info("upload refresh: not every node answered ({unasked} not asked, "
                     "{failed} failed); a part not found here is not refused as invalid",
                     unasked=unasked_members(self._known(), answered), failed=failed)
        return complete

    async def _pull(self, control: ControlReconciler, peer: PeerState) -> bool:
        assert peer.node_id is not None
        try:
            await control.reconcile_control(peer.node_id, peer.address)
        except Exception as error:  # noqa: BLE001 (one peer's failure; the others count)
            log.info("control pull from {peer} for an upload failed: {why!r}",
                     peer=peer.node_id, why=error)
            return False
        return True

    # -- part blobs -------------------------------------------------------------------
    async def fetch_parts(self, upload: UploadRecord, parts: Sequence[PartRecord]) -> bool:
        for part in parts:
            if await self._io.run(self._blobs.blob_size, part.blob_id) is not None:
                continue
            self._repair.stats.missing_found += 1
            fetched = await self._repair.fetch_for(
                expected_part(upload, part), self._current_part(upload, part),
                f"part {part.part_number} of upload {upload.upload_id}")
            if not fetched.ok:
                self.stats.parts_unavailable += 1
                log.warn("part {n} of upload {upload_id}: no eligible peer gave its blob "
                         "{blob_id}", n=part.part_number, upload_id=upload.upload_id,
                         blob_id=part.blob_id)
                return False
            self.stats.parts_fetched += 1
        return True

    def _current_part(self, upload: UploadRecord, part: PartRecord) -> CurrentBlob:
        async def current() -> ExpectedBlob | None:
            rows = await self._rows.list_parts(part.upload_id, part.part_number - 1, 1)
            now = rows[0] if rows else None
            if (now is None or now.part_number != part.part_number
                    or now.blob_id != part.blob_id):
                return None
            return expected_part(upload, now)

        return current


def _fire(waiter: Deferred[bool], complete: bool) -> None:
    if not waiter.called:
        waiter.callback(complete)


__all__ = ["PartRows", "PeerUploads", "UploadPeersStats", "expected_part", "round_complete",
           "unasked_members"]
