"""Rule 7 on real daemons: two nodes in available mode with tombstone_grace_seconds = 4
(a purge tick every second; peer pruning a day away). While b is frozen (SIGSTOP) past
the grace, a shows tombstone_gc_blocked, skips its purge ticks, keeps the tombstone of
an object deleted meanwhile, and warns once; after b is back, a purges it and says it
resumed, once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted
from tests.integration.probes import database, metric, object_tombstones

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b")
BUCKET = "purged"
GRACE_SECONDS = 4


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {name: {"consistency": '"available"', "request_timeout_seconds": "1",
                        "tombstone_grace_seconds": str(GRACE_SECONDS),
                        "peer_prune_days": "1"} for name in NAMES}
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        wait_until_trusted(started, deadline=30)
        yield started


def tombstones(node: Node) -> set[str]:
    """The keys of the object tombstones of BUCKET in `node`'s database."""
    with database(node.daemon) as engine:
        return object_tombstones(engine, BUCKET)


def blocked(node: Node) -> bool:
    return bool(node.admin.get("/cluster").json["tombstone_gc_blocked"])


def log_since(node: Node, offset: int) -> str:
    return node.daemon.log_path.read_bytes()[offset:].decode(errors="replace")


def test_a_peer_away_past_the_grace_blocks_the_purge(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    a.s3.create_bucket(Bucket=BUCKET)
    a.s3.put_object(Bucket=BUCKET, Key="gone", Body=b"x")
    # The purge's own verdict (its last tick), logged by then: a start may have blocked
    # it until b answered.
    wait_for("a's purge unblocked",
             lambda: not blocked(a) and metric(a.daemon, "objstore_tombstone_gc_blocked") == 0,
             deadline=30)
    offset = a.daemon.log_path.stat().st_size
    assert b.daemon.process is not None
    pid = b.daemon.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        a.s3.delete_object(Bucket=BUCKET, Key="gone")  # available mode: accepted here
        deleted_at = time.monotonic()
        key = f"{BUCKET}:null:gone"
        assert key in tombstones(a)
        wait_for("a blocks its purge", lambda: blocked(a), deadline=30)
        skipped = metric(a.daemon, "objstore_tombstone_purge_skipped_total")
        wait_for("a skips two more ticks past the tombstone's grace",
                 lambda: time.monotonic() - deleted_at > GRACE_SECONDS + 1
                 and metric(a.daemon, "objstore_tombstone_purge_skipped_total") >= skipped + 2,
                 deadline=30)
        assert key in tombstones(a)
        assert metric(a.daemon, "objstore_tombstone_gc_blocked") == 1
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for("a purges the tombstone once b is back", lambda: key not in tombstones(a),
             deadline=30)
    assert not blocked(a)
    assert metric(a.daemon, "objstore_tombstone_gc_blocked") == 0
    assert metric(a.daemon, "objstore_tombstones_purged_total") >= 1
    logged = log_since(a, offset)
    assert logged.count("tombstone purge blocked") == 1, logged
    assert "node-b" in logged
    assert logged.count("tombstone purge resumed") == 1, logged
