"""Per-process caches that stay coherent across the worker processes of one node.

A node may run several worker processes (`[server] workers`), each with its own caches of
buckets, credentials and policies. Every change bumps a counter of its scope ("buckets",
"iam") in `Counters`; every cache compares the counter of its scope with the value it last
saw on each lookup and forgets everything when it moved. So a change made (and answered)
by one worker is seen by the next request in any worker: a revoked credential stops working
at once, not after the cache TTL.

`SharedCounters` keeps the counters in a small memory-mapped file that the node's parent
process creates in its runtime directory: a read is one unpack from shared memory (well
under a microsecond), a bump takes an exclusive `flock` for a few microseconds. Nothing in
it needs to survive a restart (caches start empty). `LocalCounters` serves a single-process
node. `TtlCache` is the one cache rule (TTL, LRU bound, a lookup that raced an invalidation
is not stored) that every such cache uses. Pure: clocks are injected, no Twisted.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

BUCKETS = "buckets"  # bucket records and bucket configuration
IAM = "iam"  # users, credentials, teams, grants
SETTINGS = "settings"  # server settings (the leader re-reads what its workers depend on)
OBJECTS = "objects"  # object rows (bumped by the store's writer threads after each commit)
DISK_FULL = "disk_full"  # a write met a full disk: every worker's free-space sample is stale
SCOPES: tuple[str, ...] = (BUCKETS, IAM, SETTINGS, OBJECTS, DISK_FULL)

_SLOT = struct.Struct("<Q")
_FILE_SIZE = 4096  # one page; SCOPES use the first few slots

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Counters(Protocol):
    def read(self, scope: str) -> int: ...

    def bump(self, scope: str) -> int:
        """Increment the scope's counter and return its new value."""
        ...


class LocalCounters:
    """The counters of a node that runs one process. Bumps may come from several threads
    (the DB writer threads bump OBJECTS), so they are serialised: a lost increment could
    hide a change from a cache that had already seen the other one."""

    def __init__(self) -> None:
        self._values = dict.fromkeys(SCOPES, 0)
        self._lock = threading.Lock()

    def read(self, scope: str) -> int:
        return self._values[scope]

    def bump(self, scope: str) -> int:
        with self._lock:
            self._values[scope] += 1
            return self._values[scope]


class SharedCounters:
    """The counters of a node's worker processes, in a memory-mapped file."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _FILE_SIZE:
                os.ftruncate(fd, _FILE_SIZE)
            self._map = mmap.mmap(fd, _FILE_SIZE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._lock = threading.Lock()
        self._offsets = {scope: i * _SLOT.size for i, scope in enumerate(SCOPES)}

    def read(self, scope: str) -> int:
        value: int = _SLOT.unpack_from(self._map, self._offsets[scope])[0]
        return value

    def bump(self, scope: str) -> int:
        offset = self._offsets[scope]
        # flock excludes the other processes; threads of this one share its open file
        # (where flock does not exclude), hence the thread lock too.
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                value: int = _SLOT.unpack_from(self._map, offset)[0] + 1
                _SLOT.pack_into(self._map, offset, value)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        return value

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class TtlCache(Generic[K, V]):
    """A bounded TTL cache whose entries are dropped when its scope's counter moves.

    Usage: `hit, value = cache.get(key)`; on a miss take `token = cache.token()` before
    loading and `cache.store(key, loaded, token)` after: the store is skipped when an
    invalidation (here or in another process) happened in between.
    """

    def __init__(
        self,
        *,
        size: int,
        ttl_seconds: float,
        clock: Callable[[], float],
        counters: Counters | None = None,
        scope: str = BUCKETS,
    ) -> None:
        self._size = size
        self._ttl = ttl_seconds
        self._clock = clock
        self._counters: Counters = counters if counters is not None else LocalCounters()
        self._scope = scope
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._seen = self._counters.read(scope)
        self._generation = 0  # bumped by every invalidation seen by this process

    @property
    def enabled(self) -> bool:
        return self._size > 0 and self._ttl > 0

    def _sync(self) -> None:
        shared = self._counters.read(self._scope)
        if shared != self._seen:
            self._seen = shared
            self._generation += 1
            self._entries.clear()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(hit, value); a hit may carry a cached None ("known not to exist")."""
        self._sync()
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self._clock():
            return False, None
        self._entries.move_to_end(key)
        return True, entry[1]

    def token(self) -> int:
        self._sync()
        return self._generation

    def store(self, key: K, value: V, token: int) -> None:
        """Keep a lookup result unless an invalidation happened since `token()`."""
        if not self.enabled or self.token() != token:
            return
        self._entries[key] = (self._clock() + self._ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def invalidate(self, key: K | None = None) -> None:
        """Forget `key` (or everything) here, and tell the node's other processes."""
        self._generation += 1
        if key is None:
            self._entries.clear()
        else:
            self._entries.pop(key, None)
        seen = self._seen
        bumped = self._counters.bump(self._scope)
        if bumped == seen + 1:
            # Only our own bump happened since we last looked: our entries stay valid.
            self._seen = bumped
