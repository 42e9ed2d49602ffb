"""The tombstone purge end to end on a single node (spec Cluster rules 7): with
[cluster] tombstone_grace_seconds = 6 (a purge tick every 1.5 s), the tombstone of an
object deleted first is gone once it is older than the grace while the tombstone of one
deleted 3 s later is still there, and the metrics count the purge and show it unblocked."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import Daemon
from tests.integration.probes import database, metric, object_tombstones

GRACE_SECONDS = 6
WAIT_SECONDS = 60.0


@pytest.fixture(scope="module", params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path_factory.mktemp(f"purge-{request.param}"), backend=request.param,
                    extra_config=f"[cluster]\ntombstone_grace_seconds = {GRACE_SECONDS}\n")
    with running_daemon(request, daemon):
        yield daemon


def test_a_tombstone_goes_after_the_grace_and_a_recent_one_stays(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    bucket = f"purge-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    for key in ("first", "second"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    first, second = f"{bucket}:null:first", f"{bucket}:null:second"
    with database(node) as engine:
        s3.delete_object(Bucket=bucket, Key="first")
        assert object_tombstones(engine, bucket) == {first}
        time.sleep(GRACE_SECONDS / 2)
        s3.delete_object(Bucket=bucket, Key="second")
        assert object_tombstones(engine, bucket) == {first, second}

        deadline = time.monotonic() + WAIT_SECONDS
        while first in (left := object_tombstones(engine, bucket)):
            assert time.monotonic() < deadline, "the old tombstone was never purged"
            time.sleep(0.1)
        assert left == {second}  # deleted GRACE / 2 later: still within its grace
    # With several workers the purge's figures reach the other workers' scrapes when
    # worker 0 next publishes them (every second): poll, do not read once.
    deadline = time.monotonic() + 10
    while metric(node, "objstore_tombstones_purged_total") < 1:
        assert time.monotonic() < deadline, "the purge was never counted"
        time.sleep(0.2)
    assert metric(node, "objstore_tombstone_gc_blocked") == 0
