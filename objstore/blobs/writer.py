"""Writing a body that will become a blob: the one place object bytes are written from.

`BlobWriter` receives a body's bytes in order (from the HTTP body reader as they arrive, or
from a `BlobReader` for a copy that must be hashed), computes the digests a client can
check, and keeps the bytes where the blob store can make them durable without a second
copy:

* Small bodies (up to `memory_limit`, 1 MiB) stay in memory; a larger one spills to a file
  in `<data_dir>/tmp`, which `BlobStore.commit` later renames into place.
* MD5 (the ETag), SHA-256 (when the payload hash is signed) and any claimed checksums are
  computed on the bytes as given, before any write stage (stages.py), so they always
  describe what the client sent. For a spilled body, MD5 and SHA-256 are computed by
  `FileDigest` jobs on `hash_runner` reading the file behind the writer (digests.py), so a
  fast upload does not take the reactor thread; `digests_ready()` fires once they have
  caught up. Bodies kept in memory are hashed inline: a pool round trip costs more.
* Given a `sync_runner` (the IO pool, when `[storage] fsync` is on), the disk starts
  writing a spilled (unstaged) body's file while it still arrives (writebehind.py), and
  `flush_early()` starts an `fdatasync` of a complete spilled body on its own duplicate of
  the descriptor while the digests are still catching up: the blob store's own fsync at
  commit (which durability still rests on) then finds nothing left to write. For a 64 MiB
  body that moved 25-33 ms of fsync out of the time after the last byte.
* `detach()` hands the bytes over (a `HeldBody`) on the reactor thread; the blob store
  commits them on the IO pool. After that, closing the writer (twisted.web closes a
  request's content when the request ends, even while a shielded write is committing)
  deletes nothing.
* A spool that can not be written (ENOSPC when the disk fills up mid-body, EDQUOT, EIO)
  stops: its file is removed at once, the rest of the body is read but not kept, and
  the error is kept in `error` for the request to be answered with (507 for a full disk,
  http/spool.py); `detach()` raises it, so a truncated body never becomes a blob.

Write stages: with `stages`, each chunk passes through them after hashing and before it is
kept (the spool file holds stored bytes, which are not what the client's digests
describe); the body can then not be read back (`read_at`). A staged body up to
`memory_limit` is hashed and staged inline; past it, given a `hash_runner`, the rest goes
through an ordered pipeline on that pool (one job in flight per body, each taking every
chunk queued meanwhile: hash, compress, encrypt, write), so a large encrypted upload does
not take the reactor thread. While more than PIPELINE_HIGH_BYTES wait, `pressure(True)`
asks the connection to stop reading (`pressure(False)` below PIPELINE_LOW_BYTES);
`digests_ready()` fires once the pipeline has drained after `end()`.
Writers are built by blobs/factory.py from a `StagePlan`, never directly: `stage_fields`
gives the record fields that describe the stored bytes (None for the identity plan).

The engine never sees this class: it types a body against `UploadedBody`. The writer never
fsyncs on the reactor thread and never decides where a blob goes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.blobs.digests import FileDigest, first_error, update_keeping_gil
from objstore.blobs.files import unlink_quietly, write_all
from objstore.blobs.plan import IDENTITY, StagePlan
from objstore.blobs.stages import WriteStage, apply_write_stages, finish_write_stages
from objstore.blobs.writebehind import WriteBehind
from objstore.checksums import Checksummer
from objstore.random_ids import random_uuid

if TYPE_CHECKING:
    from objstore.threads import Runner

log = Logger()

# (bucket, key, version_id[, part]) -> the record fields that describe a staged blob
Sealer = Callable[..., dict[str, Any]]

MEMORY_LIMIT_BYTES = 1024 * 1024
READ_BACK_BYTES = 1024 * 1024
# A staged body's pipeline (see the module docstring): bytes queued before the connection
# is asked to pause, and below which it may read again.
PIPELINE_HIGH_BYTES = 8 * 1024 * 1024
PIPELINE_LOW_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class HeldBytes:
    """A body kept in memory, as stored."""

    data: bytes


@dataclass(frozen=True, slots=True)
class SpoolFile:
    """A body spilled to a file in `<data_dir>/tmp`; whoever holds this owns fd and file."""

    fd: int
    path: str


HeldBody = HeldBytes | SpoolFile


class UploadedBody(Protocol):
    """A body that was received and will become a blob: what the engine needs of it. Its
    digests were checked against the request before the engine sees it."""

    @property
    def length(self) -> int:
        """Bytes as the client sent them (after aws-chunked decoding)."""
        ...

    @property
    def md5_hex(self) -> str: ...

    def checksum(self, algorithm: str) -> str:
        """The base64 checksum of the body: the one computed as it arrived when the client
        claimed it, else read back (blocking: IO pool)."""
        ...

    def detach(self) -> HeldBody:
        """Hand the bytes over for `BlobStore.commit` (reactor thread); once only."""
        ...

    def stage_fields(self, bucket: str, key: str, version_id: str,
                     part: str | None = None) -> dict[str, Any] | None:
        """The record fields describing the stored bytes of the object `bucket`/`key`
        `version_id` (encryption, compression); None for bytes stored as sent. `part`: the
        blob id of a part of an upload (`version_id` is then the upload's id)."""
        ...


class BodyReleased(Exception):
    """`detach` after `close`: the bytes are gone (the client left mid-request)."""


def _flush_and_close(fd: int) -> None:
    """(pool thread) fdatasync a duplicate descriptor of a spool file, then close it."""
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


class BlobWriter:
    """Bytes in, digests and a held body out. Every method runs on the caller's thread
    (the reactor for an upload, a pool thread for a hashed copy); only `FileDigest` jobs and
    `flush_early` run on pools, each through its own duplicate descriptor."""

    def __init__(
        self,
        tmp_dir: str,
        *,
        want_sha256: bool = False,
        checksum_algorithms: Iterable[str] = (),
        max_length: int | None = None,
        memory_limit: int = MEMORY_LIMIT_BYTES,
        hash_runner: Runner | None = None,
        sync_runner: Runner | None = None,
        stages: Sequence[WriteStage] = (),
        sealer: Sealer | None = None,
        plan: StagePlan = IDENTITY,
        pressure: Callable[[bool], None] | None = None,
    ) -> None:
        self._tmp_dir = tmp_dir
        self.plan = plan  # what the stages do (factory.py built them from it)
        self._sealer = sealer
        self._sync_runner = sync_runner
        self.early_flush: defer.Deferred[None] | None = None  # flush_early's job
        self._md5 = hashlib.md5()
        self._sha256 = hashlib.sha256() if want_sha256 else None
        self._hash_runner = hash_runner if not stages else None
        # The staged pipeline (reactor-owned state; the pool job owns the digests, the
        # stages and the spool while `_busy`).
        self._pipe_runner = hash_runner if stages else None
        self._pressure = pressure
        self._piped = False
        self._queue: list[bytes] = []
        self._queued_bytes = 0
        self._busy = False
        self._paused = False
        self._end_pending = False
        self._release_after = False
        self._drained: list[defer.Deferred[None]] = []
        self._offloaded: list[FileDigest] = []  # MD5 then SHA-256, once spilled
        self._write_behind: WriteBehind | None = None  # once spilled, unstaged, fsync on
        self.checksummers = {alg: Checksummer(alg) for alg in checksum_algorithms}
        self._max_length = max_length
        self._memory_limit = memory_limit
        self._stages = tuple(stages)
        self._buffer: io.BytesIO | None = io.BytesIO()
        self._fd: int | None = None
        self.path: str | None = None
        self.length = 0
        self.too_large = False
        self.error: OSError | None = None  # the spool could not be written
        self._discarded = False
        self._ended = False
        self._closed = False

    # -- input ---------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """The next bytes of the body, as the client sent them."""
        if self._discarded or self._closed:
            return
        self.length += len(data)
        if self._max_length is not None and self.length > self._max_length:
            self.too_large = True
            self.discard()
            return
        if self._piped or (self._pipe_runner is not None
                           and self.length > self._memory_limit):
            self._enqueue(data)
            return
        if not self._offloaded:  # on the reactor: a small body keeps the GIL (digests.py)
            update_keeping_gil(self._md5, data)
            if self._sha256 is not None:
                update_keeping_gil(self._sha256, data)
        for summer in self.checksummers.values():
            summer.update(data)
        if self._stages:
            data = apply_write_stages(self._stages, data)
        self._keep(data)

    # -- the staged pipeline ------------------------------------------------------------
    def _enqueue(self, data: bytes) -> None:
        self._piped = True
        self._queue.append(data)
        self._queued_bytes += len(data)
        if (self._pressure is not None and not self._paused
                and self._queued_bytes > PIPELINE_HIGH_BYTES):
            self._paused = True
            self._pressure(True)
        self._pump()

    def _pump(self) -> None:
        """(reactor) Start the next job unless one runs: every chunk queued, then the
        stages' tail when the body has ended."""
        if self._busy or not (self._queue or self._end_pending):
            return
        batch, self._queue = self._queue, []
        finish, self._end_pending = self._end_pending, False
        self._busy = True
        assert self._pipe_runner is not None
        done = self._pipe_runner.run(self._process, batch, finish)
        done.addBoth(self._processed, sum(len(data) for data in batch))

    def _process(self, batch: list[bytes], finish: bool) -> None:
        """(pool thread, one at a time per body, in order) Hash, stage and keep."""
        for data in batch:
            if self._discarded:
                return
            self._md5.update(data)
            if self._sha256 is not None:
                self._sha256.update(data)
            for summer in self.checksummers.values():
                summer.update(data)
            self._keep(apply_write_stages(self._stages, data))
        if finish and not self._discarded:
            tail = finish_write_stages(self._stages)
            if tail:
                self._keep(tail)

    def _processed(self, result: object, batch_bytes: int) -> None:
        """(reactor) A job ended: resume reading below the low mark, start the next job,
        or tell whoever waits that the pipeline has drained."""
        self._busy = False
        if isinstance(result, Failure):
            if self.error is None:
                log.failure("a staged request body could not be written", result)
                self.error = OSError(f"the body could not be staged: {result.value}")
            self._discarded = True
        self._queued_bytes -= batch_bytes
        if self._paused and self._queued_bytes < PIPELINE_LOW_BYTES:
            self._paused = False
            if self._pressure is not None:
                self._pressure(False)
        if self._release_after:
            self._release_after = False
            self._release()
        if not self._discarded and (self._queue or self._end_pending):
            self._pump()
            return
        self._queue = []
        waiting, self._drained = self._drained, []
        for waiter in waiting:
            waiter.callback(None)

    @property
    def _draining(self) -> bool:
        return self._busy or bool(self._queue) or self._end_pending

    def _after_drain(self) -> defer.Deferred[None]:
        if not self._draining:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()
        self._drained.append(waiter)
        return waiter

    def _keep(self, data: bytes) -> None:
        try:
            self._store(data)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, error: OSError) -> None:
        """Writing the spool failed: stop keeping bytes, remove the file, remember why."""
        log.warn("a request body could not be spooled in {tmp}: {error}", tmp=self._tmp_dir,
                 error=error)
        self.error = error
        self.discard()

    def _store(self, data: bytes) -> None:
        if self._buffer is not None:
            self._buffer.write(data)
            if self._buffer.tell() > self._memory_limit:
                self._spill()
        elif self._fd is not None:
            write_all(self._fd, data)
            for digest in self._offloaded:
                digest.advance(self.length)
            if self._write_behind is not None:
                self._write_behind.advance(self._fd, self.length)

    def _spill(self) -> None:
        assert self._buffer is not None
        os.makedirs(self._tmp_dir, exist_ok=True)
        path = os.path.join(self._tmp_dir, f"{random_uuid()}.spool")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self.path = path
        write_all(self._fd, self._buffer.getbuffer())
        self._buffer = None
        if self._sync_runner is not None and not self._stages and WriteBehind.available():
            # The file's bytes are the body's (no stage): its length is `length`.
            self._write_behind = WriteBehind(self._sync_runner)
        if self._hash_runner is not None:
            # Everything so far is hashed; the rest is hashed from the file, off-thread.
            hashers = [self._md5] + ([self._sha256] if self._sha256 is not None else [])
            self._offloaded = [FileDigest(h, self._fd, self.length, self._hash_runner)
                               for h in hashers]

    def end(self) -> None:
        """The body is complete: the stages give up what they still hold. Idempotent;
        `detach` calls it too."""
        if self._ended or self._discarded:
            return
        self._ended = True
        if self._piped:  # the pipeline's last job gives the stages' tail
            self._end_pending = True
            self._pump()
            return
        if self._stages:
            tail = finish_write_stages(self._stages)
            if tail:
                self._keep(tail)

    def digests_ready(self) -> defer.Deferred[None]:
        """Fires when MD5 and SHA-256 of the whole body can be read (at once unless they
        are computed off-thread); call it once the body is complete. Fails when reading
        the spool file back failed."""
        if self._piped:
            return self._after_drain()
        if not self._offloaded or self._discarded:
            return defer.succeed(None)
        waits = [digest.finish(self.length) for digest in self._offloaded]
        done = defer.gatherResults(waits, consumeErrors=True)
        return done.addCallback(lambda _: None).addErrback(first_error)

    def flush_early(self) -> None:
        """Called once the body is complete: start writing a spilled body to the disk
        (see the module docstring). Errors are left to the commit's own fsync."""
        if self._piped and self._draining:  # once the pipeline has written everything
            self.end()
            self._after_drain().addCallback(lambda _: self.flush_early())
            return
        if (self._sync_runner is None or self._fd is None or self._discarded
                or self.early_flush is not None):
            return
        self.end()
        fd = os.dup(self._fd)
        flushed = self._sync_runner.run(_flush_and_close, fd)
        self.early_flush = flushed.addErrback(lambda _failure: None)

    # -- results -------------------------------------------------------------------------
    @property
    def md5_hex(self) -> str:
        return self.md5_digest.hex()

    @property
    def md5_b64(self) -> str:
        return base64.b64encode(self.md5_digest).decode()

    @property
    def md5_digest(self) -> bytes:
        if self._offloaded:
            return self._offloaded[0].digest()
        return self._md5.digest()

    @property
    def sha256_hex(self) -> str | None:
        if self._sha256 is None:
            return None
        if self._offloaded:
            return self._offloaded[1].hexdigest()
        return self._sha256.hexdigest()

    def checksum_b64(self, algorithm: str) -> str | None:
        """The checksum computed as the body arrived, if it was asked for."""
        summer = self.checksummers.get(algorithm)
        return None if summer is None else summer.digest_b64()

    def checksum(self, algorithm: str) -> str:
        """(`UploadedBody`) Blocking when the body must be read back: IO pool only."""
        computed = self.checksum_b64(algorithm)
        if computed is not None:
            return computed
        summer = Checksummer(algorithm)
        for chunk in self.read_back():
            summer.update(chunk)
        return summer.digest_b64()

    @property
    def in_memory(self) -> bool:
        return self._buffer is not None

    def memory_bytes(self) -> bytes:
        assert self._buffer is not None
        return self._buffer.getvalue()

    # -- reading the body back (small documents, a checksum the client did not send) ---
    def read_at(self, offset: int, size: int) -> bytes:
        """Up to `size` bytes of the body from `offset` (empty once handed over)."""
        if self._stages:
            raise RuntimeError("a staged body holds stored bytes; it can not be read back")
        size = max(0, min(size, self.length - offset))
        if self._buffer is not None:
            view = self._buffer.getbuffer()
            try:
                return bytes(view[offset:offset + size])
            finally:
                view.release()
        if self._fd is not None:
            return os.pread(self._fd, size, offset)
        return b""

    def read_back(self, block_bytes: int = READ_BACK_BYTES) -> Iterator[bytes]:
        offset = 0
        while chunk := self.read_at(offset, block_bytes):
            offset += len(chunk)
            yield chunk

    def stage_fields(self, bucket: str, key: str, version_id: str,
                     part: str | None = None) -> dict[str, Any] | None:
        """(`UploadedBody`) None without stages; else the sealer's fields (a wrapped data
        key is bound to the object, or the upload's part, it is given here)."""
        if self._sealer is None:
            return None
        return self._sealer(bucket, key, version_id, part)

    # -- hand-over and cleanup -----------------------------------------------------------
    def detach(self) -> HeldBody:
        """The bytes, for `BlobStore.commit`. A spilled body's file (and fd) now belong
        to the caller: the writer forgets it, so `close()` will not delete it. Raises the
        error that stopped the spool (`error`)."""
        self.end()
        if self._piped and self._draining:
            raise RuntimeError("a staged body is handed over once digests_ready() fired")
        if self.error is not None:
            raise self.error
        if self._buffer is not None:
            return HeldBytes(self._buffer.getvalue())
        if self._fd is None or self.path is None:
            # close() ran first: the request's connection was lost (twisted.web closes a
            # request's content then) while its work still ran, shielded.
            raise BodyReleased("the body was released before it was handed over")
        held = SpoolFile(self._fd, self.path)
        self._fd = None
        self.path = None
        self._closed = True
        return held

    def discard(self) -> None:
        """Stop keeping bytes (a framing error, or over the size limit). While a pipeline
        job runs, its files are released when it ends (it owns them until then)."""
        self._discarded = True
        if self._busy:
            self._release_after = True
            return
        self._release()

    def _release(self) -> None:
        self._buffer = None
        for digest in self._offloaded:
            if not digest.complete:
                digest.abandon()
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None
        if self.path is not None:
            unlink_quietly(self.path)
            self.path = None

    def close(self) -> None:
        """Delete the spool (nothing to delete after `detach`)."""
        self._closed = True
        if self._busy:
            self._discarded = True
            self._release_after = True
            return
        self._release()
