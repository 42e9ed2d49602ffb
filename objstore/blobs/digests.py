"""Digests of a file that is still being written, computed on a thread pool behind the
writer.

MD5 (the ETag) and SHA-256 (a signed payload) of a large body are not computed on the
reactor thread: at several hundred MiB/s they would take all of it. Once a body spills to
its file, `FileDigest` jobs on the hashing pool read the file behind the writer (one job per
digest at a time, started once a few MiB are waiting, which goes on hashing for as long as
the writer stays ahead of it, so bytes are hashed in order and memory stays flat; hashlib
releases the GIL, so MD5 and SHA-256 run in parallel). Only the reactor thread calls the
methods of a `FileDigest`; its jobs only read the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.python.failure import Failure

if TYPE_CHECKING:
    from objstore.threads import Runner

# A digest job hashes at least this many new bytes (except the last one), reading them in
# blocks of READ_BLOCK_BYTES: few pool round trips, and hashlib drops the GIL per block.
DIGEST_BATCH_BYTES = 4 * 1024 * 1024
READ_BLOCK_BYTES = 256 * 1024


# hashlib lets go of the GIL for an update of HASHLIB_GIL_MINSIZE (2,048) bytes or more.
# On the reactor thread of a busy node each such release cost a wait of ~0.7 ms to get
# the GIL back from the pool threads (bench/RESULTS.md session 15), far more than hashing
# a few KiB takes. `update_keeping_gil` feeds a small buffer in pieces below that size
# instead; past KEEP_GIL_BYTES a hash takes long enough that releasing is worth it.
GIL_RELEASE_BYTES = 2048
KEEP_GIL_BYTES = 32 * 1024


def update_keeping_gil(hasher: Any, data: bytes) -> None:
    """`hasher.update(data)` without releasing the GIL when `data` is small (see above);
    the digest is the same."""
    size = len(data)
    if size < GIL_RELEASE_BYTES or size > KEEP_GIL_BYTES:
        hasher.update(data)
        return
    view = memoryview(data)
    piece = GIL_RELEASE_BYTES - 1
    for start in range(0, size, piece):
        hasher.update(view[start:start + piece])


class FileDigest:
    """One digest (a hashlib object) of a file that is still being written, computed on a
    thread pool behind the writer. The reactor thread calls `advance` with the length
    written so far and `finish` with the final length; jobs run one at a time, in order.
    The digest reads through its own duplicate of the file descriptor, so the writer may
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


def first_error(failure: Failure) -> Failure:
    """The failure of the digest job that failed, out of gatherResults' FirstError."""
    error = failure.value
    if isinstance(error, defer.FirstError):
        return error.subFailure
    return failure
