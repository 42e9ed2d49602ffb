"""Metrics end to end: GET /admin/metrics answers without credentials in the Prometheus text
format (checked by `promtool check metrics` when installed, by prometheus_client's parser
always), counters move with real S3 traffic, storage gauges follow the data, scrapes are
never rate-limited, and GET /admin/metrics/history fills up with samples."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import Daemon

WAIT_SECONDS = 15.0
HTTP = urllib3.PoolManager(retries=False, timeout=10.0)


@pytest.fixture(scope="module", params=[(backend, workers) for backend in BACKENDS
                                        for workers in (1, 2)],
                ids=lambda p: f"{p[0]}-{p[1]}w")
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Daemon]:
    """Each backend with one process and with two workers, whose scrapes merge the
    figures of both (any worker may serve any request or scrape)."""
    backend, workers = request.param
    daemon = Daemon(tmp_path_factory.mktemp(f"metrics-{backend}-{workers}"), backend=backend,
                    workers=workers, extra_config="[metrics]\nhistory_interval_seconds = 1\n")
    with running_daemon(request, daemon):
        yield daemon


@pytest.fixture
def s3(node: Daemon) -> Any:
    return make_client(node.endpoint)


def scrape(node: Daemon) -> str:
    response = HTTP.request("GET", f"{node.endpoint}/admin/metrics")  # no credentials
    assert response.status == 200, response.data
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return str(response.data.decode())


def value(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


def test_scrape_is_valid_prometheus_text(node: Daemon) -> None:
    text = scrape(node)
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"objstore_requests", "objstore_request_duration_seconds", "objstore_errors",
            "objstore_pool_busy_threads", "objstore_pool_queued_tasks",
            "objstore_audit_queue_depth", "objstore_audit_dropped_records",
            "process_cpu_seconds", "objstore_build_info"} <= names
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian package prometheus); parsed only")
    checked = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                             capture_output=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_counters_move_with_traffic(node: Daemon, s3: Any) -> None:
    bucket = f"metrics-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    before = scrape(node)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 1000)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x" * 1000
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="missing")
    after = scrape(node)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("objstore_requests_total", operation="PutObject", status="200") == 1
    assert moved("objstore_requests_total", operation="GetObject", status="200") == 1
    assert moved("objstore_requests_total", operation="GetObject", status="404") == 1
    assert moved("objstore_errors_total", code="NoSuchKey") == 1
    assert moved("objstore_received_bytes_total", operation="PutObject") == 1000
    assert moved("objstore_sent_bytes_total", operation="GetObject") >= 1000
    assert moved("objstore_request_duration_seconds_count", operation="PutObject") == 1
    assert value(after, "objstore_requests_in_flight") >= 1  # the scrape itself


def test_storage_gauges_follow_the_data(node: Daemon, s3: Any) -> None:
    bucket = f"gauges-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    for n in range(3):
        s3.put_object(Bucket=bucket, Key=f"k{n}", Body=b"y" * 100)
    wait_until(lambda: value(scrape(node), "objstore_bucket_stored_bytes", bucket=bucket) == 300,
               "the bucket's bytes in the metrics")
    text = scrape(node)
    assert value(text, "objstore_bucket_objects", bucket=bucket) == 3
    assert value(text, "objstore_objects") >= 3
    assert value(text, "objstore_stored_bytes") >= 300
    assert value(text, "objstore_buckets") >= 1


def test_history_fills_up(node: Daemon, s3: Any) -> None:
    admin = AdminClient(node.endpoint)
    s3.list_buckets()

    def busy_samples() -> list[dict[str, Any]]:
        body = admin.ok("GET", "/metrics/history?limit=100")
        return [s for s in body["samples"] if s["requests"] > 0]

    wait_until(lambda: bool(busy_samples()), "a history sample with requests")
    wait_until(lambda: len(admin.ok("GET", "/metrics/history")["samples"]) >= 2,
               "two history samples")
    body = admin.ok("GET", "/metrics/history?limit=2")
    assert body["node"] and len(body["samples"]) == 2
    newest, older = body["samples"]
    assert newest["time"] > older["time"]
    assert newest["node_id"] == body["node"]
    assert set(newest) >= {"interval_seconds", "requests", "errors", "server_errors",
                           "bytes_in", "bytes_out", "buckets", "objects", "stored_bytes"}
    since = admin.ok("GET", f"/metrics/history?since={newest['time'].replace('+', '%2B')}")
    assert since["samples"] and all(s["time"] >= newest["time"] for s in since["samples"])
    assert admin.get("/metrics/history?limit=0").status == 400
    assert admin.get("/metrics/history?node=elsewhere").status == 404


def test_history_needs_view_server_info(node: Daemon) -> None:
    admin = AdminClient(node.endpoint)
    user = admin.ok("POST", "/users", {"username": f"plain-{uuid.uuid4().hex[:8]}"}, status=201)
    credential = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, status=201)
    plain = admin.as_user(credential["access_key_id"], credential["secret_access_key"])
    reply = plain.get("/metrics/history")
    assert reply.status == 403 and reply.error == "AccessDenied"
    assert HTTP.request("GET", f"{node.endpoint}/admin/metrics/history").status == 403


def test_scrapes_are_never_rate_limited(tmp_path_factory: pytest.TempPathFactory) -> None:
    daemon = Daemon(tmp_path_factory.mktemp("metrics-limited"), extra_config=(
        "[server.limits]\nrate_limit_per_ip_per_second = 1\nrate_limit_per_ip_burst = 1\n"))
    daemon.start()
    try:
        statuses = [HTTP.request("GET", f"{daemon.endpoint}/admin/metrics").status
                    for _ in range(10)]
        assert statuses == [200] * 10
        limited = make_client(daemon.endpoint)
        codes = []
        for _ in range(3):
            try:
                limited.list_buckets()
                codes.append("ok")
            except ClientError as error:
                codes.append(error.response["Error"]["Code"])
        assert "SlowDown" in codes  # the limit is on; the scrapes were exempt
        assert value(scrape(daemon), "objstore_errors_total", code="SlowDown") >= 1
    finally:
        daemon.cleanup()
