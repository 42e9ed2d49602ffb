"""Exclusive (bucket, key) locks shared by the worker processes of one node.

`KeyLocks` (objstore/engine/versioning.py) serialises changes to an existing version within
a process; with several workers it also takes one of these, so a legal hold set through one
worker and a permanent delete through another cannot both check the old state. They are
POSIX byte-range locks on one file of the node's runtime directory, one byte per hash slot
(a collision only serialises two unrelated keys). Taking one never blocks the reactor: a
non-blocking attempt is retried on a short timer while another process holds the slot.
POSIX locks belong to the process, so slots held by several coroutines of this process are
counted here and unlocked when the last one lets go.
"""

from __future__ import annotations

import errno
import fcntl
import os
import zlib
from typing import Any

from twisted.internet import task

SLOTS = 1 << 16
POLL_SECONDS = 0.002


def slot_of(bucket: str, key: str) -> int:
    """The same slot in every process (Python's hash() is salted per process)."""
    return zlib.crc32(f"{bucket}\0{key}".encode()) % SLOTS


class RangeLocks:
    def __init__(self, path: str, clock: Any = None, poll_seconds: float = POLL_SECONDS) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._clock = clock
        self._poll = poll_seconds
        self._held: dict[int, int] = {}

    @staticmethod
    def slot_of(bucket: str, key: str) -> int:
        return slot_of(bucket, key)

    def _try_lock(self, slot: int) -> bool:
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        return True

    async def acquire(self, slot: int) -> None:
        if not self._held.get(slot):
            while not self._try_lock(slot):
                if self._clock is None:
                    from twisted.internet import reactor

                    self._clock = reactor
                await task.deferLater(self._clock, self._poll, lambda: None)
        self._held[slot] = self._held.get(slot, 0) + 1

    def release(self, slot: int) -> None:
        count = self._held[slot] - 1
        if count:
            self._held[slot] = count
            return
        del self._held[slot]
        fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, slot)

    def close(self) -> None:
        os.close(self._fd)
