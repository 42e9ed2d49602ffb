"""The node's registry and its scrape-time collectors: the text parses (and passes
`promtool check metrics` when promtool is installed), counters move, per-bucket series are
capped, nothing lands in prometheus-client's global registry."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from objstore.audit.log import AuditLog
from objstore.meta.metrics_queries import BucketUsage
from objstore.metrics.collectors import AuditCollector, PoolCollector, StorageCollector
from objstore.metrics.registry import NodeMetrics
from objstore.metrics.storage import StorageFigures, StorageSnapshot


class FakeStorageStore:
    def __init__(self) -> None:
        self.buckets: list[BucketUsage] = []
        self.calls: list[int] = []

    def storage_totals(self) -> Deferred[tuple[int, int, int]]:
        return defer.succeed((len(self.buckets) + 1, sum(b.objects for b in self.buckets),
                              sum(b.stored_bytes for b in self.buckets)))

    def usage_by_bucket(self, limit: int) -> Deferred[list[BucketUsage]]:
        self.calls.append(limit)
        return defer.succeed(sorted(self.buckets, key=lambda b: -b.stored_bytes)[:limit])


class NoStore:
    def insert_audit_records(self, records: Any) -> Any:
        return defer.succeed(len(records))

    def purge_audit(self, before_ts: float, batch_size: int = 0) -> Any:
        return defer.succeed(0)


def families(text: bytes) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def value(text: bytes, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def full_node() -> tuple[NodeMetrics, StorageFigures]:
    metrics = NodeMetrics(node_id="node-a", version="1.2.3")
    figures = StorageFigures(
        taken_at=1_700_000_000.0, buckets=3, objects=5, stored_bytes=600,
        per_bucket=(BucketUsage("big", 4, 500), BucketUsage("small", 1, 100)),
    )
    metrics.add(StorageCollector(lambda: figures))
    metrics.add(PoolCollector({
        "db": lambda: {"write_threads": 1, "write_busy": 1, "write_queued": 4,
                       "read_threads": 4, "read_busy": 0, "read_queued": 0},
        "io": lambda: {"threads": 8, "busy": 2, "queued": 3},
    }))
    clock = Clock()
    audit = AuditLog(NoStore(), node_id="node-a", clock=clock, capacity=1)
    audit.record("Op")
    audit.record("Op")  # the first one is dropped
    metrics.add(AuditCollector(audit))
    metrics.requests.observe("GetObject", 200, "", 0.004, 0, 1024)
    metrics.requests.observe("PutObject", 403, "AccessDenied", 0.002, 10, 0)
    metrics.requests.observe("PutObject", 503, "SlowDown", 0.001, 0, 0)
    return metrics, figures


def test_render_covers_every_family() -> None:
    metrics, _ = full_node()
    text = metrics.render()
    found = families(text)
    for name in ("objstore_requests", "objstore_request_duration_seconds",
                 "objstore_received_bytes", "objstore_sent_bytes", "objstore_errors",
                 "objstore_requests_in_flight", "objstore_buckets", "objstore_objects",
                 "objstore_stored_bytes", "objstore_bucket_objects", "objstore_bucket_stored_bytes",
                 "objstore_pool_threads", "objstore_pool_busy_threads",
                 "objstore_pool_queued_tasks", "objstore_audit_queue_depth",
                 "objstore_audit_dropped_records", "objstore_build_info",
                 "process_resident_memory_bytes", "python_info"):
        assert name in found, name
    assert value(text, "objstore_requests_total", operation="PutObject", status="403") == 1
    assert value(text, "objstore_errors_total", code="SlowDown") == 1
    assert value(text, "objstore_sent_bytes_total", operation="GetObject") == 1024
    assert value(text, "objstore_request_duration_seconds_bucket", operation="GetObject",
                 le="0.005") == 1
    assert value(text, "objstore_bucket_stored_bytes", bucket="big") == 500
    assert value(text, "objstore_pool_queued_tasks", pool="db-write") == 4
    assert value(text, "objstore_pool_busy_threads", pool="io") == 2
    assert value(text, "objstore_audit_queue_depth") == 1
    assert value(text, "objstore_audit_dropped_records_total") == 1
    assert value(text, "objstore_build_info", version="1.2.3", node_id="node-a") == 1
    totals = metrics.requests.totals
    assert (totals.requests, totals.errors, totals.server_errors) == (3, 2, 1)
    assert (totals.bytes_in, totals.bytes_out) == (10, 1024)


def test_registry_is_the_nodes_own() -> None:
    first, _ = full_node()
    second = NodeMetrics(node_id="node-b", version="1.2.3")
    assert value(second.render(), "objstore_requests_total", operation="GetObject",
                 status="200") is None
    assert REGISTRY.get_sample_value("objstore_requests_total",
                                     {"operation": "GetObject", "status": "200"}) is None
    assert first.registry is not second.registry


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_text() -> None:
    metrics, _ = full_node()
    checked = subprocess.run(["promtool", "check", "metrics"], input=metrics.render(),
                             capture_output=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_storage_figures_absent_until_measured() -> None:
    metrics = NodeMetrics(node_id="n", version="v")
    metrics.add(StorageCollector(lambda: None))
    assert "objstore_buckets" not in families(metrics.render())


def test_storage_snapshot_refreshes_by_timer_and_caps_buckets() -> None:
    store = FakeStorageStore()
    store.buckets = [BucketUsage(f"b{i}", 1, i) for i in range(10)]
    clock = Clock()
    snapshot = StorageSnapshot(store, clock=clock, interval_seconds=600, max_buckets=3)
    assert snapshot.current is None
    snapshot.startService()
    current = snapshot.current
    assert current is not None
    assert [b.bucket for b in current.per_bucket] == ["b9", "b8", "b7"]
    assert (current.buckets, current.objects, current.stored_bytes) == (11, 10, 45)
    store.buckets.append(BucketUsage("new", 2, 1000))
    clock.advance(60)  # refreshed at least every minute, whatever the history interval
    assert snapshot.current is not None and snapshot.current.per_bucket[0].bucket == "new"
    assert store.calls == [3, 3]
    snapshot.stopService()
    assert not clock.getDelayedCalls()


def test_single_process_in_flight_totals_and_scrape() -> None:
    metrics, _ = full_node()
    metrics.requests.in_flight += 2
    metrics.requests.in_flight -= 1
    assert value(metrics.render(), "objstore_requests_in_flight") == 1
    assert metrics.totals() == metrics.requests.totals
    assert metrics.totals() is not metrics.requests.totals
    scraped: list[bytes] = []
    metrics.scrape().addCallback(scraped.append)
    assert value(scraped[0], "objstore_requests_total", operation="GetObject",
                 status="200") == 1
    assert metrics.publish_storage(StorageFigures(0.0, 0, 0, 0, ())).called
