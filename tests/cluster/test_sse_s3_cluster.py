"""SSE-S3 on a real three-node cluster whose nodes share one master key file: an encrypted
object written on one node replicates to the others as stored bytes (the row carries the
wrapped data key), reads back byte-identical (Range across packages included) on every
node, is repaired from a peer as ciphertext when its blob goes missing, and no node ever
holds the plaintext on disk. Multipart objects that are encrypted and compressed (zstd on
the bucket, SSE-S3 on the upload) do the same, Ranges across package, chunk and part
boundaries included, and reach a node that was down while they were written (anti-entropy
every 0.5 s). (Nodes with different master keys are config drift to be caught by the
cluster fingerprint: not built yet.)"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from objstore.crypto.master_key import load_or_create
from tests.cluster.harness import Node, all_trusted, start_cluster, wait_for

pytestmark = pytest.mark.timeout(180)

NAMES = ("a", "b", "c")
BUCKET = "sse-cluster"
ZBUCKET = "sse-cluster-zstd"
P = 64 * 1024
PART = 5 * 1024 * 1024  # the smallest part but the last
FAST = {"anti_entropy_interval_seconds": "0.5"}
MARKER = b"CLUSTER-SSE-PLAINTEXT-MARKER-95ab"


def _body(size: int) -> bytes:
    chunk = MARKER + os.urandom(4096 - len(MARKER))
    return (chunk * (size // len(chunk) + 1))[:size]


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    key_file = tmp_path_factory.mktemp("shared-key") / "master.key"
    load_or_create(str(key_file))
    encryption = f'[encryption]\nenabled = true\nmaster_key_file = "{key_file}"\n'
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides={name: FAST for name in NAMES},
                       extra_config={name: encryption for name in NAMES}) as started:
        for name in NAMES:  # buckets are not replicated yet
            wait_for(f"node {name} trusts both peers",
                     lambda name=name: all_trusted(started[name], 2), deadline=30)
            started[name].s3.create_bucket(Bucket=BUCKET)
            started[name].s3.create_bucket(Bucket=ZBUCKET)
        yield started


def _reads(node: Node, key: str, body: bytes, bucket: str = BUCKET, **extra: Any) -> bool:
    try:
        got = node.s3.get_object(Bucket=bucket, Key=key, **extra)
    except ClientError:
        return False
    return bool(got["Body"].read() == body and got.get("ServerSideEncryption") == "AES256")


def _blob_of(node: Node, key: str) -> Path:
    for path in (node.daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("bucket") == BUCKET and document.get("key") == key:
            return path.with_name(path.name[:-len(".meta.json")])
    raise AssertionError(f"no sidecar of {key} on {node.node_id}")


def test_replicated_repaired_and_never_plaintext(nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    body = _body(3 * P + 1000)
    put = a.s3.put_object(Bucket=BUCKET, Key="k", Body=body, ServerSideEncryption="AES256")
    assert put["ServerSideEncryption"] == "AES256"
    for node in (b, c):
        wait_for(f"k readable on {node.node_id}", lambda node=node: _reads(node, "k", body))
    start, end = P - 10, 2 * P + 10
    assert _reads(c, "k", body[start:end + 1], Range=f"bytes={start}-{end}")
    stored = _blob_of(a, "k").read_bytes()
    assert _blob_of(c, "k").read_bytes() == stored  # copied as stored bytes
    # A blob gone from b's disk is fetched back from a peer, as ciphertext.
    missing = _blob_of(b, "k")
    os.unlink(missing)
    assert _reads(b, "k", body)
    assert missing.read_bytes() == stored
    for node in nodes.values():
        for root in (node.daemon.data_dir, node.daemon.temp_dir):
            found = [p for p in Path(root).rglob("*") if p.is_file() and MARKER in p.read_bytes()]
            assert found == [], node.node_id


def _kms_of(node: Node, key: str, body: bytes) -> str | None:
    """The SSE-KMS key id `node` answers for `key` once it reads back as `body`."""
    try:
        got = node.s3.get_object(Bucket=BUCKET, Key=key)
    except ClientError:
        return None
    if got["Body"].read() != body or got.get("ServerSideEncryption") != "aws:kms":
        return None
    return str(got["SSEKMSKeyId"])


def test_an_sse_kms_object_replicates_as_stored_bytes(nodes: dict[str, Node]) -> None:
    """aws:kms (the shared master key's) written on b: every node reads it and shows the
    same key id; the peers hold the very bytes b stored (ciphertext)."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    body = _body(2 * P + 300)
    put = b.s3.put_object(Bucket=BUCKET, Key="kms", Body=body, ServerSideEncryption="aws:kms",
                          SSEKMSKeyId="alias/objstore")
    assert put["ServerSideEncryption"] == "aws:kms"
    for node in (a, c):
        wait_for(f"kms readable on {node.node_id}",
                 lambda node=node: _kms_of(node, "kms", body) == put["SSEKMSKeyId"])
    stored = _blob_of(b, "kms").read_bytes()
    assert MARKER not in stored
    assert _blob_of(a, "kms").read_bytes() == stored == _blob_of(c, "kms").read_bytes()


def _default_encryption(node: Node, bucket: str) -> str | None:
    try:
        config = node.s3.get_bucket_encryption(Bucket=bucket)
    except ClientError:
        return None
    rule = config["ServerSideEncryptionConfiguration"]["Rules"][0]
    return str(rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"])


def _head_sse(node: Node, bucket: str, key: str) -> str | None:
    try:
        return node.s3.head_object(Bucket=bucket, Key=key).get("ServerSideEncryption")
    except ClientError:
        return None


def test_bucket_default_encryption_reaches_the_peers(nodes: dict[str, Node]) -> None:
    """Set on a, it is answered by b and c and applies to a PUT without the header on c
    (whose configuration cache the merge invalidates); deleted on b, it is gone on a."""
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    bucket = "sse-cluster-default"
    a.s3.create_bucket(Bucket=bucket)
    a.s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    for node in (b, c):
        wait_for(f"default encryption on {node.node_id}",
                 lambda node=node: _default_encryption(node, bucket) == "AES256")
    body = _body(P + 5)
    put = c.s3.put_object(Bucket=bucket, Key="by-default", Body=body)
    assert put["ServerSideEncryption"] == "AES256"
    for node in (a, b):
        wait_for(f"by-default on {node.node_id}",
                 lambda node=node: _head_sse(node, bucket, "by-default") == "AES256")
    b.s3.delete_bucket_encryption(Bucket=bucket)
    wait_for("default encryption deleted on a",
             lambda: _default_encryption(a, bucket) is None)
    assert "ServerSideEncryption" not in a.s3.put_object(Bucket=bucket, Key="plain",
                                                         Body=b"no marker here")


def _compressible(size: int) -> bytes:
    """Log-like lines (they compress) with the marker and random bytes between them."""
    lines = b"".join(b"%s GET /k/%06d 200\n" % (MARKER, i) for i in range(300))
    chunk = lines + os.urandom(len(lines) // 4)
    return (chunk * (size // len(chunk) + 1))[:size]


def _multipart(node: Node, key: str, body: bytes) -> None:
    """`body` as an SSE-S3 multipart upload into ZBUCKET (compressed): parts of PART
    bytes, the last one shorter."""
    s3 = node.s3
    upload = s3.create_multipart_upload(Bucket=ZBUCKET, Key=key,
                                        ServerSideEncryption="AES256")
    assert upload["ServerSideEncryption"] == "AES256"
    parts = []
    for number, at in enumerate(range(0, len(body), PART), start=1):
        answer = s3.upload_part(Bucket=ZBUCKET, Key=key, UploadId=upload["UploadId"],
                                PartNumber=number, Body=body[at:at + PART])
        assert answer["ServerSideEncryption"] == "AES256"
        parts.append({"PartNumber": number, "ETag": answer["ETag"]})
    s3.complete_multipart_upload(Bucket=ZBUCKET, Key=key, UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": parts})


# Ranges across a package boundary, a zstd chunk boundary (256 KiB), the part boundary
# (with packages on both sides) and the last bytes.
RANGES = ((P - 10, 2 * P + 10), (4 * P - 3, 4 * P + 2), (PART - P - 7, PART + P + 7),
          (PART + 3, PART + 3))


def _reads_everywhere(nodes: dict[str, Node], key: str, body: bytes) -> None:
    for node in nodes.values():
        wait_for(f"{key} readable on {node.node_id}",
                 lambda node=node: _reads(node, key, body, ZBUCKET))
        for start, end in (*RANGES, (len(body) - 5, len(body) - 1)):
            assert _reads(node, key, body[start:end + 1], ZBUCKET,
                          Range=f"bytes={start}-{end}"), (node.node_id, start, end)


def _no_marker_on_disk(nodes: dict[str, Node]) -> None:
    for node in nodes.values():
        for root in (node.daemon.data_dir, node.daemon.temp_dir):
            found = [p for p in Path(root).rglob("*") if p.is_file() and MARKER in p.read_bytes()]
            assert found == [], node.node_id


def test_encrypted_compressed_multipart_replicates_and_catches_up(
        nodes: dict[str, Node]) -> None:
    a, c = nodes["a"], nodes["c"]
    a.admin.ok("PUT", f"/buckets/{ZBUCKET}/compression", {"algorithm": "zstd", "level": 3})
    body = _compressible(PART + 300 * 1024 + 11)
    _multipart(a, "multi", body)
    _reads_everywhere(nodes, "multi", body)
    head = c.s3.head_object(Bucket=ZBUCKET, Key="multi")
    assert head["ContentLength"] == len(body) and head["ETag"].endswith('-2"')
    # Written while c is down: c catches it up when it returns.
    c.daemon.stop()
    later = _compressible(2 * PART + 5)
    _multipart(a, "while-c-was-away", later)
    c.daemon.start()
    _reads_everywhere(nodes, "while-c-was-away", later)
    _no_marker_on_disk(nodes)
    stored = None
    for node in nodes.values():  # copied as stored: compressed and encrypted everywhere
        sidecar = _sidecar(node, ZBUCKET, "while-c-was-away")
        assert sidecar.get("compression") == "zstd", (node.node_id, sidecar)
        assert sidecar.get("encryption_algorithm") == "AES256", (node.node_id, sidecar)
        parts = [_blob_path(node, part["blob_id"]).read_bytes() for part in sidecar["parts"]]
        assert len(parts) == 3 and sum(map(len, parts)) < len(later) // 2  # compressed
        assert stored is None or parts == stored, node.node_id  # the same bytes
        stored = parts


def _blob_path(node: Node, blob_id: str) -> Path:
    return node.daemon.data_dir / "blobs" / blob_id[0:2] / blob_id[2:4] / blob_id


def _sidecar(node: Node, bucket: str, key: str) -> dict[str, Any]:
    for path in (node.daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document: dict[str, Any] = json.loads(path.read_text())
        if (document.get("kind") == "object" and document.get("bucket") == bucket
                and document.get("key") == key):
            return document
    raise AssertionError(f"no object sidecar of {key} on {node.node_id}")
