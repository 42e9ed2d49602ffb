"""The node's Prometheus registry and the request metrics fed by every finished request.

`NodeMetrics` owns a `CollectorRegistry` of its own (never prometheus-client's global
default registry, so two nodes in one test process, or a library that registers into the
default one, cannot mix their series) with the request metrics, the process, platform and
GC collectors, the build info, and whatever scrape-time collectors the composition root
adds (storage snapshot, pool saturation, audit queue). `render()` and `scrape()` produce
the text exposition format 0.0.4 that `promtool check metrics` accepts.

Scrape-time collectors only read figures already in memory; a scrape never queries the
database. In a single process the process collector reads /proc/self (kernel memory, not
disk), so rendering stays on the reactor: well under a millisecond per thousand series.

With several worker processes (`multiprocess_dir`) the request metrics are
prometheus-client multiprocess metrics and a scrape merges every worker's files, so any
worker answers with the node's figures (what is summed and how: the docstring of
`objstore.metrics.multiprocess`). The merge reads files whose size grows with the workers
that ever ran, so `scrape()` and `read_totals()` do it on a thread pool. The GC collector
is left out there (per process, and no other process can read it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from twisted.application import service
from twisted.internet import defer
from twisted.internet.defer import Deferred

from objstore.metrics import multiprocess
from objstore.metrics.collectors import StorageCollector
from objstore.metrics.storage import StorageFigures, StorageSnapshot
from objstore.threads import InlinePool, Runner
from objstore.timers import ReactorClock, safe_timer

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Seconds: small-object requests sit in the first buckets, multi-GB uploads in the last.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0)
# How stale another worker's pool and audit-queue figures may be in a scrape.
PUBLISH_INTERVAL_SECONDS = 1.0


@dataclass(slots=True)
class RequestTotals:
    """Plain running totals since start, read by the metrics history."""

    requests: int = 0
    errors: int = 0  # status >= 400
    server_errors: int = 0  # status >= 500
    bytes_in: int = 0
    bytes_out: int = 0

    def copy(self) -> RequestTotals:
        return RequestTotals(self.requests, self.errors, self.server_errors, self.bytes_in,
                             self.bytes_out)


class RequestMetrics:
    """Counters and the latency histogram of S3 and admin requests, and the in-flight gauge.

    `observe` runs once per request on the reactor, so the labelled children are looked up
    once and then kept in plain dicts (`labels()` takes a lock and validates every call);
    label values come from bounded sets (operation names, status codes, error codes).
    `registry` is None in multiprocess mode: the values go to this process's files and a
    scrape reads them from there. `in_flight` is this process's count; its gauge is summed
    over the live workers (`livesum`)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.requests = Counter(
            "objstore_requests", "Requests answered, by operation and HTTP status.",
            ["operation", "status"], registry=registry)
        self.duration = Histogram(
            "objstore_request_duration_seconds",
            "Time from complete request headers to the end of the response, by operation.",
            ["operation"], buckets=LATENCY_BUCKETS, registry=registry)
        self.received = Counter(
            "objstore_received_bytes", "Request body bytes received, by operation.",
            ["operation"], registry=registry)
        self.sent = Counter(
            "objstore_sent_bytes", "Response body bytes sent, by operation.",
            ["operation"], registry=registry)
        self.errors = Counter(
            "objstore_errors", "Error responses, by S3 or admin error code.",
            ["code"], registry=registry)
        self._in_flight_gauge = Gauge(
            "objstore_requests_in_flight", "Requests received and not yet answered.",
            registry=registry, multiprocess_mode="livesum")
        self._in_flight = 0
        self.totals = RequestTotals()  # this process's
        self._children: dict[tuple[str, ...], Any] = {}

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @in_flight.setter
    def in_flight(self, count: int) -> None:
        self._in_flight = count
        self._in_flight_gauge.set(count)

    def declared(self) -> list[Metric]:
        """The families, without samples (a multiprocess render shows a family no worker
        has a value of yet, as a single process does)."""
        metrics = (self.requests, self.duration, self.received, self.sent, self.errors,
                   self._in_flight_gauge)
        return [family for metric in metrics for family in metric.describe()]

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(
        self, operation: str, status: int, error_code: str, duration_seconds: float,
        bytes_in: int, bytes_out: int,
    ) -> None:
        self._child(self.requests, operation, str(status)).inc()
        self._child(self.duration, operation).observe(duration_seconds)
        if bytes_in:
            self._child(self.received, operation).inc(bytes_in)
        if bytes_out:
            self._child(self.sent, operation).inc(bytes_out)
        if error_code:
            self._child(self.errors, error_code).inc()
        totals = self.totals
        totals.requests += 1
        totals.bytes_in += bytes_in
        totals.bytes_out += bytes_out
        if status >= 400:
            totals.errors += 1
        if status >= 500:
            totals.server_errors += 1


class BuildInfo(Collector):
    """`objstore_build_info`: a plain family, never a multiprocess gauge, so it appears
    once whichever worker renders it."""

    def __init__(self, version: str, node_id: str) -> None:
        self._labels = [version, node_id]

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("objstore_build_info",
                                 "Version and node id of this server (always 1).",
                                 labels=["version", "node_id"])
        info.add_metric(self._labels, 1)
        yield info


class NodeMetrics:
    """The node's metrics. With `multiprocess_dir` (a worker of a supervised node) the
    request metrics live in multiprocess files there and every render merges all workers'
    files (`objstore.metrics.multiprocess`); `threads` runs that file reading off the reactor
    (`scrape`, `read_totals`, storage publishing) and `clock` drives `service`, the timer
    that publishes this process's in-memory collectors for the other workers. Without a
    directory everything stays in this process's memory, as for a single-process node."""

    def __init__(
        self,
        *,
        node_id: str,
        version: str,
        multiprocess_dir: str | None = None,
        threads: Runner | None = None,
        clock: ReactorClock | None = None,
        publish_interval_seconds: float = PUBLISH_INTERVAL_SECONDS,
        bucket_labels: bool = True,
    ) -> None:
        """`bucket_labels` false leaves out the per-bucket storage families."""
        self.registry = CollectorRegistry()
        self._bucket_labels = bucket_labels
        self.multiprocess_dir = multiprocess_dir
        self.service = service.MultiService()  # nothing to run for a single process
        self._threads: Runner = threads if threads is not None else InlinePool()
        self._published = multiprocess.PublishedCollectors()
        self._storage_shared = False
        self._declared: list[Metric] = []
        if multiprocess_dir is None:
            self.requests = RequestMetrics(self.registry)
            ProcessCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        else:
            if not multiprocess.enabled(multiprocess_dir):
                multiprocess.enable(multiprocess_dir)
            self.requests = RequestMetrics(None)
            self._declared = self.requests.declared()
            if clock is not None:
                safe_timer(publish_interval_seconds, self._publish_tick, clock=clock,
                           what="metrics publishing").setServiceParent(self.service)
        PlatformCollector(registry=self.registry)
        self.registry.register(BuildInfo(version, node_id))

    def add(self, collector: Collector) -> None:
        """A scrape-time collector of figures held in this process's memory (gauges and
        counters only in multiprocess mode, where they are summed over the workers)."""
        if self.multiprocess_dir is None:
            self.registry.register(collector)
        else:
            self._published.add(collector)

    def add_storage(self, snapshot: StorageSnapshot) -> None:
        """Show the storage figures of `snapshot`. In multiprocess mode every worker shows
        the figures the leader (the one process whose snapshot runs) last measured."""
        if self.multiprocess_dir is None:
            self.registry.register(StorageCollector(lambda: snapshot.current,
                                                   per_bucket=self._bucket_labels))
        else:
            snapshot.subscribe(self.publish_storage)
            self._storage_shared = True

    def publish_storage(self, figures: StorageFigures) -> Deferred[None]:
        if self.multiprocess_dir is None:
            return defer.succeed(None)
        return self._threads.run(multiprocess.write_storage, self.multiprocess_dir, figures)

    async def _publish_tick(self) -> None:
        self._published.publish()

    def render(self) -> bytes:
        """The text exposition; in multiprocess mode it reads files on the calling thread
        (`scrape` does not)."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        return _text(self._local_families() + self._shared_families())

    def scrape(self) -> Deferred[bytes]:
        """The text exposition, the workers' files read on `threads`."""
        if self.multiprocess_dir is None:
            return defer.succeed(self.render())
        local = self._local_families()
        shared = self._threads.run(self._shared_families)
        return shared.addCallback(lambda families: _text(local + families))

    def _local_families(self) -> list[Metric]:
        self._published.publish()  # this process's figures as fresh as can be
        return list(self.registry.collect())

    def _shared_families(self) -> list[Metric]:
        path = self.multiprocess_dir
        assert path is not None
        families = multiprocess.merged_families(path)
        found = {family.name for family in families}
        families += [empty for empty in self._declared if empty.name not in found]
        if self._storage_shared:
            figures = multiprocess.read_storage(path)
            families += StorageCollector(lambda: figures,
                                         per_bucket=self._bucket_labels).collect()
        families += multiprocess.process_families(multiprocess.live_pids(path))
        return families

    def totals(self) -> RequestTotals:
        """Running totals of the node: every worker's since the node started (blocking
        file reads in multiprocess mode: `read_totals` runs it on `threads`)."""
        if self.multiprocess_dir is None:
            return self.requests.totals.copy()
        return totals_of(multiprocess.merged_families(self.multiprocess_dir,
                                                      kinds=("counter",)))

    def read_totals(self) -> Deferred[RequestTotals]:
        if self.multiprocess_dir is None:
            return defer.succeed(self.totals())
        return self._threads.run(self.totals)


def totals_of(families: Iterable[Metric]) -> RequestTotals:
    """RequestTotals from merged request counters."""
    totals = RequestTotals()
    for family in families:
        for sample in family.samples:
            if sample.name == "objstore_requests_total":
                count = int(sample.value)
                status = int(sample.labels.get("status", "0"))
                totals.requests += count
                if status >= 400:
                    totals.errors += count
                if status >= 500:
                    totals.server_errors += count
            elif sample.name == "objstore_received_bytes_total":
                totals.bytes_in += int(sample.value)
            elif sample.name == "objstore_sent_bytes_total":
                totals.bytes_out += int(sample.value)
    return totals


def _text(families: list[Metric]) -> bytes:
    return generate_latest(multiprocess.StaticFamilies(families))
