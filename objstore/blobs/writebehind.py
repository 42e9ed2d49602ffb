"""Write-behind for a large body's spool file: the disk starts writing the file while the
body is still arriving, so the fdatasync after its last byte (`BlobWriter.flush_early`,
then the blob store's own fsync at commit, which durability still rests on) finds
little left to write.

Without it every byte of a 64 MiB upload is still dirty in the page cache when the body
ends (the kernel's own writeback waits for seconds or a dirty-memory threshold), and the
fsync then writes all of it while the client waits. `WriteBehind` asks the kernel to
start writing each `WINDOW_BYTES` of the file as soon as they are written, with
`sync_file_range(SYNC_FILE_RANGE_WRITE)` on the IO pool: it starts the writeback and
returns without waiting for it or flushing the device's cache, so it costs no durability
promise and no extra cache flush. One job at a time per file, through its own duplicate
descriptor, so the writer may close or hand over its file meanwhile. Where the call is
not available (not Linux) it does nothing. The reactor thread calls `advance`; only the
jobs run on the pool.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from objstore.threads import Runner

WINDOW_BYTES = 8 * 1024 * 1024
SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the range's dirty pages


def _libc_sync_file_range() -> Any:
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_sync_file_range = _libc_sync_file_range()


def start_writeback(fd: int, offset: int, count: int) -> None:
    """(pool thread) Start writing bytes [offset, offset + count) of `fd` to the disk, then
    close `fd` (a duplicate). Errors are left to the fsync that follows."""
    try:
        if _sync_file_range is not None:
            _sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE)
    finally:
        os.close(fd)


class WriteBehind:
    """Starts the writeback of a growing file, a window at a time (see the module
    docstring)."""

    def __init__(self, runner: Runner, window_bytes: int = WINDOW_BYTES) -> None:
        self._runner = runner
        self._window = window_bytes
        self._started = 0  # bytes whose writeback was asked for
        self._running = False

    @staticmethod
    def available() -> bool:
        return _sync_file_range is not None

    def advance(self, fd: int, written: int) -> None:
        """`written` bytes of the file behind `fd` are written: start the writeback of
        what is not started yet, once a window is waiting and no job runs."""
        if self._running or written - self._started < self._window:
            return
        start, self._started = self._started, written
        self._running = True
        done = self._runner.run(start_writeback, os.dup(fd), start, written - start)
        done.addBoth(self._ended)

    def _ended(self, _result: object) -> None:
        self._running = False
