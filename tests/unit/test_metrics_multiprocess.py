"""The node's metrics with several worker processes, without a reactor: two workers are
simulated in this process by switching the identifier that names prometheus-client's value
files (and one test runs real subprocesses). Any worker's scrape shows the node's figures:
summed counters, the in-flight sum of the live workers, the leader's storage figures, the
pools and audit queues of every worker; the text passes promtool."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import values
from prometheus_client.parser import text_string_to_metric_families
from treq.testing import StubTreq
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from objstore.admin.metrics_routes import MetricsRoutes
from objstore.audit.log import AuditLog
from objstore.meta.metrics_queries import BucketUsage
from objstore.metrics import multiprocess
from objstore.metrics.collectors import AuditCollector, PoolCollector
from objstore.metrics.history import MetricsHistory
from objstore.metrics.registry import NodeMetrics, RequestTotals
from objstore.metrics.storage import StorageSnapshot

LEADER = os.getpid()  # a real process, so its process_* series exist
FOLLOWER = 4_194_400  # above any Linux pid_max: no /proc entry


class FakeStorageStore:
    def __init__(self) -> None:
        self.buckets: list[BucketUsage] = []

    def storage_totals(self) -> Deferred[tuple[int, int, int]]:
        return defer.succeed((len(self.buckets), sum(b.objects for b in self.buckets),
                              sum(b.stored_bytes for b in self.buckets)))

    def usage_by_bucket(self, limit: int) -> Deferred[list[BucketUsage]]:
        return defer.succeed(sorted(self.buckets, key=lambda b: -b.stored_bytes)[:limit])


class NoStore:
    def insert_audit_records(self, records: Any) -> Any:
        return defer.succeed(len(records))

    def purge_audit(self, before_ts: float, batch_size: int = 0) -> Any:
        return defer.succeed(0)


class Workers:
    """Worker processes simulated in this one: values go to the files of `acting`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.acting = LEADER

    @contextmanager
    def acting_as(self, pid: int) -> Iterator[None]:
        before, self.acting = self.acting, pid
        try:
            yield
        finally:
            self.acting = before

    def node(self, pid: int, **kwargs: Any) -> NodeMetrics:
        with self.acting_as(pid):
            return NodeMetrics(node_id="node-a", version="1.2.3", multiprocess_dir=self.path,
                               **kwargs)


@pytest.fixture
def workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workers]:
    path = str(tmp_path / "metrics")
    multiprocess.prepare_directory(path)
    found = Workers(path)
    # Undone at teardown: later tests get in-memory values again.
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)
    monkeypatch.setenv(multiprocess.ENVIRONMENT, path)
    multiprocess.enable(path, process_identifier=lambda: found.acting)
    yield found
    values.close_all_multiprocess_files()


def value(text: bytes, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def names(text: bytes) -> list[str]:
    return [family.name for family in text_string_to_metric_families(text.decode())]


def two_workers(workers: Workers) -> tuple[NodeMetrics, NodeMetrics]:
    leader, follower = workers.node(LEADER), workers.node(FOLLOWER)
    with workers.acting_as(LEADER):
        leader.requests.observe("GetObject", 200, "", 0.004, 0, 1000)
        leader.requests.observe("GetObject", 200, "", 0.2, 0, 24)
    with workers.acting_as(FOLLOWER):
        follower.requests.observe("GetObject", 200, "", 0.004, 0, 1000)
        follower.requests.observe("PutObject", 503, "SlowDown", 0.001, 10, 0)
        follower.requests.observe("PutObject", 403, "AccessDenied", 0.001, 5, 0)
    return leader, follower


def render(workers: Workers, pid: int, metrics: NodeMetrics) -> bytes:
    with workers.acting_as(pid):
        return metrics.render()


def test_any_worker_shows_the_summed_request_metrics(workers: Workers) -> None:
    leader, follower = two_workers(workers)
    for text in (render(workers, LEADER, leader), render(workers, FOLLOWER, follower)):
        assert value(text, "objstore_requests_total", operation="GetObject", status="200") == 3
        assert value(text, "objstore_requests_total", operation="PutObject", status="503") == 1
        assert value(text, "objstore_errors_total", code="SlowDown") == 1
        assert value(text, "objstore_sent_bytes_total", operation="GetObject") == 2024
        assert value(text, "objstore_received_bytes_total", operation="PutObject") == 15
        assert value(text, "objstore_request_duration_seconds_bucket", operation="GetObject",
                     le="0.005") == 2
        assert value(text, "objstore_request_duration_seconds_bucket", operation="GetObject",
                     le="+Inf") == 3
        assert value(text, "objstore_request_duration_seconds_count",
                     operation="GetObject") == 3


def test_totals_are_the_nodes(workers: Workers) -> None:
    leader, follower = two_workers(workers)
    expected = RequestTotals(requests=5, errors=2, server_errors=1, bytes_in=15,
                             bytes_out=2024)
    assert leader.totals() == follower.totals() == expected
    assert leader.requests.totals.requests == 2  # the process's own figures are kept
    read: list[RequestTotals] = []
    leader.read_totals().addCallback(read.append)
    assert read == [expected]


def test_history_samples_the_nodes_totals(workers: Workers) -> None:
    leader, _ = two_workers(workers)
    samples: list[Any] = []

    class Store:
        def insert_metrics_sample(self, sample: Any) -> Deferred[None]:
            samples.append(sample)
            return defer.succeed(None)

        def purge_metrics_history(self, before_ts: float) -> Deferred[int]:
            return defer.succeed(0)

    clock = Clock()
    history = MetricsHistory(Store(), totals=leader.read_totals, storage=lambda: None,
                             node_id="node-a", clock=clock, interval_seconds=60,
                             retention_hours=1)
    history.startService()
    follower = workers.node(FOLLOWER)
    with workers.acting_as(FOLLOWER):
        follower.requests.observe("HeadObject", 500, "InternalError", 0.001, 0, 0)
    clock.advance(60)
    assert [(s.requests, s.server_errors) for s in samples] == [(1, 1)]
    history.stopService()


def test_in_flight_is_the_sum_of_the_live_workers(workers: Workers) -> None:
    leader, follower = two_workers(workers)
    with workers.acting_as(LEADER):
        leader.requests.in_flight += 1
        leader.requests.in_flight += 1
    with workers.acting_as(FOLLOWER):
        follower.requests.in_flight += 1
    assert value(render(workers, FOLLOWER, follower), "objstore_requests_in_flight") == 3
    with workers.acting_as(LEADER):
        leader.requests.in_flight -= 1
    assert value(render(workers, FOLLOWER, follower), "objstore_requests_in_flight") == 2
    assert multiprocess.live_pids(workers.path) == sorted([LEADER, FOLLOWER])

    multiprocess.worker_exited(workers.path, FOLLOWER)
    text = render(workers, LEADER, leader)
    assert value(text, "objstore_requests_in_flight") == 1
    # A dead worker's counters stay: node totals never go back.
    assert value(text, "objstore_requests_total", operation="PutObject", status="503") == 1
    assert leader.totals().requests == 5
    assert multiprocess.live_pids(workers.path) == [LEADER]


def test_a_non_leader_shows_the_leaders_storage_figures(workers: Workers) -> None:
    store = FakeStorageStore()
    store.buckets = [BucketUsage("big", 4, 500), BucketUsage("gone", 1, 100)]
    clock = Clock()
    clock.advance(1_700_000_000.0)
    leader, follower = workers.node(LEADER), workers.node(FOLLOWER)
    snapshot = StorageSnapshot(store, clock=clock, interval_seconds=60)
    leader.add_storage(snapshot)
    # Every worker builds a snapshot; only the leader's runs.
    follower.add_storage(StorageSnapshot(store, clock=clock, interval_seconds=60))
    assert "objstore_buckets" not in names(render(workers, FOLLOWER, follower))

    with workers.acting_as(LEADER):
        snapshot.startService()  # the first refresh, published at once
    text = render(workers, FOLLOWER, follower)
    assert value(text, "objstore_buckets") == 2
    assert value(text, "objstore_stored_bytes") == 600
    assert value(text, "objstore_bucket_objects", bucket="big") == 4
    assert value(text, "objstore_bucket_stored_bytes", bucket="gone") == 100
    assert value(text, "objstore_storage_snapshot_timestamp_seconds") == 1_700_000_000.0

    store.buckets.pop()
    with workers.acting_as(LEADER):
        clock.advance(60)
    text = render(workers, FOLLOWER, follower)
    assert value(text, "objstore_bucket_stored_bytes", bucket="gone") is None
    assert value(text, "objstore_stored_bytes") == 500
    assert render(workers, LEADER, leader).count(b"\nobjstore_buckets ") == 1
    snapshot.stopService()


def pools(busy: int) -> PoolCollector:
    return PoolCollector({
        "db": lambda: {"write_threads": 1, "write_busy": busy, "write_queued": 0,
                       "read_threads": 4, "read_busy": 0, "read_queued": busy},
        "io": lambda: {"threads": 8, "busy": busy, "queued": 0},
    })


def test_pools_and_audit_queues_are_summed_over_the_workers(workers: Workers) -> None:
    audit = AuditLog(NoStore(), node_id="node-a", clock=Clock(), capacity=1)
    clock = Clock()
    leader = workers.node(LEADER, clock=clock)
    follower = workers.node(FOLLOWER)
    leader.add(pools(busy=2))
    leader.add(AuditCollector(audit))
    follower.add(pools(busy=1))
    follower.add(AuditCollector(AuditLog(NoStore(), node_id="node-a", clock=Clock(),
                                         capacity=5)))
    with workers.acting_as(LEADER):
        leader.service.startService()  # publishes now, then every second
        audit.record("Op")
        audit.record("Op")  # the first one is dropped
    text = render(workers, FOLLOWER, follower)
    assert value(text, "objstore_pool_threads", pool="db-write") == 2
    assert value(text, "objstore_pool_busy_threads", pool="io") == 3
    assert value(text, "objstore_pool_queued_tasks", pool="db-read") == 3
    assert value(text, "objstore_audit_queue_capacity") == 6
    assert value(text, "objstore_audit_queue_depth") == 0  # published before the records
    assert value(text, "objstore_audit_dropped_records_total") == 0
    with workers.acting_as(LEADER):
        clock.advance(1)
    for text in (render(workers, FOLLOWER, follower), render(workers, LEADER, leader)):
        assert value(text, "objstore_audit_queue_depth") == 1
        assert value(text, "objstore_audit_dropped_records_total") == 1
        assert value(text, "objstore_pool_busy_threads", pool="io") == 3
    with workers.acting_as(LEADER):
        leader.service.stopService()
    assert not clock.getDelayedCalls()


def test_the_text_is_one_nodes_and_passes_promtool(workers: Workers) -> None:
    leader, follower = two_workers(workers)
    follower.add(pools(busy=1))
    text = render(workers, FOLLOWER, follower)
    found = names(text)
    assert len(found) == len(set(found))
    assert value(text, "objstore_build_info", version="1.2.3", node_id="node-a") == 1
    assert "python_info" in found
    assert "python_gc_objects_collected" not in found  # per process: left out
    assert value(text, "process_resident_memory_bytes", pid=str(LEADER))
    assert value(text, "process_resident_memory_bytes", pid=str(FOLLOWER)) is None
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed")
    checked = subprocess.run(["promtool", "check", "metrics"], input=text,
                             capture_output=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_fresh_worker_shows_the_families_a_single_process_shows(workers: Workers) -> None:
    audit = AuditLog(NoStore(), node_id="node-a", clock=Clock())
    # Only its family names are read: it observes nothing, so its values (in the leader's
    # files too, multiprocess being enabled here) stay at 0.
    single = NodeMetrics(node_id="node-a", version="1.2.3", multiprocess_dir=None)
    several = workers.node(LEADER)
    for metrics in (single, several):
        metrics.add(pools(busy=0))
        metrics.add(AuditCollector(audit))
    expected = set(names(single.render())) - {"python_gc_objects_collected",
                                              "python_gc_objects_uncollectable",
                                              "python_gc_collections"}
    text = render(workers, LEADER, several)
    assert set(names(text)) == expected
    assert value(text, "objstore_audit_dropped_records_total") == 0


def test_scrape_reads_the_files_on_the_thread_pool(workers: Workers) -> None:
    ran: list[str] = []

    class Threads:
        def run(self, fn: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
            ran.append(fn.__name__)
            return defer.maybeDeferred(fn, *args, **kwargs)

    metrics = workers.node(LEADER, threads=Threads())
    with workers.acting_as(LEADER):
        metrics.requests.observe("GetObject", 200, "", 0.004, 0, 1)
    routes = MetricsRoutes(gate=None, meta=None, render=metrics.scrape,  # type: ignore[arg-type]
                           node_id="node-a")
    client = StubTreq(routes.resource())
    responses: list[Any] = []
    client.get("http://objstore.test/metrics").addCallback(responses.append)
    bodies: list[bytes] = []
    client.content(responses[0]).addCallback(bodies.append)
    assert responses[0].code == 200
    assert value(bodies[0], "objstore_requests_total", operation="GetObject") == 1
    assert ran == ["_shared_families"]


def test_prepare_directory_clears_a_previous_run(tmp_path: Path) -> None:
    path = tmp_path / "metrics"
    multiprocess.prepare_directory(str(path))
    (path / "counter_12.db").write_bytes(b"old")
    (path / "gauge_livesum_12.db").write_bytes(b"old")
    (path / multiprocess.STORAGE_FILE).write_text("{}")
    (path / "keep.txt").write_text("x")
    multiprocess.prepare_directory(str(path))
    assert sorted(os.listdir(path)) == ["keep.txt"]


WORKER = """
import sys
from objstore.metrics import multiprocess
from objstore.metrics.registry import NodeMetrics
multiprocess.enable(sys.argv[1])
metrics = NodeMetrics(node_id="n", version="v", multiprocess_dir=sys.argv[1])
metrics.requests.observe("GetObject", 200, "", 0.01, 0, 7)
metrics.requests.in_flight += 1
"""


def test_real_worker_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "metrics")
    multiprocess.prepare_directory(path)
    pids = []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", WORKER, path])
        assert child.wait(timeout=60) == 0
        pids.append(child.pid)
    assert multiprocess.live_pids(path) == sorted(pids)  # exited, not yet reported dead
    multiprocess.worker_exited(path, pids[0])

    def sample(name: str) -> float:
        families = multiprocess.merged_families(path)
        return sum(s.value for f in families for s in f.samples if s.name == name)

    assert sample("objstore_requests_total") == 2
    assert sample("objstore_sent_bytes_total") == 14
    assert sample("objstore_requests_in_flight") == 1


def test_storage_file_round_trip_and_damage(tmp_path: Path) -> None:
    from objstore.metrics.storage import StorageFigures

    figures = StorageFigures(1.5, 2, 3, 4, (BucketUsage("b", 3, 4),))
    multiprocess.write_storage(str(tmp_path), figures)
    assert multiprocess.read_storage(str(tmp_path)) == figures
    assert os.listdir(tmp_path) == [multiprocess.STORAGE_FILE]
    (tmp_path / multiprocess.STORAGE_FILE).write_text(json.dumps({"buckets": 1}))
    assert multiprocess.read_storage(str(tmp_path)) is None
    assert multiprocess.read_storage(str(tmp_path / "missing")) is None


def test_a_starting_workers_empty_file_does_not_break_a_scrape(workers: Workers) -> None:
    leader, _ = two_workers(workers)
    assert leader.multiprocess_dir is not None
    # What a worker that is starting has made so far: its file, not yet sized.
    Path(leader.multiprocess_dir, "counter_999999.db").touch()
    text = render(workers, LEADER, leader)
    assert value(text, "objstore_requests_total", operation="GetObject", status="200") == 3
