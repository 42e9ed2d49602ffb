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
import sqlalchemy as sa
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import Daemon

GRACE_SECONDS = 6
WAIT_SECONDS = 60.0
HTTP = urllib3.PoolManager(retries=False, timeout=10.0)


@pytest.fixture(scope="module", params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path_factory.mktemp(f"purge-{request.param}"), backend=request.param,
                    extra_config=f"[cluster]\ntombstone_grace_seconds = {GRACE_SECONDS}\n")
    with running_daemon(request, daemon):
        yield daemon


def database_url(node: Daemon) -> str:
    if node.backend == "postgres":
        return f"postgresql+psycopg2://postgres@127.0.0.1:5432/{node.pg_database}"
    return f"sqlite:///{node.data_dir / 'meta' / 'objstore.db'}"


def object_tombstones(engine: sa.Engine, bucket: str) -> set[str]:
    """The keys (bucket:version:key) of the bucket's object tombstones."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT key FROM tombstones WHERE family = 'object' AND key LIKE :prefix"),
            {"prefix": f"{bucket}:%"})
        return {str(row[0]) for row in rows}


def metric(node: Daemon, name: str) -> float:
    response = HTTP.request("GET", f"{node.endpoint}/admin/metrics")
    assert response.status == 200
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return 0.0


def test_a_tombstone_goes_after_the_grace_and_a_recent_one_stays(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    bucket = f"purge-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    for key in ("first", "second"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    engine = sa.create_engine(database_url(node), poolclass=sa.pool.NullPool)
    first, second = f"{bucket}:null:first", f"{bucket}:null:second"
    try:
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
    finally:
        engine.dispose()
    # With several workers the purge's figures reach the other workers' scrapes when
    # worker 0 next publishes them (every second): poll, do not read once.
    deadline = time.monotonic() + 10
    while metric(node, "objstore_tombstones_purged_total") < 1:
        assert time.monotonic() < deadline, "the purge was never counted"
        time.sleep(0.2)
    assert metric(node, "objstore_tombstone_gc_blocked") == 0
