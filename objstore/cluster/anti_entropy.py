"""Anti-entropy of object rows: a node that missed writes (down, partitioned, a fan-out
that failed) pulls them from each eligible peer's changed-since manifest, through the same
last-writer-wins apply path as fan-out, so nothing deleted comes back (tombstones travel
as deletions and beat older rows).

`AntiEntropy` is a service on `safe_timer`. Each poll (every min(anti_entropy_interval,
probe_interval) seconds) a pass runs toward every eligible peer (membership's predicate)
that is due: at once for a peer not attempted since this process started, at every poll
while no pass toward it has completed since then, and every [cluster]
anti_entropy_interval_seconds after that. At start-up, until a first pass starts (within
the first poll), it also looks every STARTUP_LOOK_SECONDS: peers become eligible with their
first probe answers, a moment after the first tick, and a returning node starts pulling
then. Passes toward different peers run in parallel; one pass:

1. pulls manifest pages (`ClusterClient.manifest`) from the stored cursor until the peer
   says no more follow;
2. applies each page in batches (`sync_rules.split_batches`: BATCH_ROWS rows, BATCH_BYTES
   of row sizes), two batches prepared at a time. Preparing a batch reads the verdicts of
   its rows at once (`register_states`, then `decide`): a row that loses to the local row
   or tombstone, or is held with its bytes, costs neither a fetch nor a write; then it
   fetches from that peer the bytes this node lacks, in parallel (at most
   FETCH_CONCURRENCY fetches in flight for the whole service; `get_blob` into a spool,
   checked against the row's size and plain MD5 ETag). `apply_rows` then applies the
   batch: its rows through ONE `apply_replicated_rows` (one transaction; the apply path
   decides again under the keys' locks), composites (parts through `store_blob` first, as
   the blob PUT route does) and deletions (`apply_replicated_delete`, unless already
   recorded) one by one. Entries of a page may so be applied out of seq order:
   last-writer-wins does not depend on it. The same rows come from every peer: a batch
   first waits while an older batch of another pass holds any of its versions (`_claim`),
   then finds them held, so each object is fetched once;
3. persists the cursor (`sync_cursors`) after each page and where it stops: it moves in
   seq order over the entries applied, up to the first that failed, where the pass stops;
   the rules of `sync_rules.py` decide rewinds (rule 8) and skips (rule 9: five passes,
   or at once for a permanent failure, `is_permanent`: a row refused as invalid);
4. then runs the extra per-peer steps (`PeerStep`, e.g. the control-plane reconcile),
   each `async (peer_node_id, base_url) -> None`, raising on failure;
5. when applying (2) stopped at a failing entry and every step succeeded, pulls and
   applies once more from the cursor: a step may have brought what the entry lacked (the
   bucket of a row, created on the peer while this node was away, comes with the
   control-plane snapshot), so such a row is applied by the same pass. The seq that
   already failed on this pass is not counted again if it fails in this retry (rule 9
   counts passes); an entry that keeps failing still fails the pass.

A peer's pass is complete when it caught up and every step succeeded: then its cursor
records first_pass_done and last_reconcile. A peer the membership prunes (the prober's
`prune_listeners` call `peer_pruned`) loses its stored cursor and its progress here,
unless another known address, not pruned, carries its node id
(`sync_rules.cursor_to_forget`): a node
id that comes back later is pulled from 0 (identical rows are no-ops). Its `state`
(sync_state.py) answers `is_syncing` (health's `syncing`), `peer_sync` (the `sync` object
of /admin/cluster) and `figures` (the metrics); with several workers it runs in worker 0
only, which publishes that state for the others (sync_view.py). Applied changes are
reported with a peer caller (`Origin.PEER`, operation Cluster::AntiEntropy): sinks that
send changes on ignore them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from enum import Enum
from typing import Any, Protocol

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, DeferredSemaphore, gatherResults
from twisted.logger import Logger

from objstore.blobs.factory import stored_bytes_writer
from objstore.blobs.writer import BlobWriter
from objstore.cluster.client import BlobFetched, SendFailure
from objstore.cluster.manifest_wire import PAGE_ENTRIES, PulledEntry, PulledPage
from objstore.cluster.membership import Membership, PeerState
from objstore.cluster.sync_state import SyncState
from objstore.cluster.sync_view import SyncAnswers, poll_seconds
from objstore.cluster.wire import ReplicatedDelete, WireError
from objstore.config import Cluster
from objstore.convergence.ack import Ack
from objstore.convergence.lww import row_survives_tombstone
from objstore.convergence.row_rules import etag_is_md5, row_problem
from objstore.convergence.sync_rules import (
    SKIP_AFTER_PASSES,
    PeerProgress,
    SyncCursor,
    advanced,
    cursor_to_forget,
    entry_failed,
    page_end,
    pass_completed,
    reset_after_rewind,
    rewound,
    split_batches,
)
from objstore.engine.changes import Caller, Origin
from objstore.errors import S3Error
from objstore.iam.identity import Principal
from objstore.meta.object_apply_queries import ApplyVerdict, decide
from objstore.meta.records import ObjectRecord
from objstore.meta.tombstones import TOMBSTONE_OBJECT, object_tombstone_key
from objstore.threads import Runner
from objstore.timers import ReactorClock, safe_timer

log = Logger()

OPERATION = "Cluster::AntiEntropy"
BATCH_ROWS = 200  # rows applied in one transaction
BATCH_BYTES = 64 * 1024 * 1024  # bytes of rows fetched ahead for one batch (sizes summed)
# Blob fetches in flight, all peers' passes together (at most as many connections as the
# client keeps to a peer, client.PERSISTENT_PER_PEER: more would open and close a
# connection, a TLS handshake under [cluster.tls], per fetch; the passes' claims leave most
# fetches to one peer).
FETCH_CONCURRENCY = 4
STARTUP_LOOK_SECONDS = 0.1  # how often the first ticks look for eligible peers
PeerStep = Callable[[str, str], Awaitable[None]]  # (peer_node_id, base_url); raises


class ManifestClient(Protocol):
    """What the pass asks of `ClusterClient`."""

    async def manifest(self, base_url: str, since: int, limit: int
                       ) -> PulledPage | SendFailure: ...

    async def get_blob(self, base_url: str, blob_id: str, sink: Callable[[bytes], object]
                       ) -> BlobFetched | SendFailure: ...


class Applier(Protocol):
    """What the pass asks of `ReplicationApply`."""

    async def apply_replicated(self, caller: Caller, record: ObjectRecord,
                               body: Any = None) -> Ack: ...

    async def apply_replicated_delete(self, caller: Caller, bucket: str, key: str,
                                      version_id: str, deleted_at: float) -> Ack: ...

    async def store_blob(self, caller: Caller, blob_id: str, body: Any) -> bool: ...

    async def apply_replicated_rows(self, caller: Caller,
                                    items: Sequence[tuple[ObjectRecord, Any]]
                                    ) -> list[Ack | Exception]: ...


class SyncMeta(Protocol):
    """What the pass asks of `MetaStore` (Deferreds)."""

    def list_sync_cursors(self) -> Awaitable[list[SyncCursor]]: ...

    def put_sync_cursor(self, cursor: SyncCursor) -> Awaitable[None]: ...

    def delete_sync_cursor(self, peer_node_id: str) -> Awaitable[bool]: ...

    def get_object(self, bucket: str, key: str, version_id: str | None = None
                   ) -> Awaitable[ObjectRecord | None]: ...

    def get_tombstone(self, family: str, key: str
                      ) -> Awaitable[tuple[float, int | None] | None]: ...

    def register_states(self, registers: Sequence[tuple[str, str, str]]
                        ) -> Awaitable[list[tuple[ObjectRecord | None, float | None]]]: ...


class BlobPresence(Protocol):
    """What the pass asks of `BlobStore` (on the IO pool)."""

    tmp_dir: str

    def blob_size(self, blob_id: str) -> int | None: ...


class EntryFailed(Exception):
    """An entry could not be applied on this pass (`permanent`: nor on any other)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class RowsEnd(Enum):
    """How pulling a peer's object rows ended."""

    CAUGHT_UP = "caught up"  # (or a peer without the manifest route: nothing to pull)
    ENTRY_FAILED = "stopped at an entry that failed"  # counted by rule 9
    INTERRUPTED = "no manifest, or this service is stopping"


class AntiEntropy(MultiService, SyncAnswers):
    def __init__(self, *, membership: Membership, meta: SyncMeta, client: ManifestClient,
                 apply: Applier, blobs: BlobPresence, io: Runner, cluster: Cluster,
                 clock: ReactorClock, steps: Sequence[PeerStep] = (),
                 page_entries: int = PAGE_ENTRIES, batch_rows: int = BATCH_ROWS,
                 batch_bytes: int = BATCH_BYTES,
                 fetch_concurrency: int = FETCH_CONCURRENCY) -> None:
        super().__init__()
        self._membership = membership
        self._meta = meta
        self._client = client
        self._apply = apply
        self._blobs = blobs
        self._io = io
        self._interval = cluster.anti_entropy_interval_seconds
        self._clock = clock
        self.steps: list[PeerStep] = list(steps)  # the coordinator may add more
        self._page_entries = page_entries
        self._batch_rows, self._batch_bytes = batch_rows, batch_bytes
        self._fetches = DeferredSemaphore(fetch_concurrency)  # blob fetches in flight
        self._claimed: dict[Register, _Claim] = {}  # registers a batch is applying
        self._tickets = 0  # batches begun
        self.state = SyncState()  # cursors and progress (sync_state.py)
        self._cursors = self.state.cursors
        self._progress = self.state.progress
        self._last_attempt: dict[str, float] = {}  # peer -> when its last pass ended
        self._stopping = False
        self._ticking = False
        self._started_at: float | None = None  # this process's first tick
        self._look: Any = None  # the start-up look for eligible peers (IDelayedCall)
        self._poll = poll = poll_seconds(cluster)
        safe_timer(poll, self.tick, clock=clock, what="cluster anti-entropy"
                   ).setServiceParent(self)

    # What health, /admin/cluster and the metrics read: `SyncAnswers` over `state`.

    # -- the loop ------------------------------------------------------------------------
    def startService(self) -> None:  # noqa: N802 (Twisted's name)
        self._stopping = False
        super().startService()

    def stopService(self) -> Any:  # noqa: N802 (Twisted's name)
        self._stopping = True  # a pass in progress stops at its next entry
        if self._look is not None and self._look.active():
            self._look.cancel()
        self._look = None
        return super().stopService()

    async def tick(self) -> None:
        if self._ticking:  # a start-up look (`_look_again`) meets the timer's tick
            return
        self._ticking = True
        try:
            await self._tick()
        finally:
            self._ticking = False

    async def _tick(self) -> None:
        if not self.state.loaded:
            for cursor in await self._meta.list_sync_cursors():
                self._cursors[cursor.peer_node_id] = cursor
                self._progress[cursor.peer_node_id] = PeerProgress(
                    known_before=cursor.first_pass_done)
            self.state.loaded = True
        now = self._clock.seconds()
        if self._started_at is None:
            self._started_at = now
        due = [peer for peer in self._membership.eligible_peers()
               if peer.node_id is not None and self._due(peer.node_id, now)]
        if not due and not self._last_attempt and now - self._started_at < self._poll:
            # Start-up: peers become eligible with their first probe answers, a moment
            # after this first tick; the first passes start then, not a poll later.
            self._look = self._clock.callLater(STARTUP_LOOK_SECONDS, self._look_again)
        if due:
            await gatherResults([Deferred.fromCoroutine(self._guarded(peer))
                                 for peer in due])

    def _look_again(self) -> None:
        self._look = None
        if self._stopping:
            return
        Deferred.fromCoroutine(self.tick()).addErrback(
            lambda failure: log.failure("cluster anti-entropy failed", failure))

    def _due(self, node_id: str, now: float) -> bool:
        """At once for a peer not attempted yet; at every poll while no pass toward it
        completed since start (this node may be syncing: out of rotation); then every
        anti_entropy_interval_seconds."""
        last = self._last_attempt.get(node_id)
        if last is None:
            return True
        passed = self._progress.get(node_id, PeerProgress()).passed
        return now - last >= (self._interval if passed else self._poll)

    async def _guarded(self, peer: PeerState) -> None:
        assert peer.node_id is not None
        try:
            await self.run_pass(peer.node_id, peer.address)
        except Exception:  # noqa: BLE001 (one peer's failure never stops the others)
            log.failure("anti-entropy toward {node_id} ({address}) failed",
                        node_id=peer.node_id, address=peer.address)
            self._ended(peer.node_id, passed=False)

    async def run_pass(self, node_id: str, base_url: str) -> bool:
        """One pass toward a peer; True when it completed (caught up, steps done). Rows
        that stopped at a failing entry are pulled once more after steps that all
        succeeded (module docstring, 5)."""
        rows = await self._object_pass(node_id, base_url)
        steps_ok = not self._stopping and await self._run_steps(node_id, base_url)
        if rows is RowsEnd.ENTRY_FAILED and steps_ok and self.steps:
            log.info("anti-entropy: the object rows of {node_id} once more, after its "
                     "steps", node_id=node_id)
            rows = await self._object_pass(node_id, base_url, again_this_pass=True)
        passed = rows is RowsEnd.CAUGHT_UP and steps_ok
        if passed:
            await self._save(pass_completed(self._cursor(node_id), self._clock.seconds()))
        self._ended(node_id, passed=passed)
        return passed

    # -- pruned peers --------------------------------------------------------------------
    def peer_pruned(self, peer: PeerState) -> None:
        """The membership pruned `peer`: its cursor goes (module docstring)."""
        node_id = cursor_to_forget(  # pruned peers stay in the view, marked
            peer.node_id, (p.node_id for p in self._membership.peers.values()
                           if not p.pruned))
        if node_id is None:
            return
        Deferred.fromCoroutine(self._forget(node_id)).addErrback(
            lambda failure: log.failure("forgetting the sync cursor of pruned peer "
                                        "{node_id} failed", failure, node_id=node_id))

    async def _forget(self, node_id: str) -> None:
        self._cursors.pop(node_id, None)
        self._progress.pop(node_id, None)
        self._last_attempt.pop(node_id, None)
        if await self._meta.delete_sync_cursor(node_id):
            log.info("anti-entropy forgot its cursor toward pruned peer {node_id}",
                     node_id=node_id)

    def _ended(self, node_id: str, *, passed: bool) -> None:
        progress = self._progress.get(node_id, PeerProgress())
        self._progress[node_id] = replace(progress, attempted=True,
                                          passed=progress.passed or passed)
        self._last_attempt[node_id] = self._clock.seconds()

    def _cursor(self, node_id: str) -> SyncCursor:
        return self._cursors.get(node_id) or SyncCursor(node_id)

    async def _save(self, cursor: SyncCursor) -> None:
        await self._meta.put_sync_cursor(cursor)
        self._cursors[cursor.peer_node_id] = cursor

    async def _run_steps(self, node_id: str, base_url: str) -> bool:
        ok = True
        for step in list(self.steps):
            try:
                await step(node_id, base_url)
            except Exception as error:  # noqa: BLE001 (a failed step: the pass is not done)
                log.info("anti-entropy step {step} toward {node_id} failed: {error}",
                         step=getattr(step, "__name__", repr(step)), node_id=node_id,
                         error=error)
                ok = False
        return ok

    async def _object_pass(self, node_id: str, base_url: str, *,
                           again_this_pass: bool = False) -> RowsEnd:
        """Pull and apply pages until caught up or stopped. `again_this_pass`: the pass's
        retry, whose failure on the seq already counted is not counted twice."""
        cursor = self._cursor(node_id)
        while not self._stopping:
            page = await self._client.manifest(base_url, cursor.cursor, self._page_entries)
            if isinstance(page, SendFailure) and page.status == 404:
                # A peer of an older version without the route (rule 14): nothing to
                # pull from it, which must not hold this node in syncing.
                log.info("anti-entropy: {node_id} serves no manifest (404): skipped",
                         node_id=node_id)
                return RowsEnd.CAUGHT_UP
            if isinstance(page, SendFailure):
                log.info("anti-entropy: no manifest from {node_id}: {reason}",
                         node_id=node_id, reason=page.reason)
                return RowsEnd.INTERRUPTED
            if rewound(cursor, page.max_seq):
                log.warn("anti-entropy: {node_id} reports max_seq {reported}, below this "
                         "node's cursor {cursor}: its history was rewound; pulling it all "
                         "again", node_id=node_id, reported=page.max_seq,
                         cursor=cursor.cursor)
                cursor = reset_after_rewind(cursor)
                await self._save(cursor)
                continue
            cursor, stopped = await self._apply_page(node_id, base_url, cursor, page,
                                                     again_this_pass)
            await self._save(cursor)
            if stopped is not None:
                return stopped
            if not page.more:
                return RowsEnd.CAUGHT_UP
        return RowsEnd.INTERRUPTED

    async def _apply_page(self, node_id: str, base_url: str, cursor: SyncCursor,
                          page: PulledPage, again_this_pass: bool
                          ) -> tuple[SyncCursor, RowsEnd | None]:
        """Apply a page's entries (in batches, module docstring 2), then move the cursor
        over them in seq order: (the cursor now, why the pass stops: None when it goes
        on). The cursor stops before the first entry that failed and is not skipped."""
        since = cursor.cursor
        todo = [entry for entry in page.entries if entry.seq > cursor.cursor]
        outcomes = await self._apply_entries(node_id, base_url, todo)
        for entry in todo:
            if entry.seq not in outcomes:  # this service is stopping
                return cursor, RowsEnd.INTERRUPTED
            error = outcomes[entry.seq]
            if error is None:
                cursor = advanced(cursor, entry.seq, page.max_seq)
                continue
            permanent = is_permanent(error)
            cursor, skipped = entry_failed(cursor, entry.seq, again_this_pass=again_this_pass,
                                           permanent=permanent)
            if not skipped:
                log.info("anti-entropy: entry {seq} from {node_id} failed ({passes} "
                         "pass(es) in a row): {error}", seq=entry.seq, node_id=node_id,
                         passes=cursor.failed_passes, error=error)
                return cursor, RowsEnd.ENTRY_FAILED
            log.warn("anti-entropy: entry {seq} from {node_id} is skipped, {why}: {error}",
                     seq=entry.seq, node_id=node_id, error=error,
                     why="its failure is permanent" if permanent else
                     f"it failed on {SKIP_AFTER_PASSES} passes in a row")
        last = page.entries[-1].seq if page.entries else None
        return advanced(cursor, page_end(since, last, page.max_seq, page.more),
                        page.max_seq), None

    # -- a page's entries, in batches ------------------------------------------------------
    async def _apply_entries(self, node_id: str, base_url: str,
                             entries: Sequence[PulledEntry]) -> dict[int, Exception | None]:
        """Apply `entries` batch by batch, two batches prepared at a time: the next
        batch's bytes are fetched while this one's are, and while it is applied. {seq:
        None when applied (or nothing to do), else its error}. Seqs missing from the
        answer were not attempted (this service is stopping)."""
        outcomes: dict[int, Exception | None] = {}
        batches = split_batches(entries, _fetch_size, self._batch_rows, self._batch_bytes)
        pending: list[Deferred[_Batch]] = [
            Deferred.fromCoroutine(self._prepare(base_url, batch)) for batch in batches[:2]]
        following = iter(batches[2:])
        try:
            while pending:
                batch = await pending.pop(0)
                try:
                    if self._stopping:
                        break
                    outcomes.update(batch.outcomes)
                    outcomes.update(await self.apply_rows(node_id, base_url, batch))
                finally:
                    batch.close()
                upcoming = next(following, None)
                if upcoming is not None:
                    pending.append(Deferred.fromCoroutine(self._prepare(base_url, upcoming)))
        finally:
            for left in pending:  # begun, not applied (stopping, or an error above)
                try:
                    (await left).close()
                except Exception:  # noqa: BLE001 (its own error: closed already)
                    log.failure("anti-entropy: preparing a batch failed")
        return outcomes

    async def _prepare(self, base_url: str, entries: Sequence[PulledEntry]) -> _Batch:
        """What a batch needs before it is applied: the verdicts of its rows (one read),
        then the bytes this node lacks, fetched in parallel (at most `fetch_concurrency`
        in flight for the whole service). Rows an older batch of another pass is applying
        are waited for first (the same rows come from every peer: `_claim`)."""
        self._tickets += 1
        batch = _Batch(list(entries), self._tickets)
        try:
            return await self._prepared(base_url, entries, batch)
        except BaseException:
            batch.close()  # its spools, and its claim: no other batch waits forever
            raise

    async def _prepared(self, base_url: str, entries: Sequence[PulledEntry],
                        batch: _Batch) -> _Batch:
        rows: list[PulledEntry] = []
        for entry in entries:
            if entry.deletion is not None:
                continue
            if entry.record is None:
                batch.outcomes[entry.seq] = EntryFailed(
                    f"the peer cannot send entry {entry.seq} within a page", permanent=True)
            elif (problem := row_problem(entry.record)) is not None:
                # refused before its bytes are fetched (the apply checks it again)
                batch.outcomes[entry.seq] = EntryFailed(
                    f"entry {entry.seq} is not a row this server writes: {problem}",
                    permanent=True)
            else:
                rows.append(entry)
        registers = [_register(e.record) for e in rows if e.record is not None]
        await self._claim(registers, batch)
        states = await self._meta.register_states(registers)
        now = self._clock.seconds()
        fetches: list[Deferred[None]] = []
        for entry, (local, deleted_at) in zip(rows, states, strict=True):
            record = entry.record
            assert record is not None
            verdict, _ = decide(local, deleted_at, record, now)
            if verdict in (ApplyVerdict.KEEP_LOCAL, ApplyVerdict.DELETED):
                batch.outcomes[entry.seq] = None  # the local row or tombstone wins
            elif record.parts:
                batch.singles.append(entry)  # a composite: its parts first, on its own
            elif record.blob_id is None or record.is_delete_marker:
                if verdict is ApplyVerdict.APPLIED:
                    batch.rows.append((entry, None))
                else:
                    batch.outcomes[entry.seq] = None
            else:
                fetches.append(Deferred.fromCoroutine(
                    self._bytes_for(base_url, entry, verdict, batch)))
        if fetches:
            await gatherResults(fetches)
        return batch

    async def _bytes_for(self, base_url: str, entry: PulledEntry, verdict: ApplyVerdict,
                         batch: _Batch) -> None:
        """A plain row of the batch: with its bytes when this node lacks them (fetched),
        without them when they are here; nothing to do when identical and here."""
        record = entry.record
        assert record is not None and record.blob_id is not None
        try:
            if await self._present(record.blob_id):
                if verdict is ApplyVerdict.APPLIED:
                    batch.rows.append((entry, None))
                else:
                    batch.outcomes[entry.seq] = None
                return
            await self._fetches.acquire()
            try:
                if self._stopping:
                    return
                body = await self._fetch(base_url, record.blob_id, record)
            finally:
                self._fetches.release()
        except Exception as error:  # noqa: BLE001 (this entry's failure)
            batch.outcomes[entry.seq] = error
            return
        batch.bodies.append(body)
        batch.rows.append((entry, body))

    async def _claim(self, registers: Sequence[Register], batch: _Batch) -> None:
        """Wait until no OLDER batch (a lower ticket) holds any of `registers`, then hold
        those no batch holds, for `batch` (released when it is closed). A batch waits
        only on older ones, and a pass applies its batches oldest first: every wait is on
        an older batch, so no cycle of waits forms. A version a newer batch holds is not
        waited for (it may then be fetched twice: harmless, rare)."""
        while True:
            busy = {id(c): c for r in registers
                    if (c := self._claimed.get(r)) is not None and c.ticket < batch.ticket}
            if not busy:
                break
            await gatherResults([claim.wait() for claim in busy.values()])
        batch.claim = _Claim(self._claimed, [r for r in registers if r not in self._claimed],
                             batch.ticket)

    async def apply_rows(self, node_id: str, base_url: str, batch: _Batch
                         ) -> dict[int, Exception | None]:
        """Apply a batch's rows: the rows with their bytes (or without, when none are
        needed or they are here) through ONE `apply_replicated_rows` (one transaction),
        then composites and deletions one by one. {seq: None or its error}."""
        caller = self._caller(node_id)
        outcomes: dict[int, Exception | None] = {}
        if batch.rows:
            try:
                answers = await self._apply.apply_replicated_rows(
                    caller, [(entry.record, body) for entry, body in batch.rows
                             if entry.record is not None])
            except Exception:  # noqa: BLE001 (the batch's transaction: row by row)
                log.failure("anti-entropy: a batch of {count} rows from {node_id} failed; "
                            "applying them one by one", count=len(batch.rows),
                            node_id=node_id)
                answers = [await self._one_row(caller, entry, body)
                           for entry, body in batch.rows]
            for (entry, body), answer in zip(batch.rows, answers, strict=True):
                outcomes[entry.seq] = _row_outcome(entry, body, answer)
        for entry in batch.singles + [e for e in batch.entries if e.deletion is not None]:
            if self._stopping:
                break
            try:
                await self._apply_entry(node_id, base_url, entry)
                outcomes[entry.seq] = None
            except Exception as error:  # noqa: BLE001 (rule 9 decides)
                outcomes[entry.seq] = error
        return outcomes

    async def _one_row(self, caller: Caller, entry: PulledEntry, body: BlobWriter | None
                       ) -> Ack | Exception:
        assert entry.record is not None
        try:
            return await self._apply.apply_replicated(caller, entry.record, body)
        except Exception as error:  # noqa: BLE001 (this row's answer)
            return error

    # -- one entry ---------------------------------------------------------------------------
    def _caller(self, node_id: str) -> Caller:
        principal = Principal(user_id=f"node:{node_id}", username=node_id, is_root=False,
                              access_key="")
        return Caller(principal, origin=Origin.PEER, operation=OPERATION,
                      details={"peer_node_id": node_id})

    async def _apply_entry(self, node_id: str, base_url: str, entry: PulledEntry) -> None:
        caller = self._caller(node_id)
        if entry.deletion is not None:
            gone = entry.deletion
            if await self._deletion_known(gone):
                return
            await self._apply.apply_replicated_delete(caller, gone.bucket, gone.key,
                                                      gone.version_id, gone.deleted_at)
            return
        record = entry.record
        if record is None:
            raise EntryFailed(f"the peer cannot send entry {entry.seq} within a page")
        problem = row_problem(record)  # refused before its bytes are fetched
        if problem is not None:
            raise EntryFailed(f"entry {entry.seq} is not a row this server writes: {problem}",
                              permanent=True)
        verdict = await self._verdict(record)
        if verdict in (ApplyVerdict.KEEP_LOCAL, ApplyVerdict.DELETED):
            return  # the local row or tombstone wins: nothing to write, nothing to fetch
        needs_bytes = record.blob_id is not None and not record.is_delete_marker
        if not needs_bytes:
            if verdict is ApplyVerdict.APPLIED:
                await self._apply.apply_replicated(caller, record)
            return
        if record.parts:
            missing = [p.blob_id for p in record.parts if not await self._present(p.blob_id)]
            if verdict is ApplyVerdict.IDENTICAL and not missing:
                return
            for blob_id in missing:
                body = await self._fetch(base_url, blob_id, None)
                try:
                    await self._apply.store_blob(caller, blob_id, body)
                finally:
                    body.close()
            await self._apply.apply_replicated(caller, record)
            return
        assert record.blob_id is not None
        if await self._present(record.blob_id):
            if verdict is ApplyVerdict.APPLIED:
                await self._apply.apply_replicated(caller, record)
            return
        body = await self._fetch(base_url, record.blob_id, record)
        try:
            ack = await self._apply.apply_replicated(caller, record, body)
        finally:
            body.close()
        if not ack.has_blob:
            raise EntryFailed(f"the bytes of {record.bucket}/{record.key} were not kept")

    async def _verdict(self, record: ObjectRecord) -> ApplyVerdict:
        """The apply path's verdict on the row, read first (reads only), so rows that
        lose or are already held cost neither a fetch nor a write transaction."""
        local = await self._meta.get_object(record.bucket, record.key, record.version_id)
        found = await self._meta.get_tombstone(TOMBSTONE_OBJECT, object_tombstone_key(
            record.bucket, record.key, record.version_id))
        verdict, _ = decide(local, None if found is None else found[0], record,
                            self._clock.seconds())
        return verdict

    async def _deletion_known(self, gone: ReplicatedDelete) -> bool:
        """The deletion changes nothing here: a tombstone at least as new is recorded and
        no row of the version remains that it beats."""
        found = await self._meta.get_tombstone(TOMBSTONE_OBJECT, object_tombstone_key(
            gone.bucket, gone.key, gone.version_id))
        if found is None or found[0] < gone.deleted_at:
            return False
        local = await self._meta.get_object(gone.bucket, gone.key, gone.version_id)
        return local is None or row_survives_tombstone(local, found[0])

    async def _present(self, blob_id: str) -> bool:
        return await self._io.run(self._blobs.blob_size, blob_id) is not None

    async def _fetch(self, base_url: str, blob_id: str, record: ObjectRecord | None
                     ) -> BlobWriter:
        """A peer's blob in a spool (the caller closes it), checked against the row."""
        body = stored_bytes_writer(self._blobs.tmp_dir, hash_runner=self._io)
        try:
            fetched = await self._client.get_blob(base_url, blob_id, body.write)
            if isinstance(fetched, SendFailure):
                raise EntryFailed(f"blob {blob_id}: {fetched.reason}",
                                  permanent=fetched.status == 400)
            body.end()
            if body.error is not None:
                raise EntryFailed(f"blob {blob_id} could not be spooled: {body.error}")
            await body.digests_ready()
            if record is not None and etag_is_md5(record) and body.md5_hex != record.etag:
                raise EntryFailed(f"blob {blob_id}: MD5 {body.md5_hex} is not the row's "
                                  f"ETag {record.etag}")
        except BaseException:
            body.close()
            raise
        return body


Register = tuple[str, str, str]  # (bucket, key, version_id)


def _register(record: ObjectRecord) -> Register:
    return record.bucket, record.key, record.version_id


class _Claim:
    """Registers a batch is applying: another pass's batch with any of them waits."""

    def __init__(self, claimed: dict[Register, _Claim], registers: Sequence[Register],
                 ticket: int) -> None:
        self.ticket = ticket
        self._claimed = claimed
        self._registers = list(registers)
        self._waiters: list[Deferred[None]] = []
        for register in self._registers:
            claimed[register] = self

    def wait(self) -> Deferred[None]:
        waiter: Deferred[None] = Deferred()
        self._waiters.append(waiter)
        return waiter

    def release(self) -> None:
        for register in self._registers:
            if self._claimed.get(register) is self:
                del self._claimed[register]
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(None)


class _Batch:
    """A batch of a page's entries on its way to being applied: the outcomes decided
    already (rows that lose or are held, fetches that failed), the rows to apply at once
    with their bytes (or None), the entries applied one by one (composites; deletions
    are taken from `entries`), and the spools to close."""

    def __init__(self, entries: list[PulledEntry], ticket: int) -> None:
        self.entries = entries
        self.ticket = ticket  # its place in the order batches were begun (`_claim`)
        self.outcomes: dict[int, Exception | None] = {}
        self.rows: list[tuple[PulledEntry, BlobWriter | None]] = []
        self.singles: list[PulledEntry] = []
        self.bodies: list[BlobWriter] = []
        self.claim: _Claim | None = None

    def close(self) -> None:
        for body in self.bodies:
            body.close()
        self.bodies = []
        if self.claim is not None:
            self.claim.release()
            self.claim = None


def _fetch_size(entry: PulledEntry) -> int:
    """The bytes an entry may need fetched (a row's size; a deletion none)."""
    return entry.record.size if entry.record is not None else 0


def is_permanent(error: Exception) -> bool:
    """A failure that another pass would meet again whatever happens meanwhile: the row
    was refused as invalid (a 400: validation, a size that disagrees with its bytes), the
    peer refused to send it (a 400, a row too large for a page). Rule 9 skips such an
    entry at once (sync_rules.entry_failed). A missing bucket, an unreachable peer or
    missing bytes are not permanent: a step or blob repair may bring them."""
    if isinstance(error, EntryFailed):
        return error.permanent
    if isinstance(error, S3Error):
        return error.status == 400
    return isinstance(error, WireError)


def _row_outcome(entry: PulledEntry, body: BlobWriter | None, answer: Ack | Exception
                 ) -> Exception | None:
    if isinstance(answer, Exception):
        return answer
    if body is not None and not answer.has_blob:
        record = entry.record
        assert record is not None
        return EntryFailed(f"the bytes of {record.bucket}/{record.key} were not kept")
    return None

