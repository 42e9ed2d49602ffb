"""The node's Prometheus registry and the request metrics fed by every finished request.

`NodeMetrics` owns a `CollectorRegistry` of its own (never prometheus-client's global
default registry, so two nodes in one test process, or a library that registers into the
default one, cannot mix their series) with the request metrics, the process, platform and
GC collectors, and whatever scrape-time collectors the composition root adds (storage
snapshot, pool saturation, audit queue). `render()` produces the text exposition format
0.0.4 that `promtool check metrics` accepts.

Scrape-time collectors only read figures already in memory; a scrape never queries the
database. The process collector reads /proc/self (kernel memory, not disk), so rendering
stays on the reactor: it costs well under a millisecond per thousand series. One process
serves requests today; several worker processes would need prometheus-client's
multiprocess mode (TWISTED-NOTES c).
"""

from __future__ import annotations

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
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Seconds: small-object requests sit in the first buckets, multi-GB uploads in the last.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0)


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
    """Counters and the latency histogram of S3 and admin requests.

    `observe` runs once per request on the reactor, so the labelled children are looked up
    once and then kept in plain dicts (`labels()` takes a lock and validates every call);
    label values come from bounded sets (operation names, status codes, error codes)."""

    def __init__(self, registry: CollectorRegistry) -> None:
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
        in_flight = Gauge(
            "objstore_requests_in_flight", "Requests received and not yet answered.",
            registry=registry)
        in_flight.set_function(lambda: self.in_flight)
        self.in_flight = 0
        self.totals = RequestTotals()
        self._children: dict[tuple[str, ...], Any] = {}

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


class NodeMetrics:
    def __init__(self, *, node_id: str, version: str) -> None:
        self.registry = CollectorRegistry()
        self.requests = RequestMetrics(self.registry)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        build = Gauge("objstore_build_info", "Version and node id of this server (always 1).",
                      ["version", "node_id"], registry=self.registry)
        build.labels(version, node_id).set(1)

    def add(self, collector: Collector) -> None:
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
