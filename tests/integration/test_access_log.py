"""The access log and the scrape token end to end, on a two-worker node: every request
(S3, admin, refused, presigned) is one JSON line in the file, whole even though both worker
processes append to it, without the query string; GET /admin/metrics answers 401 without
the [metrics] bearer token and 200 with it; `bucket_labels = false` leaves the per-bucket
families out of the scrape."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from tests.integration.conftest import make_client, running_daemon
from tests.integration.daemon import Daemon

HTTP = urllib3.PoolManager(retries=False, timeout=10.0)
TOKEN = "scrape-" + uuid.uuid4().hex
WAIT_SECONDS = 15.0


@pytest.fixture(scope="module")
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("access-log")
    token_file = workdir / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    daemon = Daemon(workdir, backend="sqlite", workers=2, extra_config=(
        "[logging]\n"
        f'access_log = "{workdir / "access.log"}"\n'
        'access_log_format = "json"\n'
        "[metrics]\n"
        "history_interval_seconds = 1\n"
        f'bearer_token_file = "{token_file}"\n'
        "bucket_labels = false\n"))
    with running_daemon(request, daemon):
        yield daemon


def access_lines(node: Daemon) -> list[dict[str, Any]]:
    path = Path(node.workdir) / "access.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for_line(node: Daemon, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for line in access_lines(node):
            if line["request_id"] == request_id:
                return line
        time.sleep(0.1)
    raise AssertionError(f"no access log line for request {request_id}")


def test_every_request_is_one_whole_line(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    bucket = f"access-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    put = s3.put_object(Bucket=bucket, Key="a b/ü.txt", Body=b"x" * 1234)
    line = wait_for_line(node, put["ResponseMetadata"]["RequestId"])
    assert line["method"] == "PUT"
    assert line["path"] == f"/{bucket}/a%20b/%C3%BC.txt"
    assert line["status"] == 200
    assert line["bytes_in"] == 1234
    assert line["principal"] == "root"
    assert line["time"].endswith("Z") and line["duration_ms"] >= 0

    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "nope"})
    missing = HTTP.request("GET", url)
    assert missing.status == 404
    line = wait_for_line(node, missing.headers["x-amz-request-id"])
    assert line["status"] == 404 and line["path"] == f"/{bucket}/nope"
    assert "Signature" not in json.dumps(access_lines(node))  # no query string, ever

    refused = HTTP.request("GET", f"{node.endpoint}/{bucket}")  # unsigned
    assert refused.status == 403
    line = wait_for_line(node, refused.headers["x-amz-request-id"])
    assert line["principal"] == "-" and line["status"] == 403

    # Both workers append: many requests, every line whole JSON (access_lines parses all).
    for index in range(40):
        s3.head_bucket(Bucket=bucket)
        del index
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline and sum(
            1 for line in access_lines(node) if line["method"] == "HEAD") < 40:
        time.sleep(0.1)
    assert sum(1 for line in access_lines(node) if line["method"] == "HEAD") == 40


def test_metrics_need_the_bearer_token(node: Daemon) -> None:
    url = f"{node.endpoint}/admin/metrics"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        refused = HTTP.request("GET", url, headers=headers)
        assert refused.status == 401, headers
        assert json.loads(refused.data)["error"] == "Unauthorized"
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    allowed = HTTP.request("GET", url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert allowed.status == 200
    assert b"objstore_requests_total" in allowed.data or b"objstore_" in allowed.data


def test_no_per_bucket_families_without_bucket_labels(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket=f"labels-{uuid.uuid4().hex[:8]}")
    deadline = time.monotonic() + WAIT_SECONDS
    text = ""
    while time.monotonic() < deadline:
        text = HTTP.request("GET", f"{node.endpoint}/admin/metrics",
                            headers={"Authorization": f"Bearer {TOKEN}"}).data.decode()
        if "\nobjstore_buckets " in text:  # the storage figures are measured
            break
        time.sleep(0.2)
    assert "\nobjstore_buckets " in text
    assert "objstore_bucket_objects" not in text
    assert "objstore_bucket_stored_bytes" not in text
