"""The cluster capacity guard with `[cluster] capacity_reserve_bytes` set per node: two real
daemons (two workers each) where node a keeps a reserve larger than any disk and node b
keeps none. A PUT through a is refused with 507 InsufficientStorage (the message is the
error table's generic one), while the same PUT through b, on the same disk, is stored
and replicated, and a delete through a is accepted (deletes free space)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from botocore.exceptions import ClientError

from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted

pytestmark = pytest.mark.timeout(60)

BUCKET = "capacity"
PEBIBYTE = 1024**5


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {"a": {"capacity_reserve_bytes": str(PEBIBYTE)},
                 "b": {"capacity_reserve_bytes": "0"}}
    with start_cluster(request, tmp_path_factory, ("a", "b"), cluster_overrides=overrides,
                       workers=2) as started:
        wait_until_trusted(started)
        yield started


def _status(call: Callable[[], object]) -> tuple[int, str]:
    """(HTTP status, error code) of an S3 call: (200, "") when it succeeds."""
    try:
        call()
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"], error.response["Error"]["Code"]
    return 200, ""


def _past_the_gate(call: Callable[[], object]) -> tuple[int, str]:
    """The call's answer once it is not the write gate's 503: a node's second worker
    mirrors the first one's view of its peers a moment after /admin/cluster shows them
    trusted, and until then a quorum write through it is refused with 503 (Retry-After)."""
    answer: tuple[int, str] = (0, "")

    def answered() -> bool:
        nonlocal answer
        answer = _status(call)
        return answer != (503, "ServiceUnavailable")

    wait_for("an answer past the write gate", answered)
    return answer


def test_the_configured_reserve_decides_each_nodes_answer(nodes: dict[str, Node]) -> None:
    # On each node (a bucket's fan-out is best-effort; anti-entropy brings a missed one
    # only at its next pass, 30 s on): the same root owns both, so it is one bucket.
    for node in nodes.values():
        assert _past_the_gate(lambda node=node: node.s3.create_bucket(Bucket=BUCKET)) == (200, "")
    body = b"x" * 1024
    assert _past_the_gate(lambda: nodes["b"].s3.put_object(
        Bucket=BUCKET, Key="kept", Body=body)) == (200, "")
    assert nodes["a"].s3.get_object(Bucket=BUCKET, Key="kept")["Body"].read() == body
    for attempt in range(4):  # several requests, whichever worker of a answers each
        assert _past_the_gate(lambda attempt=attempt: nodes["a"].s3.put_object(
            Bucket=BUCKET, Key=f"refused-{attempt}", Body=b"y")) == (507, "InsufficientStorage")
    nodes["a"].s3.delete_object(Bucket=BUCKET, Key="kept")
    with pytest.raises(ClientError):
        nodes["b"].s3.head_object(Bucket=BUCKET, Key="kept")
