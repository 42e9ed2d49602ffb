"""Whether a blob's bytes are in the page cache, and bringing them there off the reactor.

`os.sendfile` (http/sendfile.py) copies from the page cache on the reactor thread: bytes
that are not there are read from the disk first, in that call, and every other connection
waits meanwhile (a cold 8 MiB turn on a disk doing 150 MB/s is ~50 ms). So the sender asks
first, for each piece it is about to send, whether it is cached (`cached`), and when not,
has `warm` read the range on the IO pool (after a POSIX_FADV_WILLNEED so the kernel reads
it in large requests) before it sends it.

`cached` asks the kernel how many of the range's pages are cached with cachestat(2)
(Linux 6.5 and later): every page of the range counts, and asking reads nothing in.
Where that syscall is missing it falls back to `preadv2` with RWF_NOWAIT (EAGAIN instead
of waiting for the disk) of the range's first and last byte: a page missing between them
goes unseen, and a miss starts the kernel's read-ahead from the calling thread.
Where neither can be asked (no RWF_NOWAIT on the platform, a file system that refuses
it), `cached` says True: the bytes are sent as before, on the reactor. No Twisted.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import threading
from typing import Any

WARM_BUFFER_BYTES = 1024 * 1024
_NOWAIT = getattr(os, "RWF_NOWAIT", None)
_refused = False  # the file system refused RWF_NOWAIT once: stop asking
_PAGE = mmap.PAGESIZE
# cachestat(2)'s number in the common syscall table (these architectures use it).
_CACHESTAT_SYSCALL = 451 if platform.machine() in ("x86_64", "aarch64") else None


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def _libc_syscall() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None


_syscall: Any = _libc_syscall() if _CACHESTAT_SYSCALL is not None else None


class _Buffers(threading.local):
    """cachestat's two structures and their pointers, made once per thread (the small-GET
    path asks once per request)."""

    def __init__(self) -> None:
        self.span, self.stat = _Range(), _Stat()
        self.span_ref, self.stat_ref = ctypes.byref(self.span), ctypes.byref(self.stat)


_buffers = _Buffers()


def cached_pages(fd: int, offset: int, count: int) -> tuple[int, int] | None:
    """(pages of the range in the page cache, pages of the range) by cachestat(2), or None
    where the kernel can not tell (an older kernel: then never asked again)."""
    global _syscall
    if _syscall is None or count <= 0:
        return None
    buffers = _buffers
    buffers.span.off, buffers.span.len = offset, count
    if _syscall(_CACHESTAT_SYSCALL, fd, buffers.span_ref, buffers.stat_ref, 0) != 0:
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):  # no such call (or filtered)
            _syscall = None
        return None
    first, last = offset // _PAGE, (offset + count - 1) // _PAGE
    return buffers.stat.nr_cache, last - first + 1


def cached(fd: int, offset: int, count: int) -> bool:
    """Whether the `count` bytes at `offset` of `fd` are in the page cache (True for count
    0, and where that can not be told; module notes)."""
    global _refused
    if count <= 0:
        return True
    pages = cached_pages(fd, offset, count)
    if pages is not None:
        return pages[0] >= pages[1]
    if _NOWAIT is None or _refused:
        return True
    probe = bytearray(1)
    for position in (offset, offset + count - 1):
        try:
            os.preadv(fd, [probe], position, _NOWAIT)
        except BlockingIOError:
            return False
        except OSError as error:
            if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                _refused = True
                return True
            raise  # EIO and the like: the send that follows would meet it too
    return True


def warm(fd: int, offset: int, count: int) -> None:
    """(IO thread) Bring `count` bytes at `offset` of `fd` into the page cache: the kernel
    is told they will be needed, then they are read through (and dropped). Stops early at
    the end of the file."""
    if count <= 0:
        return
    try:
        os.posix_fadvise(fd, offset, count, os.POSIX_FADV_WILLNEED)
    except (AttributeError, OSError):
        pass  # advice only
    buffer = memoryview(bytearray(min(count, WARM_BUFFER_BYTES)))
    position, end = offset, offset + count
    while position < end:
        read = os.preadv(fd, [buffer[:min(len(buffer), end - position)]], position)
        if read == 0:
            return
        position += read
