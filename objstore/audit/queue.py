"""The bounded in-memory queue between the request path and the audit log's writer.

`put` is O(1) and never blocks nor fails: when the queue is full the OLDEST entry is
dropped (recent history is the more useful when the database cannot keep up), counted, and
reported by a warning at most once per `warn_interval_seconds` with the number dropped
since the last one. Reactor-thread only; the clock is injected.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from twisted.logger import Logger

T = TypeVar("T")

log = Logger()


class BoundedQueue(Generic[T]):
    def __init__(
        self,
        capacity: int,
        *,
        clock: Callable[[], float],
        warn_interval_seconds: float = 60.0,
        what: str = "audit queue",
    ) -> None:
        if capacity < 1:
            raise ValueError("a queue needs room for at least one entry")
        self.capacity = capacity
        self._items: deque[T] = deque()
        self._clock = clock
        self._warn_interval = warn_interval_seconds
        self._what = what
        self._last_warning: float | None = None
        self._unreported = 0
        self.dropped = 0  # entries dropped since start, for the metrics

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        if len(self._items) >= self.capacity:
            self._items.popleft()
            self.drop(1)
        self._items.append(item)

    def take(self, count: int) -> list[T]:
        """Remove and return up to `count` of the oldest entries, oldest first."""
        items = self._items
        return [items.popleft() for _ in range(min(count, len(items)))]

    def drop(self, count: int) -> None:
        """Count `count` entries as lost (also used for batches the writer gave up on)."""
        self.dropped += count
        self._unreported += count
        now = self._clock()
        last = self._last_warning
        if last is None or now - last >= self._warn_interval or now < last:
            log.warn("{what}: {count} entries dropped (the database is not keeping up)",
                     what=self._what, count=self._unreported)
            self._last_warning = now
            self._unreported = 0
