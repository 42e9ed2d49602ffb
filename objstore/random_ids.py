"""Random UUID4 strings without a system call each: the ids of blobs, versions and
multipart uploads, drawn on the hot paths (a PUT draws two).

`uuid.uuid4()` reads 16 bytes with one `getrandom` call, and a call that leaves Python
releases the GIL: on a busy node the thread then waits to get it back while the database
and IO threads take turns (docs/ARCHITECTURE.md, "Threads and the GIL"). Here the bytes come from
the same kernel source, os.urandom, 4 KiB at a time (256 ids a call). They are as
unpredictable as uuid4's; the buffer is dropped in a forked child, so two processes never
share one. Thread-safe.
"""

from __future__ import annotations

import os
import threading
import uuid

_IDS_PER_DRAW = 256
_UUID_BYTES = 16


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._offset = 0
        self._pid = -1

    def uuid4(self) -> uuid.UUID:
        with self._lock:
            pid = os.getpid()
            if self._offset >= len(self._buffer) or pid != self._pid:
                self._buffer = os.urandom(_IDS_PER_DRAW * _UUID_BYTES)
                self._offset = 0
                self._pid = pid
            start = self._offset
            self._offset = start + _UUID_BYTES
            return uuid.UUID(bytes=self._buffer[start:start + _UUID_BYTES], version=4)


_pool = _Pool()


def random_uuid() -> uuid.UUID:
    """A random (version 4) UUID, as `uuid.uuid4()` makes."""
    return _pool.uuid4()


def random_uuid_text() -> str:
    """`str(uuid.uuid4())`: the canonical 36-character form."""
    return str(_pool.uuid4())


__all__ = ["random_uuid", "random_uuid_text"]
