"""Multipart uploads whose calls land on different nodes of a real three-node cluster, as
behind a load balancer (spec Cluster rules 6): an upload created through a takes part 1
through b and part 2 through c, lists both parts through a and completes through a (which
merges its peers' control planes for the upload and parts it lacks, and fetches the
parts' bytes from them); b and c then serve exactly the bytes. An upload created through
a is aborted through c and is gone everywhere. A retried completion through another node
answers the object made. boto3's managed upload through one node is a sanity check.
Anti-entropy ticks at its default 30 s: what is tested is the pull on a
miss and the op notices, not the periodic pass."""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Iterator

import pytest
import urllib3
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.cluster.clients import body_of, has_bucket
from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted

pytestmark = pytest.mark.timeout(180)

NAMES = ("a", "b", "c")
DEADLINE = 30.0
PART_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES) as started:
        wait_until_trusted(started, DEADLINE)
        yield started


def fresh_bucket(nodes: dict[str, Node]) -> str:
    bucket = f"mpu-{uuid.uuid4().hex[:12]}"
    nodes["a"].s3.create_bucket(Bucket=bucket)
    for name in NAMES:
        wait_for(f"bucket {bucket} on {name}",
                 lambda name=name: has_bucket(nodes[name], bucket), DEADLINE)
    return bucket


def counter(node: Node, name: str, label: str = "") -> float:
    """The sum of `node`'s samples of counter `name` (those with `label`, when given)."""
    http = urllib3.PoolManager(retries=False, timeout=5.0)
    text = http.request("GET", node.daemon.endpoint + "/admin/metrics").data.decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name) and label in line)


def fetched_parts(node: Node) -> tuple[float, float]:
    """(parts a completion fetched, blobs repaired from a peer) on `node`."""
    return (counter(node, "objstore_cluster_upload_parts_fetched_total"),
            counter(node, "objstore_cluster_blob_repairs_total", 'result="repaired"'))


def open_uploads(node: Node, bucket: str) -> list[str]:
    answer = node.s3.list_multipart_uploads(Bucket=bucket)
    return [upload["UploadId"] for upload in answer.get("Uploads", [])]


def test_an_upload_made_through_three_nodes_completes(nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    bucket = fresh_bucket(nodes)
    first = bytes(range(256)) * (PART_BYTES // 256) + b"first-tail"
    second = b"the last part, small" * 100
    upload_id = a.s3.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    one = b.s3.upload_part(Bucket=bucket, Key="big", UploadId=upload_id, PartNumber=1,
                           Body=first)
    two = c.s3.upload_part(Bucket=bucket, Key="big", UploadId=upload_id, PartNumber=2,
                           Body=second)
    assert one["ETag"].strip('"') == hashlib.md5(first).hexdigest()

    rounds = counter(a, "objstore_cluster_upload_refresh_rounds_total")
    listed = a.s3.list_parts(Bucket=bucket, Key="big", UploadId=upload_id)
    assert counter(a, "objstore_cluster_upload_refresh_rounds_total") > rounds  # pulled
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed["Parts"]] == [
        (1, one["ETag"], len(first)), (2, two["ETag"], len(second))]

    fetched_before = fetched_parts(a)
    a.s3.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": one["ETag"]},
                                   {"PartNumber": 2, "ETag": two["ETag"]}]})
    whole = first + second
    fetched_after = fetched_parts(a)  # both parts' bytes came from b and c
    assert [after - before for after, before in zip(fetched_after, fetched_before,
                                                     strict=True)] == [2, 2]
    assert body_of(a, bucket, "big") == whole
    for node in (b, c):
        wait_for(f"the completed object on {node.node_id}",
                 lambda node=node: body_of(node, bucket, "big") == whole, DEADLINE)
    for node in (a, b, c):  # the upload is closed everywhere
        wait_for(f"no open upload on {node.node_id}",
                 lambda node=node: open_uploads(node, bucket) == [], DEADLINE)
    # A client's retry of the completion, through another node, gets the same object.
    retried = c.s3.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": one["ETag"]},
                                   {"PartNumber": 2, "ETag": two["ETag"]}]})
    assert retried["ETag"] == a.s3.head_object(Bucket=bucket, Key="big")["ETag"]


def test_a_part_of_an_upload_unknown_here_is_refused_as_before(
        nodes: dict[str, Node]) -> None:
    bucket = fresh_bucket(nodes)
    with pytest.raises(ClientError) as refused:
        nodes["b"].s3.upload_part(Bucket=bucket, Key="k", UploadId="no-such-upload",
                                  PartNumber=1, Body=b"x")
    assert refused.value.response["Error"]["Code"] == "NoSuchUpload"


def test_an_upload_created_on_a_is_aborted_through_c(nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    bucket = fresh_bucket(nodes)
    upload_id = a.s3.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    a.s3.upload_part(Bucket=bucket, Key="gone", UploadId=upload_id, PartNumber=1,
                     Body=b"part bytes")
    c.s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=upload_id)
    for node in (a, b, c):
        wait_for(f"the aborted upload gone on {node.node_id}",
                 lambda node=node: open_uploads(node, bucket) == [], DEADLINE)
    with pytest.raises(ClientError) as refused:
        b.s3.upload_part(Bucket=bucket, Key="gone", UploadId=upload_id, PartNumber=2,
                         Body=b"late")
    assert refused.value.response["Error"]["Code"] == "NoSuchUpload"


def test_a_managed_upload_through_one_node_reaches_the_others(
        nodes: dict[str, Node]) -> None:
    bucket = fresh_bucket(nodes)
    data = hashlib.sha256(b"seed").digest() * (3 * PART_BYTES // 32 + 7)
    config = TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES,
                            max_concurrency=2)
    nodes["b"].s3.upload_fileobj(io.BytesIO(data), bucket, "managed", Config=config)
    for name in NAMES:
        wait_for(f"the managed upload on {name}",
                 lambda name=name: body_of(nodes[name], bucket, "managed") == data, DEADLINE)
