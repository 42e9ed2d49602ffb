"""One durability barrier shared by every write in flight on the data volume.

A blob write needs three syncs of its own (the blob's data, the sidecar's data, then the
directory that holds both renames), each a journal commit and a cache flush of the volume.
When several writes are in flight on the IO pool at once, one `syncfs(2)` of the data
volume makes all of what each of them wrote so far durable at the cost of about one such
commit. `SyncBarrier.sync(alone)` is that group commit:

* The caller has written what must become durable (with write(2), rename(2), mkdir(2))
  and asks the barrier. It returns only once a sync that *started after the call* has
  finished: either `alone()`, the caller's own syncs (fdatasync of its files, fsync of
  its directory), or one `syncfs` that covered every caller waiting at that moment.
* One sync runs at a time. A caller that arrives while one runs joins the next round; when
  the running one ends, one of the callers of the next round runs it for all of them. A
  round of one caller runs its `alone()` (the syncs it would have done without a barrier,
  so a lone write costs what it did before); a round of two or more runs one `syncfs`.
* An error of a round's sync is raised to every caller of that round (none of them is
  answered as durable).

`syncfs` flushes every dirty page of the volume, not only the round's: a write that waits
on a round can wait for the writeback of a large upload still being received. Spooled
bodies are flushed as they complete (writer.py `flush_early`), and a body large enough to
be spooled never goes through the barrier (its fdatasync stays its own), which bounds how
much a round finds. `syncfs` reports writeback errors since Linux 5.8; where it is missing
(not Linux) every round runs each caller's `alone()` in turn, which is as durable as the
syncs were without a barrier.

Blocking, thread-safe, no Twisted; runs on the IO pool or in a synchronous tool.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable

Sync = Callable[[], None]


def _libc_syncfs() -> Callable[[int], None] | None:
    """syncfs(2) through libc (Python has no os.syncfs), or None where there is none.
    ctypes releases the GIL around the call."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int

    def syncfs(fd: int) -> None:
        if function(fd) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"syncfs: {os.strerror(number)}")

    return syncfs


SYNCFS = _libc_syncfs()


class _Round:
    """The callers that one sync covers."""

    __slots__ = ("alone", "done", "error")

    def __init__(self) -> None:
        self.alone: list[Sync] = []
        self.done = False
        self.error: BaseException | None = None


class SyncBarrier:
    """Group commit of the syncs of concurrent writes on one file system (module notes).

    `volume` is a path on that file system (the data directory); `syncfs` the whole-volume
    sync, injectable for tests (None: run every caller's own syncs)."""

    def __init__(self, volume: str, *,
                 syncfs: Callable[[int], None] | None = SYNCFS) -> None:
        self._volume = volume
        self._syncfs = syncfs
        self._cond = threading.Condition(threading.Lock())
        self._next: _Round | None = None
        self._running = False
        self.rounds = 0  # statistics: syncs run, and how many of them were syncfs
        self.grouped = 0

    def sync(self, alone: Sync) -> None:
        """Return once what the caller wrote before this call is durable: by `alone()`
        (the caller's own syncs) or by a whole-volume sync that started after the call."""
        with self._cond:
            joined = self._next
            if joined is None:
                joined = self._next = _Round()
            joined.alone.append(alone)
            while not joined.done:
                if self._running:
                    self._cond.wait()
                    continue
                self._running = True
                self._next = None
                self._cond.release()
                try:
                    self._run(joined)
                except BaseException as failure:
                    joined.error = failure
                    raise
                finally:
                    self._cond.acquire()
                    self._running = False
                    joined.done = True
                    self._cond.notify_all()
                return  # the caller that ran the round
            error = joined.error
        if error is not None:  # every other caller of the round hears it too
            if isinstance(error, OSError):
                raise OSError(error.errno, error.strerror, error.filename) from error
            raise OSError(f"the sync of the data volume failed: {error!r}") from error

    def _run(self, joined: _Round) -> None:
        """Runs outside the lock: callers arriving meanwhile gather in the next round.
        The round's list is final here (it is no longer `_next`)."""
        self.rounds += 1
        if len(joined.alone) == 1 or self._syncfs is None:
            for own in joined.alone:
                own()
            return
        self.grouped += 1
        fd = os.open(self._volume, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._syncfs(fd)
        finally:
            os.close(fd)
