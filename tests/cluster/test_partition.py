"""A partition of real daemons, made by freezing nodes with SIGSTOP (the process holds its
port; connections hang instead of being refused, as behind a dead link). With one of
three frozen, writes succeed: first while the fan-out to it times out
(request_timeout_seconds), then once the probes marked it dead. With two frozen the write
gate closes: 503 ServiceUnavailable with Retry-After: 5, reads served. After SIGCONT the
gate reopens."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from tests.cluster.harness import Node, all_trusted, peers_of, start_cluster, wait_for

pytestmark = pytest.mark.timeout(90)

NAMES = ("a", "b", "c")
BUCKET = "partitioned"


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {name: {"request_timeout_seconds": "1"} for name in NAMES}
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        for name in NAMES:
            wait_for(f"{name} trusts both peers",
                     lambda name=name: all_trusted(started[name], 2), deadline=30)
            started[name].s3.create_bucket(Bucket=BUCKET)  # buckets are not replicated yet
        yield started


@contextlib.contextmanager
def frozen(*frozen_nodes: Node) -> Iterator[None]:
    """SIGSTOP the nodes; SIGCONT them at the end whatever happened."""
    pids = []
    try:
        for node in frozen_nodes:
            assert node.daemon.process is not None
            pids.append(node.daemon.process.pid)
            os.kill(pids[-1], signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def gate(node: Node) -> str:
    return str(node.admin.get("/cluster").json["gate"])


def dead(node: Node, node_id: str) -> bool:
    return any(p["node_id"] == node_id and not p["alive"] for p in peers_of(node))


def test_one_frozen_node_of_three_leaves_writes_working(nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    with frozen(c):
        # At once: the fan-out to c times out, b's acknowledgement makes the quorum.
        a.s3.put_object(Bucket=BUCKET, Key="while-timing-out", Body=b"first")
        assert b.s3.get_object(Bucket=BUCKET, Key="while-timing-out")["Body"].read() == b"first"
        wait_for("a marks c dead", lambda: dead(a, "node-c"))
        wait_for("b marks c dead", lambda: dead(b, "node-c"))
        assert gate(a) == "open"
        b.s3.put_object(Bucket=BUCKET, Key="after-the-probe", Body=b"second")
        assert a.s3.get_object(Bucket=BUCKET, Key="after-the-probe")["Body"].read() == b"second"
    wait_for("a trusts c again", lambda: all_trusted(a, 2))


def test_two_frozen_nodes_close_the_gate_until_they_return(nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    a.s3.put_object(Bucket=BUCKET, Key="kept", Body=b"written with a quorum")
    with frozen(b, c):
        wait_for("a's gate closes", lambda: gate(a) != "open")
        with pytest.raises(ClientError) as caught:
            a.s3.put_object(Bucket=BUCKET, Key="refused", Body=b"no quorum")
        answer = caught.value.response
        assert answer["Error"]["Code"] == "ServiceUnavailable"
        assert answer["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert answer["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "5"
        got = a.s3.get_object(Bucket=BUCKET, Key="kept")
        assert got["Body"].read() == b"written with a quorum"
        health = a.admin.get("/health?writable=1")
        assert health.status == 503 and health.headers.get("Retry-After") == "5"
    wait_for("a's gate reopens", lambda: gate(a) == "open", deadline=30)
    a.s3.put_object(Bucket=BUCKET, Key="after", Body=b"quorum again")
    for node in (b, c):
        assert node.s3.get_object(Bucket=BUCKET, Key="after")["Body"].read() == b"quorum again"
