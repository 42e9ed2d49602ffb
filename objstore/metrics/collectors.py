"""Scrape-time collectors: figures already held in memory, turned into metric families when
Prometheus scrapes. None of them queries the database or touches a file.

* `StorageCollector`: buckets, object versions and stored bytes, in total and for the
  largest buckets, from the snapshot a timer refreshes (`metrics.storage`).
* `PoolCollector`: busy and queued work of the DB writer/reader pools and the IO pool.
* `AuditCollector`: depth, capacity, drops and failed writes of the audit queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from objstore.metrics.storage import StorageFigures

PoolStats = Callable[[], Mapping[str, int]]


class StorageCollector(Collector):
    def __init__(self, figures: Callable[[], StorageFigures | None]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self._figures()
        if figures is None:  # not measured yet
            return
        yield _gauge("objstore_buckets", "Buckets.", figures.buckets)
        yield _gauge("objstore_objects",
                     "Object versions stored (delete markers not counted).", figures.objects)
        yield _gauge("objstore_stored_bytes", "Bytes of all object versions stored.",
                     figures.stored_bytes)
        yield _gauge("objstore_storage_snapshot_timestamp_seconds",
                     "When the storage figures were measured (Unix time).", figures.taken_at)
        objects = GaugeMetricFamily(
            "objstore_bucket_objects",
            "Object versions stored per bucket (the largest buckets only).", labels=["bucket"])
        stored = GaugeMetricFamily(
            "objstore_bucket_stored_bytes",
            "Bytes stored per bucket (the largest buckets only).", labels=["bucket"])
        for usage in figures.per_bucket:
            objects.add_metric([usage.bucket], usage.objects)
            stored.add_metric([usage.bucket], usage.stored_bytes)
        yield objects
        yield stored


class PoolCollector(Collector):
    """`pools` maps a pool name to its `stats()`. DB pools report write_*/read_* keys
    (threads, busy, queued), the IO pool max/workers/queued."""

    def __init__(self, pools: Mapping[str, PoolStats]) -> None:
        self._pools = pools

    def collect(self) -> Iterator[Metric]:
        threads = GaugeMetricFamily("objstore_pool_threads", "Threads a pool may run.",
                                    labels=["pool"])
        busy = GaugeMetricFamily("objstore_pool_busy_threads", "Threads of a pool at work.",
                                 labels=["pool"])
        queued = GaugeMetricFamily("objstore_pool_queued_tasks",
                                   "Tasks waiting for a thread of a pool.", labels=["pool"])
        for name, stats in self._pools.items():
            for pool, figures in _pool_figures(name, stats()):
                threads.add_metric([pool], figures[0])
                busy.add_metric([pool], figures[1])
                queued.add_metric([pool], figures[2])
        yield threads
        yield busy
        yield queued


def _pool_figures(name: str, stats: Mapping[str, int]) -> list[tuple[str, tuple[int, ...]]]:
    keys = ("threads", "busy", "queued")
    if "threads" in stats:  # one NamedPool
        return [(name, tuple(stats.get(key, 0) for key in keys))]
    return [
        (f"{name}-{side}", tuple(stats.get(f"{side}_{key}", 0) for key in keys))
        for side in ("write", "read")
    ]


class AuditQueueFigures(Protocol):
    """What the collector reads of the audit queue (`audit.queue.BoundedQueue`)."""

    capacity: int
    dropped: int


class AuditFigures(Protocol):
    """What the collector reads of the audit log (`audit.log.AuditLog`); metrics never
    import the audit package."""

    @property
    def depth(self) -> int: ...

    @property
    def queue(self) -> AuditQueueFigures: ...

    failed_writes: int


class AuditCollector(Collector):
    def __init__(self, audit: AuditFigures) -> None:
        self._audit = audit

    def collect(self) -> Iterator[Metric]:
        audit = self._audit
        yield _gauge("objstore_audit_queue_depth", "Audit records waiting to be written.",
                     audit.depth)
        yield _gauge("objstore_audit_queue_capacity", "Audit records the queue holds at most.",
                     audit.queue.capacity)
        dropped = CounterMetricFamily(
            "objstore_audit_dropped_records",
            "Audit records lost: queue full (oldest dropped) or a batch that kept failing.")
        dropped.add_metric([], audit.queue.dropped)
        yield dropped
        failed = CounterMetricFamily("objstore_audit_failed_writes",
                                     "Attempts to write a batch of audit records that failed.")
        failed.add_metric([], audit.failed_writes)
        yield failed


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
