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
  answered as durable), and, for a `syncfs`, to every caller whose writes began before
  that error was reported (`begin()`): `syncfs` reports a writeback error of the volume
  once per open descriptor (Linux 5.8 and later), so a round may report the lost page of a
  write that is not one of its callers; that write must not be answered by a later round.
* The volume's descriptor is opened at the first `begin()` and kept, so that a writeback
  error after it is reported to the next `syncfs`; a fresh descriptor would not see it.

`syncfs` flushes every dirty page of the volume, not only the round's: a write that waits
on a round can wait for the writeback of a large upload still being received. Spooled
bodies are flushed as they complete (writer.py `flush_early`), and a body large enough to
be spooled never goes through the barrier (its fdatasync stays its own), which bounds how
much a round finds. Before Linux 5.8 `syncfs` reports no writeback error at all, so it is
not used there; where it is missing or not trusted (not Linux, or Linux before 5.8) every
round runs each caller's `alone()` in turn, which is as durable as the syncs were without
a barrier.

Blocking, thread-safe, no Twisted; runs on the IO pool or in a synchronous tool.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from collections.abc import Callable

Sync = Callable[[], None]


def reports_writeback_errors(release: str) -> bool:
    """True for a Linux kernel release (`uname -r`) whose syncfs(2) returns writeback
    errors (5.8 and later); before that it returned 0 even when pages were lost, so a
    round answered by it could answer a write that never reached the disk."""
    parts = release.split(".")
    try:
        major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return False
    return (major, minor) >= (5, 8)


def _libc_syncfs() -> Callable[[int], None] | None:
    """syncfs(2) through libc (Python has no os.syncfs), or None where there is none or
    where it does not report writeback errors (Linux before 5.8: every caller then runs
    its own syncs). ctypes releases the GIL around the call."""
    if os.uname().sysname != "Linux" or not reports_writeback_errors(os.uname().release):
        return None
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

    __slots__ = ("alone", "began", "done", "error", "wants_whole", "whole")

    def __init__(self) -> None:
        self.wants_whole = False  # a caller's own syncs are many (`sync(..., whole=True)`)
        self.alone: list[Sync] = []
        self.began: list[int] = []  # each caller's `begin()` ticket
        self.whole = False  # synced by one syncfs (else by each caller's own syncs)
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
        self._fd: int | None = None
        self._issued = 0  # tickets of `begin()` handed out
        self._failed_upto = 0  # writes that began up to this ticket saw a failed sync...
        self._failure: BaseException | None = None  # ...this one
        self.rounds = 0  # statistics: syncs run, and how many of them were syncfs
        self.grouped = 0

    def begin(self) -> int:
        """Call before writing data that a later `sync` makes durable; pass the ticket to
        it."""
        with self._cond:
            if self._fd is None and self._syncfs is not None:
                self._fd = os.open(self._volume, os.O_RDONLY | os.O_DIRECTORY)
            self._issued += 1
            return self._issued

    def close(self) -> None:
        with self._cond:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def sync(self, alone: Sync, began: int | None = None, *, whole: bool = False) -> None:
        """Return once what the caller wrote before this call is durable: by `alone()`
        (the caller's own syncs) or by a whole-volume sync that started after the call.
        `began`: the caller's `begin()` ticket, taken before it wrote data (none: the
        call only needs metadata it changed, which a failed journal never drops quietly).
        `whole`: `alone()` is many syncs (say, one per directory of a batch): the round
        runs one `syncfs` even when the caller is alone in it, where `syncfs` is trusted."""
        with self._cond:
            if began is None:
                began = self._issued + 1
            joined = self._next
            if joined is None:
                joined = self._next = _Round()
            joined.alone.append(alone)
            joined.began.append(began)
            joined.wants_whole = joined.wants_whole or whole
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
                    if joined.error is not None and joined.whole:
                        self._failed_upto, self._failure = self._issued, joined.error
                    self._cond.notify_all()
                self._raise_if_failed_before(began)
                return  # the caller that ran the round
            error = joined.error
            if error is None:
                self._raise_if_failed_before(began)
        if error is not None:  # every other caller of the round hears it too
            if isinstance(error, OSError):
                raise OSError(error.errno, error.strerror, error.filename) from error
            raise OSError(f"the sync of the data volume failed: {error!r}") from error

    def _raise_if_failed_before(self, began: int) -> None:
        """(lock held) A sync failed after this caller's writes began: they may be what
        it lost."""
        if began <= self._failed_upto and self._failure is not None:
            raise OSError(errno.EIO, "a sync of the data volume failed while this write "
                          f"was in flight: {self._failure}") from self._failure

    def _run(self, joined: _Round) -> None:
        """Runs outside the lock: callers arriving meanwhile gather in the next round.
        The round's list is final here (it is no longer `_next`)."""
        self.rounds += 1
        if (len(joined.alone) == 1 and not joined.wants_whole) or self._syncfs is None:
            for own in joined.alone:
                own()
            return
        self.grouped += 1
        joined.whole = True
        with self._cond:
            if self._fd is None:  # no caller of the round wrote data (no `begin()` yet)
                self._fd = os.open(self._volume, os.O_RDONLY | os.O_DIRECTORY)
            fd = self._fd
        self._syncfs(fd)
