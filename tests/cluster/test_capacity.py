"""The cluster capacity guard with `[cluster] capacity_reserve_bytes` set per node: two real
daemons (two workers each) where node a keeps a reserve larger than any disk and node b
keeps none. A PUT through a is refused with 507 InsufficientStorage (the message is the
error table's generic one), while the same PUT through b, on the same disk, is stored
and replicated, and a delete through a is accepted (deletes free space)."""

from __future__ import annotations

from collections.abc import Iterator

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


def _has_bucket(node: Node) -> bool:
    return any(b["Name"] == BUCKET for b in node.s3.list_buckets()["Buckets"])


def test_the_configured_reserve_decides_each_nodes_answer(nodes: dict[str, Node]) -> None:
    nodes["b"].s3.create_bucket(Bucket=BUCKET)
    wait_for("the bucket on a", lambda: _has_bucket(nodes["a"]))
    nodes["b"].s3.put_object(Bucket=BUCKET, Key="kept", Body=b"x" * 1024)
    assert nodes["a"].s3.get_object(Bucket=BUCKET, Key="kept")["Body"].read() == b"x" * 1024
    for attempt in range(4):  # several requests, whichever worker of a answers each
        with pytest.raises(ClientError) as refused:
            nodes["a"].s3.put_object(Bucket=BUCKET, Key=f"refused-{attempt}", Body=b"y")
        error = refused.value.response
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 507
        assert error["Error"]["Code"] == "InsufficientStorage"
    nodes["a"].s3.delete_object(Bucket=BUCKET, Key="kept")
    with pytest.raises(ClientError):
        nodes["b"].s3.head_object(Bucket=BUCKET, Key="kept")
