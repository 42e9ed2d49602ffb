"""Blob repair on a real three-node cluster (spec Cluster rules 10): a blob deleted from one
node's disk is fetched back from a peer by the GET that finds it missing (a plain object
and a part of a multipart object), and a blob corrupted on another node's disk (same size,
other bytes) is found and replaced by the proactive pass within a few ticks. Nodes a and b
tick at the default 30 s (the GETs on b repair, milliseconds after the file went), node c
every half second. The budget per tick
is covered by tests/unit/test_cluster_blob_repair.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.cluster.harness import Node, all_trusted, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b", "c")
BUCKET = "repaired"
PART_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {"c": {"anti_entropy_interval_seconds": "0.5"}}
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        for name in NAMES:  # buckets are not replicated yet
            wait_for(f"node {name} trusts both peers",
                     lambda name=name: all_trusted(started[name], 2), deadline=30)
            started[name].s3.create_bucket(Bucket=BUCKET)
        yield started


def sidecar_of(node: Node, key: str) -> tuple[Path, dict[str, Any]]:
    """(blob path, sidecar) of the object `key` in `node`'s data directory."""
    root = node.daemon.data_dir / "blobs"
    for path in root.glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if (document.get("kind") == "object" and document.get("bucket") == BUCKET
                and document.get("key") == key):
            return path.with_name(path.name[:-len(".meta.json")]), document
    raise AssertionError(f"no sidecar of {key} on {node.node_id}")


def blob_path(node: Node, blob_id: str) -> Path:
    return node.daemon.data_dir / "blobs" / blob_id[0:2] / blob_id[2:4] / blob_id


def replicated(node: Node, key: str, body: bytes) -> None:
    def served() -> bool:
        try:
            return bool(node.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == body)
        except ClientError as error:  # not there yet: the fan-out is still on its way
            if error.response["Error"]["Code"] != "NoSuchKey":
                raise
            return False

    wait_for(f"{key} on {node.node_id}", served)


def counter(node: Node, line_start: str) -> float:
    http = urllib3.PoolManager(retries=False, timeout=5.0)
    text = http.request("GET", node.daemon.endpoint + "/admin/metrics").data.decode()
    values = [float(line.split()[-1]) for line in text.splitlines()
              if line.startswith(line_start)]
    return sum(values)


def test_a_get_repairs_a_missing_blob_from_a_peer(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    body = bytes(range(256)) * 1000 + b"plain"
    a.s3.put_object(Bucket=BUCKET, Key="plain", Body=body)
    replicated(b, "plain", body)
    path, sidecar = sidecar_of(b, "plain")
    os.unlink(path)
    got = b.s3.get_object(Bucket=BUCKET, Key="plain")
    assert got["Body"].read() == body
    assert path.read_bytes() == body  # stored again, durably, beside its sidecar
    assert json.loads(path.with_name(path.name + ".meta.json").read_text()) == sidecar
    assert counter(b, 'objstore_cluster_blob_repairs_total{result="repaired"}') >= 1


def test_a_get_repairs_a_missing_part_of_a_multipart_object(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    first, second = os.urandom(PART_BYTES), os.urandom(1024 * 1024 + 17)
    upload = a.s3.create_multipart_upload(Bucket=BUCKET, Key="multi")["UploadId"]
    parts = []
    for number, data in ((1, first), (2, second)):
        etag = a.s3.upload_part(Bucket=BUCKET, Key="multi", UploadId=upload,
                                PartNumber=number, Body=data)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    a.s3.complete_multipart_upload(Bucket=BUCKET, Key="multi", UploadId=upload,
                                   MultipartUpload={"Parts": parts})
    replicated(b, "multi", first + second)
    _, sidecar = sidecar_of(b, "multi")
    [_, part_two] = sidecar["parts"]
    lost = blob_path(b, part_two["blob_id"])
    os.unlink(lost)
    assert b.s3.get_object(Bucket=BUCKET, Key="multi")["Body"].read() == first + second
    assert lost.read_bytes() == second
    ranged = b.s3.get_object(Bucket=BUCKET, Key="multi", Range=f"bytes={PART_BYTES - 3}-"
                             f"{PART_BYTES + 2}")["Body"].read()
    assert ranged == first[-3:] + second[:3]


def test_the_proactive_pass_replaces_a_corrupt_blob(nodes: dict[str, Node]) -> None:
    a, c = nodes["a"], nodes["c"]
    body = b"the bytes as written " * 500
    a.s3.put_object(Bucket=BUCKET, Key="corrupt", Body=body)
    replicated(c, "corrupt", body)
    path, _ = sidecar_of(c, "corrupt")
    flipped = bytes(byte ^ 0xFF for byte in body[:64]) + body[64:]
    path.write_bytes(flipped)  # same size, other bytes
    wait_for("c's proactive pass repairs the blob", lambda: path.read_bytes() == body,
             deadline=30)
    assert counter(c, 'objstore_cluster_blob_repair_found_total{state="corrupt"}') >= 1
    assert c.s3.get_object(Bucket=BUCKET, Key="corrupt")["Body"].read() == body


def test_a_blob_no_peer_has_keeps_the_lost_blob_answer(nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    body = b"gone everywhere"
    a.s3.put_object(Bucket=BUCKET, Key="gone", Body=body)
    for node in (b, c):
        replicated(node, "gone", body)
    for node in (a, b, c):
        os.unlink(sidecar_of(node, "gone")[0])
    # b's GET asks a and c; neither has the bytes any more: the answer of a lost blob
    with pytest.raises(ClientError) as caught:
        b.s3.get_object(Bucket=BUCKET, Key="gone")
    assert caught.value.response["Error"]["Code"] == "InternalError"
