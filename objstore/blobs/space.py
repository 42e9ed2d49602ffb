"""Free space on the data volume: the capacity guard, and the space held back for the
database so that deletes still work on a full disk.

`SpaceGuard` says whether a write may start (`refuses_write`, `admits_body`) from the last
sample of the volume's free space, without a system call: a timer of the node refreshes the
sample once a second on the IO pool (`refresh`; service.py). A write is refused while less
than `[storage] min_free_bytes` would stay free; the APIs answer 507 InsufficientStorage
(S3 XML or admin JSON) before doing anything. Deletes are never refused: they make room.
A write that meets a full disk all the same refuses the next ones, in every worker of the
node (a counter in shared memory, meta/coherence.py), until each has taken a new sample.
The large bodies admitted since the last sample count as used, so that uploads arriving
within one second can not together run past the minimum; small ones (kept in memory until
they are stored) are not counted, as a request refused after them would hold its count
until the next sample: `min_free_bytes` should exceed a second's worth of them.

`DatabaseReserve` is a preallocated file of `[storage] db_reserve_bytes` beside the SQLite
database. SQLite needs room in its write-ahead log even to delete a row, so on a disk that
is really full (another program filled it, or uploads raced past the guard) a delete would
fail like a write. The metadata store's retry (meta/retry.py) releases the reserve when a
query that frees space finds the disk full, and runs it once more; the guard makes the file
again at its first sample that has room for it above `min_free_bytes`. While the reserve is
released its size counts as used, so the space it gave is never taken by the writes the
guard lets through. PostgreSQL keeps its data elsewhere: no reserve then.

Blocking methods (`measure`, `DatabaseReserve.make` and `release`) run on the IO pool, a DB
thread or at start-up; the others on the reactor thread. This module never refuses a
request itself: the APIs ask it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.logger import Logger

from objstore.blobs.files import unlink_quietly
from objstore.blobs.writer import MEMORY_LIMIT_BYTES
from objstore.meta.coherence import DISK_FULL, Counters, LocalCounters

if TYPE_CHECKING:
    from objstore.threads import Runner

log = Logger()

RESERVE_FILE_NAME = "space-reserve"
REFRESH_SECONDS = 1.0


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the volume holding `path`."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class DatabaseReserve:
    """A file of `size_bytes` preallocated in `directory`, given up when the database
    needs the space. Safe to use from several threads and processes: the file is made
    under a temporary name and renamed into place, and removed by name."""

    def __init__(self, directory: str, size_bytes: int) -> None:
        self.path = os.path.join(directory, RESERVE_FILE_NAME)
        self.size_bytes = size_bytes
        self._lock = threading.Lock()

    def held(self) -> bool:
        return os.path.exists(self.path)

    def make(self) -> bool:
        """(blocking) Allocate the file unless it exists; False when there is no room."""
        with self._lock:
            if self.held():
                return True
            temporary = f"{self.path}.{os.getpid()}.new"
            try:
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.posix_fallocate(fd, 0, self.size_bytes)
                finally:
                    os.close(fd)
                os.rename(temporary, self.path)
            except OSError:
                unlink_quietly(temporary)
                return False
            return True

    def release(self) -> bool:
        """(blocking) Give the space back to the volume; False when it was not held."""
        with self._lock:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                return False
            return True


@dataclass(frozen=True, slots=True)
class SpaceSample:
    free_bytes: int  # as the volume reports it
    reserve_held: bool


class SpaceGuard:
    """The capacity guard of one process. With `min_free_bytes` 0 it refuses nothing
    (the reserve still works): writes then fail only when the disk is really full."""

    def __init__(
        self,
        data_dir: str,
        min_free_bytes: int,
        reserve: DatabaseReserve | None = None,
        *,
        runner: Runner | None = None,
        measure_free: Callable[[str], int] = free_bytes,
        counters: Counters | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.min_free_bytes = min_free_bytes
        self.reserve = reserve
        self._runner = runner
        self._measure_free = measure_free
        self._counters = counters if counters is not None else LocalCounters()
        self.sample: SpaceSample | None = None
        self._admitted_bytes = 0  # bodies admitted since the sample was taken
        self._full_generation = self._counters.read(DISK_FULL)  # as the sample was taken
        self._refusing = False

    # -- blocking ----------------------------------------------------------------------
    def measure(self) -> SpaceSample:
        """(IO pool, or start-up) The free space now, after making the reserve again when
        there is room for it."""
        free = self._measure_free(self.data_dir)
        reserve = self.reserve
        if reserve is None:
            return SpaceSample(free, False)
        held = reserve.held()
        if not held and free - reserve.size_bytes >= self.min_free_bytes and reserve.make():
            return SpaceSample(self._measure_free(self.data_dir), True)
        return SpaceSample(free, held)

    def release_reserve(self) -> bool:
        """(DB thread) Give the database the space held for it; False when none is left."""
        return self.reserve is not None and self.reserve.release()

    # -- on the reactor thread ---------------------------------------------------------
    async def refresh(self) -> None:
        """Take a new sample on the IO pool (the node's timer calls this every second)."""
        assert self._runner is not None, "a guard without a runner is refreshed by hand"
        generation = self._counters.read(DISK_FULL)
        self.update(await self._runner.run(self.measure), generation)

    def update(self, sample: SpaceSample, full_generation: int | None = None) -> None:
        """Use `sample`, taken after the DISK_FULL counter read `full_generation` (by
        default: now)."""
        before = self.sample
        self.sample = sample
        self._admitted_bytes = 0
        self._full_generation = (full_generation if full_generation is not None
                                 else self._counters.read(DISK_FULL))
        reserve = self.reserve
        if reserve is not None and before is not None and before.reserve_held != \
                sample.reserve_held:
            if sample.reserve_held:
                log.info("the database's space reserve ({path}) is held again", path=reserve.path)
            else:
                log.warn("the database used its space reserve ({path}, {size} bytes): the "
                         "data volume was full", path=reserve.path, size=reserve.size_bytes)
        refusing = self.refuses_write()
        if refusing != self._refusing:
            self._refusing = refusing
            self._log_transition(refusing)

    def _log_transition(self, refusing: bool) -> None:
        if refusing:
            log.warn("data volume {path}: {available} bytes free, less than [storage] "
                     "min_free_bytes = {minimum}: writes are refused (507 InsufficientStorage) "
                     "until space is freed; deletes still work", path=self.data_dir,
                     available=self.available_bytes(), minimum=self.min_free_bytes)
        else:
            log.info("data volume {path}: {available} bytes free; writes are accepted again",
                     path=self.data_dir, available=self.available_bytes())

    def found_full(self) -> None:
        """A write met a full disk (ENOSPC, SQLITE_FULL): the samples of every worker are
        out of date, so no write starts until a new one says otherwise."""
        self._counters.bump(DISK_FULL)

    def available_bytes(self) -> int:
        """Free bytes not promised to the reserve, as last sampled (unknown: plenty)."""
        sample = self.sample
        if self._counters.read(DISK_FULL) != self._full_generation:
            return 0
        if sample is None:
            return 1 << 62
        promised = self._admitted_bytes
        if self.reserve is not None and not sample.reserve_held:
            promised += self.reserve.size_bytes
        return sample.free_bytes - promised

    def refuses_write(self) -> bool:
        """True while a write (any request that is not a delete) must be refused."""
        return self.min_free_bytes > 0 and self.available_bytes() < self.min_free_bytes

    def admits_body(self, size_bytes: int) -> bool:
        """Whether a request body of `size_bytes` (its declared length) may be read: False
        when one that will be spooled to the data volume does not fit above
        `min_free_bytes` (it is refused before it is read); an admitted one counts as used
        until the next sample. Bodies kept in memory (a DeleteObjects document) are always
        admitted and not counted: the request itself is refused, or not, once
        authenticated."""
        if size_bytes <= MEMORY_LIMIT_BYTES or self.min_free_bytes == 0:
            return True
        if self.available_bytes() - size_bytes < self.min_free_bytes:
            return False
        self._admitted_bytes += size_bytes
        return True
