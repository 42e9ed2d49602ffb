"""A small TTL cache of bucket records ([server.cache] size and ttl_seconds).

Every S3 object request looks its bucket up first; a hit saves a database round trip and a
thread hop. Bucket mutations made through the same MetaStore invalidate the entry at once
(and a lookup that was in flight while one happened is not stored), so this process never
serves a stale bucket; other processes see a change within ttl_seconds. Pure: the clock is
injected, no Twisted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from objstore.meta.records import BucketRecord


class BucketCache:
    def __init__(self, *, size: int, ttl_seconds: float, clock: Callable[[], float]) -> None:
        self._size = size
        self._ttl = ttl_seconds
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, BucketRecord | None]] = OrderedDict()
        self.generation = 0  # bumped by every invalidation

    @property
    def enabled(self) -> bool:
        return self._size > 0 and self._ttl > 0

    def get(self, name: str) -> tuple[bool, BucketRecord | None]:
        """(hit, record); a cached None means "known not to exist"."""
        entry = self._entries.get(name)
        if entry is None or entry[0] <= self._clock():
            return False, None
        self._entries.move_to_end(name)
        return True, entry[1]

    def store(self, name: str, record: BucketRecord | None, generation: int) -> None:
        """Keep a lookup result unless an invalidation happened since it started."""
        if not self.enabled or generation != self.generation:
            return
        self._entries[name] = (self._clock() + self._ttl, record)
        self._entries.move_to_end(name)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def invalidate(self, name: str) -> None:
        self.generation += 1
        self._entries.pop(name, None)
