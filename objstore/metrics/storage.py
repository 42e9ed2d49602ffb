"""The storage figures the metrics show (buckets, object versions, bytes, in total and for
the largest buckets), measured by a timer and cached, so a scrape never reads the database.
A measure reads the usage counters (meta/usage_counters.py): one row per bucket, whatever
the buckets hold.

Per-bucket series are capped at `max_buckets` (the largest by bytes): a store with a
hundred thousand buckets must not produce a scrape of a hundred thousand series. Totals
always cover every bucket.

With several worker processes only the leader runs a snapshot; its listeners
(`subscribe`) publish each new measure to the other workers
(`objstore.metrics.multiprocess`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from twisted.application import service
from twisted.internet.defer import Deferred

from objstore.meta.metrics_queries import BucketUsage
from objstore.timers import ReactorClock, safe_timer

MAX_BUCKET_SERIES = 1000
MAX_REFRESH_INTERVAL_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class StorageFigures:
    taken_at: float
    buckets: int
    objects: int
    stored_bytes: int
    per_bucket: tuple[BucketUsage, ...]


class StorageStore(Protocol):
    def storage_totals(self) -> Deferred[tuple[int, int, int]]: ...

    def usage_by_bucket(self, limit: int) -> Deferred[list[BucketUsage]]: ...


Listener = Callable[[StorageFigures], "Deferred[None] | None"]


class StorageSnapshot(service.MultiService):
    """Refreshes `current` every `interval_seconds` (at most every minute) and tells the
    listeners; a listener that fails is logged by the timer and retried at the next
    refresh."""

    def __init__(
        self,
        store: StorageStore,
        *,
        clock: ReactorClock,
        interval_seconds: float,
        max_buckets: int = MAX_BUCKET_SERIES,
    ) -> None:
        super().__init__()
        self._store = store
        self._clock = clock
        self._max_buckets = max_buckets
        self.current: StorageFigures | None = None
        self._listeners: list[Listener] = []
        interval = min(interval_seconds, MAX_REFRESH_INTERVAL_SECONDS)
        safe_timer(interval, self.refresh, clock=clock,
                   what="storage figures refresh").setServiceParent(self)

    async def refresh(self) -> StorageFigures:
        buckets, objects, stored = await self._store.storage_totals()
        largest = await self._store.usage_by_bucket(self._max_buckets)
        self.current = StorageFigures(self._clock.seconds(), buckets, objects, stored,
                                      tuple(largest))
        figures = self.current
        for listener in self._listeners:
            done = listener(figures)
            if done is not None:
                await done
        return figures

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)
