"""Peers that are down or hung, on three real daemons (one module-scoped cluster, available
consistency so that a node alone still takes a part; request_timeout_seconds 4).

- A completion through a whose part was uploaded through b while a and c were frozen (so
  only b holds the part's row and bytes), with b frozen in turn: a cannot ask b, so it
  answers 503 ServiceUnavailable with Retry-After: 5 (not the permanent InvalidPart), the
  upload left open; once b is back the same call succeeds and the object holds b's bytes.
- A write through a while c is frozen (still eligible: its probes have not failed yet)
  answers within about one request_timeout_seconds: the blob PUT and the row POST to c
  share one deadline (before, each had its own and the write waited twice as long). The
  bound is generous (a loaded machine), and c is checked to have been asked (a missed ack
  counted), so the test cannot pass by not sending to c.

Nodes are frozen with SIGSTOP (their ports hold connections that never answer, as a hung
process does) and always resumed."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.cluster.clients import body_of, has_bucket
from tests.cluster.harness import Node, all_trusted, start_cluster, wait_for

pytestmark = pytest.mark.timeout(240)

NAMES = ("a", "b", "c")
TIMEOUT = 4.0  # [cluster] request_timeout_seconds of every node
DEADLINE = 60.0


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {name: {"consistency": '"available"',
                        "request_timeout_seconds": str(TIMEOUT)} for name in NAMES}
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        trusted(started)
        yield started


def trusted(nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        wait_for(f"{name} trusts both peers", lambda node=node: all_trusted(node, 2),
                 DEADLINE)


def stop(*nodes: Node) -> None:
    for node in nodes:
        assert node.daemon.process is not None
        os.kill(node.daemon.process.pid, signal.SIGSTOP)


def resume(*nodes: Node) -> None:
    for node in nodes:
        assert node.daemon.process is not None
        os.kill(node.daemon.process.pid, signal.SIGCONT)


@contextlib.contextmanager
def frozen(*frozen_nodes: Node) -> Iterator[None]:
    """SIGSTOP the nodes; SIGCONT them at the end whatever happened."""
    try:
        stop(*frozen_nodes)
        yield
    finally:
        resume(*frozen_nodes)


def fresh_bucket(nodes: dict[str, Node]) -> str:
    bucket = f"broken-{uuid.uuid4().hex[:12]}"
    nodes["a"].s3.create_bucket(Bucket=bucket)
    for name in NAMES:
        wait_for(f"bucket {bucket} on {name}",
                 lambda name=name: has_bucket(nodes[name], bucket), DEADLINE)
    return bucket


def counter(node: Node, name: str) -> float:
    http = urllib3.PoolManager(retries=False, timeout=10.0)
    text = http.request("GET", node.daemon.endpoint + "/admin/metrics").data.decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name))


def open_uploads(node: Node, bucket: str) -> list[str]:
    answer = node.s3.list_multipart_uploads(Bucket=bucket)
    return [upload["UploadId"] for upload in answer.get("Uploads", [])]


def test_a_completion_while_the_node_with_the_part_is_down_is_503_then_succeeds(
        nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    bucket = fresh_bucket(nodes)
    upload_id = a.s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    wait_for("b knows the upload", lambda: open_uploads(b, bucket) == [upload_id], DEADLINE)
    data = b"only b has these bytes " * 100
    parts = {"Parts": [{"PartNumber": 1, "ETag": f'"{hashlib.md5(data).hexdigest()}"'}]}
    try:
        stop(a, c)  # only b hears of the part
        b.s3.upload_part(Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=1, Body=data)
        stop(b)  # b, holding the part, stops answering before a and c resume
        resume(a, c)
        with pytest.raises(ClientError) as refused:
            a.s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload_id,
                                           MultipartUpload=parts)
        error = refused.value.response
        assert error["Error"]["Code"] == "ServiceUnavailable", error
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert error["ResponseMetadata"]["HTTPHeaders"].get("retry-after") == "5"
        assert open_uploads(a, bucket) == [upload_id]  # left open for the retry
    finally:
        resume(a, b, c)
    trusted(nodes)

    def completed() -> bool:
        try:
            a.s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload_id,
                                           MultipartUpload=parts)
        except ClientError as again:  # a client retries after Retry-After
            assert again.response["Error"]["Code"] == "ServiceUnavailable", again.response
            return False
        return True

    wait_for("the same completion through a succeeds", completed, DEADLINE)
    assert body_of(a, bucket, "k") == data
    for node in (b, c):
        wait_for(f"the object on {node.node_id}",
                 lambda node=node: body_of(node, bucket, "k") == data, DEADLINE)


def test_a_hung_peer_holds_a_write_for_one_timeout_not_two(nodes: dict[str, Node]) -> None:
    a, c = nodes["a"], nodes["c"]
    bucket = fresh_bucket(nodes)
    trusted(nodes)  # c eligible on a: the write is sent to it
    missed = counter(a, "objstore_cluster_fanout_missed_acks_total")
    with frozen(c):  # c is still eligible: its probes take a timeout to fail
        started = time.monotonic()
        a.s3.put_object(Bucket=bucket, Key="k", Body=b"written while c hangs")
        took = time.monotonic() - started
    # Blob PUT and row POST to c share one deadline: about TIMEOUT, never 2 x TIMEOUT.
    assert took < TIMEOUT + 3.0, f"the write took {took:.1f}s"
    assert counter(a, "objstore_cluster_fanout_missed_acks_total") == missed + 1
    trusted(nodes)  # c back for whatever runs next on this cluster
