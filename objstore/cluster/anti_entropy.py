"""Anti-entropy of object rows: a node that missed writes (down, partitioned, a fan-out
that failed) pulls them from each eligible peer's changed-since manifest, through the same
last-writer-wins apply path as fan-out, so nothing deleted comes back (tombstones travel
as deletions and beat older rows).

`AntiEntropy` is a service on `safe_timer`. Each poll (every min(anti_entropy_interval,
probe_interval) seconds) a pass runs toward every eligible peer (membership's predicate)
that is due: at once for a peer not attempted since this process started, at every poll
while no pass toward it has completed since then, and every [cluster]
anti_entropy_interval_seconds after that. Passes toward different peers run in parallel;
one pass:

1. pulls manifest pages (`ClusterClient.manifest`) from the stored cursor until the peer
   says no more follow;
2. applies each entry in seq order: a deletion through `apply_replicated_delete`; a row
   through `apply_replicated`, after fetching from that peer the bytes it references and
   this node lacks (`get_blob` into a spool, checked against the row's size and plain
   MD5 ETag; a composite's parts through `store_blob` first, as the blob PUT route does).
   The apply path's verdict is read first (`decide`, reads only): a row that loses to the
   local row or tombstone, a row already held with its bytes and a deletion already
   recorded cost neither a fetch nor a write transaction (a first pass over a large store
   is mostly those); the apply path decides again under the key's lock;
3. persists the cursor (`sync_cursors`) after each page and where it stops; the pass stops
   at the first entry that fails, and the rules of `sync_rules.py` decide rewinds (rule 8)
   and skips (rule 9);
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
from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import Logger

from objstore.blobs.factory import stored_bytes_writer
from objstore.blobs.writer import BlobWriter
from objstore.cluster.client import BlobFetched, SendFailure
from objstore.cluster.manifest_wire import PAGE_ENTRIES, PulledEntry, PulledPage
from objstore.cluster.membership import Membership, PeerState
from objstore.cluster.sync_state import SyncState
from objstore.cluster.sync_view import SyncAnswers, poll_seconds
from objstore.cluster.wire import ReplicatedDelete
from objstore.config import Cluster
from objstore.convergence.ack import Ack
from objstore.convergence.lww import row_survives_tombstone
from objstore.convergence.row_rules import row_problem
from objstore.convergence.sync_rules import (
    PeerProgress,
    SyncCursor,
    advanced,
    cursor_to_forget,
    entry_failed,
    page_end,
    pass_completed,
    reset_after_rewind,
    rewound,
)
from objstore.engine.changes import Caller, Origin
from objstore.iam.identity import Principal
from objstore.meta.object_apply_queries import ApplyVerdict, decide
from objstore.meta.records import ObjectRecord
from objstore.meta.tombstones import TOMBSTONE_OBJECT, object_tombstone_key
from objstore.threads import Runner
from objstore.timers import ReactorClock, safe_timer

log = Logger()

OPERATION = "Cluster::AntiEntropy"
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


class SyncMeta(Protocol):
    """What the pass asks of `MetaStore` (Deferreds)."""

    def list_sync_cursors(self) -> Awaitable[list[SyncCursor]]: ...

    def put_sync_cursor(self, cursor: SyncCursor) -> Awaitable[None]: ...

    def delete_sync_cursor(self, peer_node_id: str) -> Awaitable[bool]: ...

    def get_object(self, bucket: str, key: str, version_id: str | None = None
                   ) -> Awaitable[ObjectRecord | None]: ...

    def get_tombstone(self, family: str, key: str
                      ) -> Awaitable[tuple[float, int | None] | None]: ...


class BlobPresence(Protocol):
    """What the pass asks of `BlobStore` (on the IO pool)."""

    tmp_dir: str

    def blob_size(self, blob_id: str) -> int | None: ...


class EntryFailed(Exception):
    """An entry could not be applied on this pass."""


class RowsEnd(Enum):
    """How pulling a peer's object rows ended."""

    CAUGHT_UP = "caught up"  # (or a peer without the manifest route: nothing to pull)
    ENTRY_FAILED = "stopped at an entry that failed"  # counted by rule 9
    INTERRUPTED = "no manifest, or this service is stopping"


class AntiEntropy(MultiService, SyncAnswers):
    def __init__(self, *, membership: Membership, meta: SyncMeta, client: ManifestClient,
                 apply: Applier, blobs: BlobPresence, io: Runner, cluster: Cluster,
                 clock: ReactorClock, steps: Sequence[PeerStep] = (),
                 page_entries: int = PAGE_ENTRIES) -> None:
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
        self.state = SyncState()  # cursors and progress (sync_state.py)
        self._cursors = self.state.cursors
        self._progress = self.state.progress
        self._last_attempt: dict[str, float] = {}  # peer -> when its last pass ended
        self._stopping = False
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
        return super().stopService()

    async def tick(self) -> None:
        if not self.state.loaded:
            for cursor in await self._meta.list_sync_cursors():
                self._cursors[cursor.peer_node_id] = cursor
                self._progress[cursor.peer_node_id] = PeerProgress(
                    known_before=cursor.first_pass_done)
            self.state.loaded = True
        now = self._clock.seconds()
        due = [peer for peer in self._membership.eligible_peers()
               if peer.node_id is not None and self._due(peer.node_id, now)]
        if due:
            await gatherResults([Deferred.fromCoroutine(self._guarded(peer))
                                 for peer in due])

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
        """Apply a page's entries in order: (the cursor now, why the pass stops: None
        when it goes on)."""
        since = cursor.cursor
        for entry in page.entries:
            if self._stopping:
                return cursor, RowsEnd.INTERRUPTED
            if entry.seq <= cursor.cursor:
                continue
            try:
                await self._apply_entry(node_id, base_url, entry)
            except Exception as error:  # noqa: BLE001 (rule 9 decides)
                cursor, skipped = entry_failed(cursor, entry.seq,
                                               again_this_pass=again_this_pass)
                if not skipped:
                    log.info("anti-entropy: entry {seq} from {node_id} failed ({passes} "
                             "pass(es) in a row): {error}", seq=entry.seq, node_id=node_id,
                             passes=cursor.failed_passes, error=error)
                    return cursor, RowsEnd.ENTRY_FAILED
                log.warn("anti-entropy: entry {seq} from {node_id} failed on 5 passes in a "
                         "row and is skipped: {error}", seq=entry.seq, node_id=node_id,
                         error=error)
                continue
            cursor = advanced(cursor, entry.seq, page.max_seq)
        last = page.entries[-1].seq if page.entries else None
        return advanced(cursor, page_end(since, last, page.max_seq, page.more),
                        page.max_seq), None

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
            raise EntryFailed(f"entry {entry.seq} is not a row this server writes: {problem}")
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
                raise EntryFailed(f"blob {blob_id}: {fetched.reason}")
            body.end()
            if body.error is not None:
                raise EntryFailed(f"blob {blob_id} could not be spooled: {body.error}")
            await body.digests_ready()
            if record is not None and _plain(record) and body.md5_hex != record.etag:
                raise EntryFailed(f"blob {blob_id}: MD5 {body.md5_hex} is not the row's "
                                  f"ETag {record.etag}")
        except BaseException:
            body.close()
            raise
        return body


def _plain(record: ObjectRecord) -> bool:
    """A row whose ETag is the MD5 of its stored bytes (no encryption, compression or
    multipart ETag)."""
    return (record.encryption_algorithm is None and record.compression is None
            and not record.parts and "-" not in record.etag and len(record.etag) == 32)
