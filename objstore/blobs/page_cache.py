"""Whether a blob's bytes are in the page cache, and bringing them there off the reactor.

`os.sendfile` (http/sendfile.py) copies from the page cache on the reactor thread: bytes
that are not there are read from the disk first, in that call, and every other connection
waits meanwhile (a cold 8 MiB turn on a disk doing 150 MB/s is ~50 ms). So the sender asks
first, for each piece it is about to send, whether its first and last byte are cached
(`cached`: `preadv2` with RWF_NOWAIT, which answers EAGAIN instead of waiting for the disk;
two one-byte reads), and when not, has `warm` read the range on the IO pool (after a
POSIX_FADV_WILLNEED so the kernel reads it in large requests) before it sends it.

Where the question can not be asked (no RWF_NOWAIT on the platform, a file system that
refuses it), `cached` says True: the bytes are sent as before, on the reactor. No Twisted.
"""

from __future__ import annotations

import errno
import os

WARM_BUFFER_BYTES = 1024 * 1024
_NOWAIT = getattr(os, "RWF_NOWAIT", None)
_refused = False  # the file system refused RWF_NOWAIT once: stop asking


def cached(fd: int, offset: int, count: int) -> bool:
    """Whether the first and the last byte of `count` bytes at `offset` of `fd` are in the
    page cache (True for count 0, and where that can not be told)."""
    global _refused
    if count <= 0 or _NOWAIT is None or _refused:
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
