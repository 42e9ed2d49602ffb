"""Blob repair (spec Cluster rules 10): bringing back, from the eligible peers, the bytes of
rows this node holds whose blobs are missing here or corrupt.

Two ways in, one fetch:

* **On read** (`PeerBlobRepair.repair_missing`, the engine's `BlobRepair`: a GET, the
  source of a copy or of an UploadPartCopy found a blob missing, engine/blob_repair.py):
  every missing blob of the row is fetched before the read starts again, synchronously.
* **Proactively** (`BlobRepairService`, one tick every [cluster]
  anti_entropy_interval_seconds): the rows are walked in blob-id order from a resume
  cursor; each blob is checked (present; size; the MD5 the row states, read on the IO
  pool) and a missing or corrupt one is fetched; at most [cluster] blob_repair_budget
  peer fetches per tick, the budget checked only between rows (blob_repair_rules.py).

A fetch (`PeerBlobRepair.fetch`) asks the eligible peers one after the other (GET
/cluster/v1/blob/<id> through `ClusterClient.get_blob`: the bytes as stored, so the
stored bytes of a compressed or SSE-C object are copied as they are, never decoded, and
no key is needed), spools what comes into a `BlobWriter` (MD5 computed on the way), and
keeps it only when it matches the row (`blob_repair_rules.accepts`); else the next peer
is asked. Kept bytes are made durable as a client write's are (`BlobFiles.store`: blob
fsync, rename, the row's sidecar, directory fsync), with the sidecar built from the row
read again just before (a part of a composite gets a "part" sidecar), never a provisional
one; a corrupt blob is replaced by the same rename. Then the row is read once more: when a
delete or overwrite won meanwhile, the files just written go again (nothing references
them), so a repair never leaves a blob or a sidecar behind a row that is gone.

Two reads of the same missing blob fetch it once: the second waits for the first's
outcome (`_inflight`, keyed by blob id).

A blob no eligible peer gives (none has it, or none answers) is logged ONCE, one line
naming each peer's answer, and remembered (`blob_repair_rules.Unavailable`, on this
node's clock): the proactive pass skips it until its retry is due (the wait doubles from
`retry_base_seconds`, the pass's interval, up to an hour), and later failures are quiet
(`objstore_cluster_blob_repair_unavailable` counts the blobs remembered). A read still
asks the peers at once; a success forgets the blob and says so.

The cursor is node-local: in memory and in a small owner-only file
(`<data_dir>/blob-repair.cursor`, written through a temporary name on the IO pool, not
fsynced: losing it only starts the walk again), so a node that restarts resumes where it
was instead of checking the first rows over and over. No schema change.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.blobs.factory import stored_bytes_writer
from objstore.blobs.files import unlink_quietly, write_all
from objstore.blobs.store import BlobStore, is_valid_blob_id
from objstore.blobs.writer import BlobWriter
from objstore.cluster.blob_repair_rules import (
    PAGE_ROWS,
    UNAVAILABLE_REMEMBERED,
    BlobState,
    ExpectedBlob,
    TickBudget,
    Unavailable,
    accepts,
    after_failure,
    expected_blobs,
    local_state,
    needs_hash,
    next_cursor,
    retry_due,
)
from objstore.cluster.client import BlobFetched, SendFailure
from objstore.cluster.membership import PeerState
from objstore.engine.objects import BlobFiles
from objstore.meta.records import ObjectRecord
from objstore.threads import Runner
from objstore.timers import ReactorClock, safe_timer

log = Logger()

CURSOR_FILE = "blob-repair.cursor"
_HASH_CHUNK = 1024 * 1024


class BlobSource(Protocol):
    """What a fetch asks of the cluster client (`ClusterClient.get_blob`)."""

    def get_blob(self, base_url: str, blob_id: str, sink: Callable[[bytes], object]
                 ) -> Awaitable[BlobFetched | SendFailure]: ...


CurrentBlob = Callable[[], Awaitable[ExpectedBlob | None]]


class EligiblePeers(Protocol):
    def eligible_peers(self) -> tuple[PeerState, ...]: ...


class RepairRows(Protocol):
    """The rows repair reads (`MetaStore`)."""

    def get_object(self, bucket: str, key: str, version_id: str | None = None
                   ) -> Awaitable[ObjectRecord | None]: ...

    def objects_by_blob_id(self, after: str | None, limit: int = PAGE_ROWS
                           ) -> Awaitable[list[ObjectRecord]]: ...


@dataclass
class BlobRepairStats:
    """Counts the metrics collector reads at scrape time (both ways in)."""

    repaired: int = 0  # blobs fetched, verified and stored
    failed: int = 0  # blobs no eligible peer could give back (or none was eligible)
    missing_found: int = 0  # blobs found missing (on read or by the proactive pass)
    corrupt_found: int = 0  # blobs the proactive pass found corrupt (size or MD5)
    fetches: int = 0  # peer requests made
    rejected: int = 0  # peer answers refused by verification
    unavailable: int = 0  # blobs remembered as given by no peer (now; a gauge)
    deferred: int = 0  # proactive checks of such a blob put off until its retry is due


@dataclass(frozen=True)
class Fetched:
    """The outcome of one fetch: kept or not, and how many peers were asked."""

    ok: bool
    requests: int = 0
    asked_all: bool = False  # every eligible peer was asked and none gave good bytes


class PeerBlobRepair:
    """The engine's `BlobRepair` on a cluster node, and the fetch the proactive pass
    shares. Enabled once a client is attached (`attach`, at cluster start)."""

    def __init__(self, *, peers: EligiblePeers, rows: RepairRows, blobs: BlobStore,
                 io: Runner, source: BlobSource | None = None,
                 hash_runner: Runner | None = None, clock: ReactorClock | None = None,
                 retry_base_seconds: float = 30.0) -> None:
        self._peers = peers
        self._clock = clock  # None: time.time (tests that do not look at retries)
        self._retry_base = retry_base_seconds
        self._unavailable: dict[str, Unavailable] = {}
        self._rows = rows
        self._blobs = blobs
        self._files = BlobFiles(blobs, io)
        self._io = io
        self._source = source
        self._hash_runner = hash_runner
        self._inflight: dict[str, list[Deferred[Fetched]]] = {}
        self.stats = BlobRepairStats()

    def attach(self, source: BlobSource) -> None:
        self._source = source

    @property
    def enabled(self) -> bool:
        return self._source is not None

    # -- blobs no peer gave -------------------------------------------------------------
    def _now(self) -> float:
        return time.time() if self._clock is None else self._clock.seconds()

    def retry_due(self, blob_id: str) -> bool:
        """Whether the proactive pass may ask the peers for `blob_id` now (not a blob no
        peer gave lately, or its retry is due)."""
        return retry_due(self._unavailable.get(blob_id), self._now())

    def unavailable(self, blob_id: str) -> bool:
        """Whether `blob_id` is remembered as given by no peer (its failure was logged)."""
        return blob_id in self._unavailable

    def _failed(self, blob_id: str, what: str, reasons: list[str]) -> None:
        previous = self._unavailable.pop(blob_id, None)
        state = after_failure(previous, self._now(), self._retry_base)
        self._unavailable[blob_id] = state  # the newest last: the oldest is evicted first
        while len(self._unavailable) > UNAVAILABLE_REMEMBERED:
            del self._unavailable[next(iter(self._unavailable))]
        self.stats.unavailable = len(self._unavailable)
        if previous is None:
            log.warn("blob {blob_id} of {what}: no eligible peer gave it ({why}); asked "
                     "again with a growing delay, not logged again until it comes back",
                     blob_id=blob_id, what=what,
                     why="; ".join(reasons) or "no eligible peer")

    def _recovered(self, blob_id: str, what: str) -> None:
        previous = self._unavailable.pop(blob_id, None)
        self.stats.unavailable = len(self._unavailable)
        if previous is not None:
            log.info("blob {blob_id} of {what} came back from a peer after {n} failed "
                     "fetch(es)", blob_id=blob_id, what=what, n=previous.failures)

    # -- the engine's BlobRepair ------------------------------------------------------
    async def repair_missing(self, record: ObjectRecord) -> bool:
        for expected in expected_blobs(record):
            if await self._io.run(self._blobs.blob_size, expected.blob_id) is not None:
                continue
            self.stats.missing_found += 1
            if not (await self.fetch(record, expected)).ok:
                return False
        return True

    # -- one blob -----------------------------------------------------------------------
    async def fetch(self, record: ObjectRecord, expected: ExpectedBlob) -> Fetched:
        """Fetch `expected` (a blob of `record`) from the eligible peers and keep it. A
        fetch of the same blob already under way is waited for instead (its outcome,
        no request of its own)."""
        async def current() -> ExpectedBlob | None:
            return await self._current(record, expected.blob_id)

        return await self.fetch_for(expected, current, f"{record.bucket}/{record.key}")

    async def fetch_for(self, expected: ExpectedBlob, current: CurrentBlob,
                        what: str) -> Fetched:
        """`fetch` for any row that references a blob (an object version, an open
        upload's part: cluster/upload_peers.py): `current()` answers the blob as that
        row expects it now, None once the row went or no longer references it."""
        blob_id = expected.blob_id
        waiting = self._inflight.get(blob_id)
        if waiting is not None:
            shared: Deferred[Fetched] = Deferred()
            waiting.append(shared)
            outcome = await shared
            return Fetched(outcome.ok)
        self._inflight[blob_id] = []
        outcome = Fetched(False)
        reasons: list[str] = []
        try:
            outcome = await self._fetch(expected, current, what, reasons)
        except Exception:
            log.failure("repairing blob {blob_id} failed", blob_id=blob_id)
        finally:
            waiters = self._inflight.pop(blob_id)
            if outcome.ok:
                self.stats.repaired += 1
                self._recovered(blob_id, what)
            else:
                self.stats.failed += 1
                if outcome.asked_all:
                    self._failed(blob_id, what, reasons)
            for waiter in waiters:
                waiter.callback(outcome)
        return outcome

    async def _fetch(self, expected: ExpectedBlob, current: CurrentBlob,
                     what: str, reasons: list[str]) -> Fetched:
        """Ask the eligible peers in turn; `reasons` collects why each did not give it."""
        source = self._source
        if source is None:
            return Fetched(False)
        requests = 0
        for peer in self._peers.eligible_peers():
            writer = stored_bytes_writer(self._blobs.tmp_dir, max_length=expected.size,
                                hash_runner=self._hash_runner)
            try:
                requests += 1
                self.stats.fetches += 1
                answer = await source.get_blob(peer.address, expected.blob_id, writer.write)
                if isinstance(answer, SendFailure) or writer.too_large or writer.error:
                    why = answer.reason if isinstance(answer, SendFailure) else "too large"
                    log.debug("peer {peer} did not give blob {blob_id}: {why}",
                              peer=peer.address, blob_id=expected.blob_id, why=why)
                    reasons.append(f"{peer.node_id or peer.address}: {why}")
                    continue
                writer.end()
                await writer.digests_ready()
                if not accepts(expected, writer.length, writer.md5_hex):
                    self.stats.rejected += 1
                    reasons.append(f"{peer.node_id or peer.address}: sent "
                                   f"{writer.length} bytes not matching the row")
                    continue
                return Fetched(await self._keep(current, expected.blob_id, writer, what),
                               requests)
            finally:
                writer.close()
        return Fetched(False, requests, asked_all=True)

    async def _keep(self, current: CurrentBlob, blob_id: str, writer: BlobWriter,
                    what: str) -> bool:
        """Store verified bytes under the sidecar of the row as it is now; undo it when
        the row no longer references the blob afterwards (a delete or overwrite won)."""
        now = await current()
        if now is None:
            return False
        await self._files.store(writer, blob_id, now.sidecar)
        if await current() is None:
            await self._files.delete([blob_id])
            return False
        log.info("blob {blob_id} of {what} repaired from a peer", blob_id=blob_id, what=what)
        return True

    async def _current(self, record: ObjectRecord, blob_id: str) -> ExpectedBlob | None:
        """The blob as the version's row now expects it; None when the row went or
        changed its bytes."""
        row = await self._rows.get_object(record.bucket, record.key, record.version_id)
        if row is None or row.blob_id != record.blob_id:
            return None
        for expected in expected_blobs(row):
            if expected.blob_id == blob_id:
                return expected
        return None


@dataclass(frozen=True)
class TickReport:
    """What one proactive tick did (for tests and the log)."""

    rows: int = 0
    fetches: int = 0
    missing: int = 0
    corrupt: int = 0
    repaired: int = 0
    wrapped: bool = False
    skipped: bool = False  # no eligible peer: nothing walked
    deferred: int = 0  # blobs no peer gave lately, not asked again yet


class BlobRepairService(MultiService):
    """The proactive pass: `tick` every `interval_seconds` (safe_timer)."""

    def __init__(self, *, repair: PeerBlobRepair, peers: EligiblePeers, rows: RepairRows,
                 blobs: BlobStore, io: Runner, budget: int, interval_seconds: float,
                 clock: ReactorClock, cursor_path: str | None = None) -> None:
        super().__init__()
        self._repair = repair
        self._peers = peers
        self._rows = rows
        self._blobs = blobs
        self._io = io
        self._budget = budget
        self._cursor_path = cursor_path
        self._loaded = cursor_path is None
        self.cursor: str | None = None
        self.passes = 0  # full walks completed
        safe_timer(interval_seconds, self.tick, clock=clock,
                   what="blob repair").setServiceParent(self)

    async def tick(self) -> TickReport:
        if not self._loaded:
            self.cursor = await self._io.run(read_cursor, self._cursor_path)
            self._loaded = True
        if not self._peers.eligible_peers():
            return TickReport(skipped=True)
        budget = TickBudget(self._budget)
        report = _Tally()
        start = cursor = self.cursor
        wrapped = False
        while budget.may_start():
            page = await self._rows.objects_by_blob_id(cursor, PAGE_ROWS)
            finished = True
            for row in page:
                if not budget.may_start():
                    finished = False
                    break
                await self._check_row(row, budget, report)
                cursor = row.blob_id
            cursor, wrapped = next_cursor(cursor, len(page), PAGE_ROWS, finished)
            if wrapped or not finished:
                break
        if wrapped:
            self.passes += 1
        self.cursor = cursor
        if cursor != start and self._cursor_path is not None:
            await self._io.run(write_cursor, self._cursor_path, cursor)
        return TickReport(rows=budget.rows, fetches=budget.fetches, missing=report.missing,
                          corrupt=report.corrupt, repaired=report.repaired,
                          wrapped=wrapped, deferred=report.deferred)

    async def _check_row(self, row: ObjectRecord, budget: TickBudget,
                         report: _Tally) -> None:
        budget.rows += 1
        for expected in expected_blobs(row):
            size, md5, read = await self._io.run(inspect_blob, self._blobs, expected)
            budget.bytes_read += read
            state = local_state(expected, size, md5)
            if state is BlobState.INTACT:
                continue
            if not self._repair.retry_due(expected.blob_id):
                report.deferred += 1  # no peer gave it lately: asked again when due
                self._repair.stats.deferred += 1
                continue
            if state is BlobState.MISSING:
                report.missing += 1
                self._repair.stats.missing_found += 1
            else:
                report.corrupt += 1
                self._repair.stats.corrupt_found += 1
                if not self._repair.unavailable(expected.blob_id):  # else logged before
                    log.warn("blob {blob_id} of {bucket}/{key} is corrupt (size or MD5 "
                             "differs from its row): fetching it again",
                             blob_id=expected.blob_id, bucket=row.bucket, key=row.key)
            fetched = await self._repair.fetch(row, expected)
            budget.fetches += fetched.requests
            report.repaired += int(fetched.ok)


@dataclass
class _Tally:
    missing: int = 0
    corrupt: int = 0
    repaired: int = 0
    deferred: int = 0


def inspect_blob(blobs: BlobStore, expected: ExpectedBlob) -> tuple[int | None, str | None, int]:
    """(IO thread) A local blob's size (None: missing), the MD5 of its bytes when the row
    states one (None otherwise) and how many bytes were read to learn it."""
    size = blobs.blob_size(expected.blob_id)
    if not needs_hash(expected, size):
        return size, None, 0
    assert size is not None
    digest = hashlib.md5()
    try:
        with blobs.blob_reader(expected.blob_id, size) as reader:
            for chunk in reader.chunks(_HASH_CHUNK):
                digest.update(chunk)
    except FileNotFoundError:
        return None, None, 0
    except OSError:  # shorter than it was a moment ago: as good as corrupt
        return size, "", size
    return size, digest.hexdigest(), size


def read_cursor(path: str | None) -> str | None:
    """(IO thread) The stored cursor; None without one (or an unreadable one)."""
    if path is None:
        return None
    try:
        with open(path, encoding="ascii") as handle:
            value = handle.read().strip()
    except (OSError, ValueError):
        return None
    return value if is_valid_blob_id(value) else None


def write_cursor(path: str, cursor: str | None) -> None:
    """(IO thread) Replace the stored cursor (owner-only, through a temporary name)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            write_all(fd, (cursor or "").encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


__all__ = [
    "CURSOR_FILE",
    "BlobRepairService",
    "BlobRepairStats",
    "BlobSource",
    "CurrentBlob",
    "Fetched",
    "PeerBlobRepair",
    "TickReport",
    "inspect_blob",
    "read_cursor",
    "write_cursor",
]
