"""The metrics history: every `[metrics] history_interval_seconds` a sample of the request
figures of the interval just ended (requests, error responses, bytes in and out) and of the
storage figures (buckets, object versions, bytes stored) goes to the `metrics_history`
table; samples older than `[metrics] history_retention_hours` are purged on the same tick.

Request figures are differences of the running totals between two ticks, so a sample says
what happened in its interval and a restart leaves no negative step. The first tick only
takes the starting point. The timer cannot die (`objstore.timers`). With several worker
processes the leader alone runs it, over the node's totals (`NodeMetrics.read_totals`,
which reads every worker's counters off the reactor).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from twisted.application import service
from twisted.internet.defer import Deferred

from objstore.meta.metrics_queries import MetricsSample
from objstore.metrics.registry import RequestTotals
from objstore.metrics.storage import StorageFigures
from objstore.timers import ReactorClock, safe_timer

SECONDS_PER_HOUR = 3600.0


class HistoryStore(Protocol):
    def insert_metrics_sample(self, sample: MetricsSample) -> Deferred[None]: ...

    def purge_metrics_history(self, before_ts: float) -> Deferred[int]: ...


class MetricsHistory(service.MultiService):
    def __init__(
        self,
        store: HistoryStore,
        *,
        totals: Callable[[], RequestTotals | Awaitable[RequestTotals]],
        storage: Callable[[], StorageFigures | None],
        node_id: str,
        clock: ReactorClock,
        interval_seconds: float,
        retention_hours: float,
    ) -> None:
        super().__init__()
        self._store = store
        self._totals = totals
        self._storage = storage
        self._node_id = node_id
        self._clock = clock
        self._retention_seconds = retention_hours * SECONDS_PER_HOUR
        self._last: tuple[float, RequestTotals] | None = None
        safe_timer(interval_seconds, self.tick, clock=clock,
                   what="metrics history").setServiceParent(self)

    async def tick(self) -> MetricsSample | None:
        now = self._clock.seconds()
        read = self._totals()
        totals = (read if isinstance(read, RequestTotals) else await read).copy()
        last, self._last = self._last, (now, totals)
        if last is None:
            return None
        sample = make_sample(self._node_id, now, now - last[0], last[1], totals,
                             self._storage())
        await self._store.insert_metrics_sample(sample)
        await self._store.purge_metrics_history(now - self._retention_seconds)
        return sample


def make_sample(
    node_id: str,
    now: float,
    interval_seconds: float,
    before: RequestTotals,
    after: RequestTotals,
    storage: StorageFigures | None,
) -> MetricsSample:
    return MetricsSample(
        ts=now,
        node_id=node_id,
        interval_seconds=interval_seconds,
        requests=after.requests - before.requests,
        errors=after.errors - before.errors,
        server_errors=after.server_errors - before.server_errors,
        bytes_in=after.bytes_in - before.bytes_in,
        bytes_out=after.bytes_out - before.bytes_out,
        buckets=storage.buckets if storage else 0,
        objects=storage.objects if storage else 0,
        stored_bytes=storage.stored_bytes if storage else 0,
    )
