"""The request-body sink: bytes off the socket go to a spool on the data volume while the
digests the request claims are computed.

`BodySpool` is what `Site.getContentFile` hands to twisted.web. It decodes aws-chunked
framing on the fly (recording chunk signatures for later verification), keeps small bodies
in memory and spills larger ones to `<data_dir>/tmp`, so the blob store can later rename the
file into place without a second copy. It never verifies a signature itself (the secret is
not known while the body streams) and never blocks on fsync: that happens at commit time in
the IO thread pool.

MD5 (the ETag) and SHA-256 (a signed payload) of a large body are not computed on the
reactor thread: at several hundred MiB/s they would take all of it. Given a `hash_runner`
(a thread pool), once a body spills to its file the two digests are computed by jobs on
that pool, each reading the file behind the writer (`FileDigest`: one job per digest at a
time, started once a few MiB are waiting, which goes on hashing for as long as the writer
stays ahead of it, so bytes are hashed in order and memory stays flat; hashlib releases
the GIL, so MD5 and SHA-256 run in parallel). `digests_ready()` fires once both
have caught up with the complete body; until then the digests can not be read. Bodies
that stay in memory (up to 1 MiB) are hashed inline: a pool round trip costs more.

Given a `sync_runner` (the IO pool, when `[storage] fsync` is on), `flush_early()` starts
an `fdatasync` of a spilled body as soon as it is complete, on its own duplicate of the
descriptor, while the digests are still catching up: the blob store's own fsync at commit
(which durability still rests on) then finds nothing left to write. For a 64 MiB body that
moved 25-33 ms of fsync out of the time after the last byte.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.python.failure import Failure

from objstore.checksums import Checksummer
from objstore.http.sigv4 import AwsChunkedDecoder, SigV4Error

if TYPE_CHECKING:
    from objstore.threads import Runner

MEMORY_LIMIT_BYTES = 1024 * 1024
# A digest job hashes at least this many new bytes (except the last one), reading them in
# blocks of READ_BLOCK_BYTES: few pool round trips, and hashlib drops the GIL per block.
DIGEST_BATCH_BYTES = 4 * 1024 * 1024
READ_BLOCK_BYTES = 256 * 1024


class FileDigest:
    """One digest (a hashlib object) of a file that is still being written, computed on a
    thread pool behind the writer. The reactor thread calls `advance` with the length
    written so far and `finish` with the final length; jobs run one at a time, in order.
    The digest reads through its own duplicate of the file descriptor, so the spool may
    close, unlink or hand over its file meanwhile."""

    def __init__(self, hasher: Any, fd: int, done: int, runner: Runner,
                 batch_bytes: int = DIGEST_BATCH_BYTES) -> None:
        self._hasher = hasher
        self._fd: int | None = os.dup(fd)
        self._done = done  # bytes hashed so far
        self._target = done  # bytes written so far
        self._runner = runner
        self._batch = batch_bytes
        self._running = False
        self._final = False
        self._abandoned = False
        self._error: Failure | None = None
        self._waiters: list[defer.Deferred[None]] = []

    @property
    def complete(self) -> bool:
        return self._final and not self._running and (
            self._done == self._target or self._error is not None)

    def hexdigest(self) -> str:
        self._check_complete()
        return str(self._hasher.hexdigest())

    def digest(self) -> bytes:
        self._check_complete()
        return bytes(self._hasher.digest())

    def _check_complete(self) -> None:
        if not self.complete or self._error is not None:
            raise RuntimeError("the digest of this body is not computed (await digests_ready)")

    def advance(self, written: int) -> None:
        self._target = written
        if not self._running and written - self._done >= self._batch:
            self._start()

    def finish(self, written: int) -> defer.Deferred[None]:
        """Fires once every byte up to `written` (the final length) is hashed."""
        self._target = written
        self._final = True
        waiter: defer.Deferred[None] = defer.Deferred()
        self._waiters.append(waiter)
        if not self._running:
            self._step()
        return waiter

    def abandon(self) -> None:
        """The body is discarded: stop after the job in flight and release the file. Once
        `finish` was called the digest runs to its end (its own fd stays valid), so whoever
        waits for it is answered."""
        if self._final:
            return
        self._abandoned = True
        if not self._running:
            self._close()

    def _start(self) -> None:
        assert self._fd is not None
        self._running = True
        d = self._runner.run(_hash_available, self._hasher, self._fd, self._done,
                             self._written)
        d.addCallbacks(self._hashed, self._failed)

    def _written(self) -> int:
        # Read by the pool thread while the job runs: the reactor only ever raises it, and
        # only after the bytes are in the file.
        return self._target

    def _hashed(self, end: int) -> None:
        self._running = False
        self._done = end
        self._step()

    def _failed(self, failure: Failure) -> None:
        self._running = False
        self._error = failure
        self._step()

    def _step(self) -> None:
        if self._abandoned:
            self._close()
            return
        if self._error is None and self._done < self._target and (
                self._final or self._target - self._done >= self._batch):
            self._start()
            return
        if self.complete:
            self._close()
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if self._error is not None:
                    waiter.errback(self._error)
                else:
                    waiter.callback(None)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _flush_and_close(fd: int) -> None:
    """(pool thread) fdatasync a duplicate descriptor of a spool file, then close it."""
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _hash_available(hasher: Any, fd: int, start: int, written: Callable[[], int]) -> int:
    """(pool thread) Feed the file to `hasher` from `start` for as long as `written()`
    says more bytes are there (the writer goes on meanwhile: one job keeps up with it
    instead of one pool round trip per batch); returns the offset it stopped at."""
    offset = start
    while True:
        end = written()
        if offset >= end:
            return offset
        block = os.pread(fd, min(READ_BLOCK_BYTES, end - offset), offset)
        if not block:
            raise OSError(f"spool file ended at {offset} of {end} bytes")
        hasher.update(block)
        offset += len(block)


class BodySpool:
    """A write-once, then read, file-like sink (twisted.web seeks to 0 before processing)."""

    def __init__(
        self,
        tmp_dir: str,
        *,
        decoder: AwsChunkedDecoder | None = None,
        want_sha256: bool = False,
        checksum_algorithms: Iterable[str] = (),
        max_length: int | None = None,
        memory_limit: int = MEMORY_LIMIT_BYTES,
        hash_runner: Runner | None = None,
        sync_runner: Runner | None = None,
    ) -> None:
        self._tmp_dir = tmp_dir
        self._sync_runner = sync_runner
        self.early_flush: defer.Deferred[None] | None = None  # flush_early's job
        self.decoder = decoder
        self._md5 = hashlib.md5()
        self._sha256 = hashlib.sha256() if want_sha256 else None
        self._hash_runner = hash_runner
        self._offloaded: list[FileDigest] = []  # MD5 then SHA-256, once spilled
        self.checksummers = {alg: Checksummer(alg) for alg in checksum_algorithms}
        self._max_length = max_length
        self._memory_limit = memory_limit
        self._buffer: io.BytesIO | None = io.BytesIO()
        self._fd: int | None = None
        self.path: str | None = None
        self.length = 0
        self.error: SigV4Error | None = None  # a framing error seen while streaming
        self.too_large = False
        self._read_pos = 0
        self._closed = False

    # -- the write side (reactor thread, as bytes arrive) ---------------------------
    def write(self, data: bytes) -> None:
        if self.error is not None or self.too_large or self._closed:
            return
        if self.decoder is not None:
            try:
                data = self.decoder.feed(data)
            except SigV4Error as exc:
                self.error = exc
                self._discard()
                return
        if not data:
            return
        self.length += len(data)
        if self._max_length is not None and self.length > self._max_length:
            self.too_large = True
            self._discard()
            return
        if not self._offloaded:
            self._md5.update(data)
            if self._sha256 is not None:
                self._sha256.update(data)
        for summer in self.checksummers.values():
            summer.update(data)
        if self._buffer is not None:
            self._buffer.write(data)
            if self._buffer.tell() > self._memory_limit:
                self._spill()
        elif self._fd is not None:
            _write_all(self._fd, data)
            for digest in self._offloaded:
                digest.advance(self.length)

    def _spill(self) -> None:
        assert self._buffer is not None
        os.makedirs(self._tmp_dir, exist_ok=True)
        self.path = os.path.join(self._tmp_dir, f"{uuid.uuid4()}.spool")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        _write_all(self._fd, self._buffer.getbuffer())
        self._buffer = None
        if self._hash_runner is not None:
            # Everything so far is hashed; the rest is hashed from the file, off-thread.
            hashers = [self._md5] + ([self._sha256] if self._sha256 is not None else [])
            self._offloaded = [FileDigest(h, self._fd, self.length, self._hash_runner)
                               for h in hashers]

    def digests_ready(self) -> defer.Deferred[None]:
        """Fires when MD5 and SHA-256 of the whole body can be read (at once unless they
        are computed off-thread); call it once the body is complete. Fails when reading
        the spool file back failed."""
        if not self._offloaded or self.error is not None or self.too_large:
            return defer.succeed(None)
        waits = [digest.finish(self.length) for digest in self._offloaded]
        done = defer.gatherResults(waits, consumeErrors=True)
        return done.addCallback(lambda _: None).addErrback(_first_error)

    def flush_early(self) -> None:
        """Called once the body is complete: start writing a spilled body to the disk
        (see the module docstring). Errors are left to the commit's own fsync."""
        if (self._sync_runner is None or self._fd is None or self.error is not None
                or self.too_large or self.early_flush is not None):
            return
        fd = os.dup(self._fd)
        flushed = self._sync_runner.run(_flush_and_close, fd)
        self.early_flush = flushed.addErrback(lambda _failure: None)

    def finish_decoding(self) -> None:
        """Called once the body is complete: a truncated aws-chunked body becomes an error."""
        if self.decoder is not None and self.error is None and not self.too_large:
            try:
                self.decoder.finish()
            except SigV4Error as exc:
                self.error = exc

    # -- results ---------------------------------------------------------------------
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
        summer = self.checksummers.get(algorithm)
        return None if summer is None else summer.digest_b64()

    @property
    def in_memory(self) -> bool:
        return self._buffer is not None

    def memory_bytes(self) -> bytes:
        assert self._buffer is not None
        return self._buffer.getvalue()

    def detach_file(self) -> tuple[int, str]:
        """Hand the spool file (fd, path) to the blob store, which renames it into place.
        The spool forgets it, so close() will not delete it."""
        assert self._fd is not None and self.path is not None
        fd, path = self._fd, self.path
        self._fd = None
        self.path = None
        self._closed = True
        return fd, path

    # -- the read side (twisted.web API; small bodies such as XML documents) ---------
    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._read_pos = offset
        elif whence == 1:
            self._read_pos += offset
        else:
            self._read_pos = self.length + offset
        return self._read_pos

    def tell(self) -> int:
        return self._read_pos

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self.length - self._read_pos
        size = max(0, min(size, self.length - self._read_pos))
        if self._buffer is not None:
            view = self._buffer.getbuffer()
            data = bytes(view[self._read_pos : self._read_pos + size])
            view.release()
        elif self._fd is not None:
            data = os.pread(self._fd, size, self._read_pos)
        else:
            data = b""
        self._read_pos += len(data)
        return data

    # -- cleanup ---------------------------------------------------------------------
    def _discard(self) -> None:
        """Stop keeping bytes (error or over the limit) but keep counting nothing more."""
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
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.path = None

    def close(self) -> None:
        """Delete the spool (a no-op after detach_file)."""
        self._closed = True
        self._release()


def _first_error(failure: Failure) -> Failure:
    """The failure of the digest job that failed, out of gatherResults' FirstError."""
    error = failure.value
    if isinstance(error, defer.FirstError):
        return error.subFailure
    return failure


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
