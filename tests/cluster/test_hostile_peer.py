"""Hostile and broken input from a peer (issue 26, section 4), on a real two-node cluster:
requests signed with the cluster's secret as node-b (a buggy node holds the secret) sent
straight to node a. Deeply nested JSON to every JSON cluster route, rows stamped outside
the years S3 can show, integers past signed 64 bits, a row whose size disagrees with its
blob, enumerations holding any string: each answers 400 with the cluster's JSON error
{error, message} naming what is wrong, logs no traceback, and changes nothing (both
nodes still list the bucket, the key stays absent). The one valid forged row is applied
and anti-entropy copies it to b: the nodes agree on what they take and what they refuse
(convergence/row_rules.py, asked on both paths)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from objstore.cluster.auth import ClusterSecrets, RequestLine, sign_request
from objstore.cluster.wire import row_document
from objstore.meta.records import ObjectRecord
from tests.cluster.harness import SECRET, Node, start_cluster, wait_for, wait_until_trusted

pytestmark = pytest.mark.timeout(180)

BUCKET = "hostile"
SENDER = "node-b"  # a peer that holds the secret: inside the trust boundary, not infallible
DATA = b"abc"
NESTED = b"[" * 100_000
YEAR_10000 = 253402300800.0
_HTTP = urllib3.PoolManager(retries=False, timeout=30.0)


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {name: {"anti_entropy_interval_seconds": "1"} for name in ("a", "b")}
    with start_cluster(request, tmp_path_factory, ("a", "b"),
                       cluster_overrides=overrides) as started:
        wait_until_trusted(started, deadline=60)
        for node in started.values():
            try:
                node.s3.create_bucket(Bucket=BUCKET)
            except ClientError as exc:  # the first node's bucket may have reached it
                assert exc.response["Error"]["Code"] == "BucketAlreadyOwnedByYou"
        started["a"].s3.put_object(Bucket=BUCKET, Key="before", Body=b"listed")
        yield started
        for node in started.values():
            node.daemon.assert_no_tracebacks()


def call(node: Node, method: str, path: str, body: bytes = b"", query: str = ""
         ) -> urllib3.BaseHTTPResponse:
    """`method` `path` (below /cluster/v1) to `node`, signed as node-b would sign it."""
    full = f"/cluster/v1{path}"
    headers = sign_request(ClusterSecrets(SECRET.encode()), RequestLine(method, full, query),
                           now=time.time(), node_id=SENDER,
                           content_sha256=hashlib.sha256(body).hexdigest())
    url = f"{node.daemon.endpoint}{full}" + (f"?{query}" if query else "")
    return _HTTP.request(method, url, body=body or None, headers=headers)


def refused(answer: urllib3.BaseHTTPResponse, *words: str) -> str:
    """The message of a 400 in the cluster's error shape, holding each of `words`."""
    assert answer.status == 400, (answer.status, answer.data[:300])
    assert answer.headers.get("Content-Type") == "application/json"
    document = json.loads(answer.data)
    assert document["error"] == "BadRequest", document
    message = str(document["message"])
    for word in words:
        assert word in message, message
    return message


def good_row(key: str, blob_id: str) -> ObjectRecord:
    return ObjectRecord(BUCKET, key, "null", blob_id, size=len(DATA),
                        etag=hashlib.md5(DATA).hexdigest(), last_modified=time.time(),
                        owner_id="u-root", owner_name="root")


def post_row(node: Node, record: ObjectRecord, **raw: Any) -> urllib3.BaseHTTPResponse:
    """POST the row, fields in `raw` written into its document as they are (values no
    ObjectRecord a node makes would hold)."""
    document = {**row_document(record), **raw}
    return call(node, "POST", "/object", json.dumps(document).encode())


def put_blob(node: Node, data: bytes = DATA) -> str:
    blob_id = str(uuid.uuid4())
    answer = call(node, "PUT", f"/blob/{blob_id}", data)
    assert answer.status == 200, answer.data
    return blob_id


def absent(node: Node, key: str) -> bool:
    try:
        node.s3.head_object(Bucket=BUCKET, Key=key)
    except ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    return False


def assert_listings_render(nodes: dict[str, Node]) -> None:
    for node in nodes.values():
        keys = [o["Key"] for o in node.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        assert "before" in keys or node is not nodes["a"], keys
        node.s3.list_objects(Bucket=BUCKET)
        node.s3.list_object_versions(Bucket=BUCKET)


# -- deeply nested JSON ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/object", "/object/delete", "/op", "/manifest",
                                  "/admin/audit", "/admin/metrics-history"])
@pytest.mark.parametrize("body", [NESTED, b'{"a":' * 100_000], ids=["arrays", "objects"])
def test_nested_json_to_a_cluster_route_is_refused(nodes: dict[str, Node], path: str,
                                                   body: bytes) -> None:
    """Each was a 500 with a RecursionError traceback per request."""
    refused(call(nodes["a"], "POST", path, body), "nested deeper than")
    nodes["a"].daemon.assert_no_tracebacks()


def test_a_body_to_the_control_snapshot_route_is_not_read(nodes: dict[str, Node]) -> None:
    answer = call(nodes["a"], "POST", "/control-snapshot", NESTED)
    assert answer.status == 200, answer.data[:300]
    assert json.loads(answer.data)["node_id"] == nodes["a"].node_id
    nodes["a"].daemon.assert_no_tracebacks()


# -- rows that no node writes --------------------------------------------------------------


@pytest.mark.parametrize("stamp", [1e18, YEAR_10000, 1.7e308, -1e15], ids=repr)
def test_a_row_stamped_outside_1970_to_9999_is_refused(nodes: dict[str, Node],
                                                       stamp: float) -> None:
    """Applied with 200 and copied everywhere before: then listings, GET and HEAD of the
    key answered 500 on every node (OSError: Value too large)."""
    key = f"stamped-{stamp!r}"
    blob_id = put_blob(nodes["a"])
    refused(post_row(nodes["a"], good_row(key, blob_id), last_modified=stamp),
            "last_modified", "1970 to 9999")
    assert absent(nodes["a"], key)
    assert_listings_render(nodes)


def test_a_retain_until_date_past_9999_is_refused(nodes: dict[str, Node]) -> None:
    """A retain-until date of 1e12 (year 33658) made the key unreadable and undeletable."""
    blob_id = put_blob(nodes["a"])
    record = replace(good_row("retained", blob_id), retention_mode="COMPLIANCE")
    refused(post_row(nodes["a"], record, retain_until_date=1e12), "retain_until_date")
    assert absent(nodes["a"], "retained")
    assert_listings_render(nodes)


def test_a_deletion_stamped_past_9999_is_refused(nodes: dict[str, Node]) -> None:
    body = json.dumps({"bucket": BUCKET, "key": "before", "version_id": "null",
                       "deleted_at": 1e18, "protocol": 1}).encode()
    refused(call(nodes["a"], "POST", "/object/delete", body), "deleted_at")
    assert nodes["a"].s3.get_object(Bucket=BUCKET, Key="before")["Body"].read() == b"listed"


def test_integers_past_signed_64_bit_are_refused(nodes: dict[str, Node]) -> None:
    """OverflowError in SQLite: a 500 before."""
    blob_id = put_blob(nodes["a"])
    refused(post_row(nodes["a"], good_row("huge", blob_id), size=10 ** 30), "signed 64-bit")
    refused(call(nodes["a"], "POST", "/manifest",
                 json.dumps({"since": 2 ** 63, "protocol": 1}).encode()), "signed 64-bit")
    assert absent(nodes["a"], "huge")
    # The manifest still answers a sane request.
    answer = call(nodes["a"], "POST", "/manifest", json.dumps({"since": 0}).encode())
    assert answer.status == 200, answer.data[:300]


@pytest.mark.parametrize(("field", "value"), [
    ("legal_hold_status", "MAYBE"), ("storage_class", "FAST"),
    ("encryption_algorithm", "rot13"), ("replication_status", "DONE"),
    ("content_type", "text/plain\r\nSet-Cookie: stolen=1"),
    ("user_metadata", {"color": "blue\r\nX-Injected: 1"}),
    ("system_headers", {"location": "https://elsewhere.example"}),
])
def test_enumerations_and_header_values_are_checked(nodes: dict[str, Node], field: str,
                                                    value: object) -> None:
    """Any string was stored and served back as a header."""
    key = f"enum-{field}"
    blob_id = put_blob(nodes["a"])
    refused(post_row(nodes["a"], good_row(key, blob_id), **{field: value}), field)
    assert absent(nodes["a"], key)


def test_a_row_whose_size_disagrees_with_its_blob_is_refused(nodes: dict[str, Node]) -> None:
    """The blob route stores 3 bytes, then a row says 4 EiB: HEAD showed 4 EiB and GET
    dropped the connection, while anti-entropy refused the same row (the nodes
    disagreed). Now refused here too; the row with the true size is applied, and
    anti-entropy copies it to b."""
    blob_id = put_blob(nodes["a"])
    record = good_row("sized", blob_id)
    refused(post_row(nodes["a"], replace(record, size=2 ** 62)), "3 bytes")
    assert absent(nodes["a"], "sized")

    answer = post_row(nodes["a"], record)
    assert answer.status == 200, answer.data
    assert json.loads(answer.data) == {"applied": True, "has_blob": True}
    head = nodes["a"].s3.head_object(Bucket=BUCKET, Key="sized")
    assert head["ContentLength"] == len(DATA)
    assert nodes["a"].s3.get_object(Bucket=BUCKET, Key="sized")["Body"].read() == DATA

    def copied_to_b() -> bool:
        return not absent(nodes["b"], "sized")

    wait_for("anti-entropy copies the valid row to b", copied_to_b, deadline=60)
    assert nodes["b"].s3.get_object(Bucket=BUCKET, Key="sized")["Body"].read() == DATA
    assert_listings_render(nodes)


def test_a_row_carrying_bytes_that_are_not_its_own_is_refused(nodes: dict[str, Node]
                                                               ) -> None:
    """A row may carry its small blob's bytes (`blob_base64`, cluster/wire.py): bytes
    that are not base64, not the row's length or not the MD5 of its ETag are a 400 and
    store nothing; the row with its true bytes is applied with them in one request."""
    record = good_row("inline", str(uuid.uuid4()))
    encoded = base64.b64encode(DATA).decode()
    refused(post_row(nodes["a"], record, blob_base64="not base64!"), "blob_base64")
    refused(post_row(nodes["a"], record, blob_base64=7), "blob_base64")
    refused(post_row(nodes["a"], record, blob_base64=base64.b64encode(b"abd").decode()),
            "BadDigest")
    refused(post_row(nodes["a"], record, blob_base64=base64.b64encode(b"abcd").decode()),
            "4 bytes")
    assert absent(nodes["a"], "inline")

    answer = post_row(nodes["a"], record, blob_base64=encoded)
    assert answer.status == 200, answer.data
    assert json.loads(answer.data) == {"applied": True, "has_blob": True}
    assert nodes["a"].s3.get_object(Bucket=BUCKET, Key="inline")["Body"].read() == DATA


def test_rows_clients_write_pass_the_same_rules(nodes: dict[str, Node]) -> None:
    """The rules take every row a node writes for a client: in quorum mode with two nodes
    a write answers 200 only once b applied it through the direct route. A multipart
    upload with composite checksums ("<base64>-N"), a PUT with metadata, tags, a system
    header, a storage class and a SHA-256 checksum, and a copy."""
    s3 = nodes["a"].s3
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="multi", ChecksumAlgorithm="CRC32")
    parts = []
    for number, data in ((1, b"x" * (5 * 1024 * 1024)), (2, b"tail")):
        part = s3.upload_part(Bucket=BUCKET, Key="multi", UploadId=upload["UploadId"],
                              PartNumber=number, Body=data, ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": number, "ETag": part["ETag"],
                      "ChecksumCRC32": part["ChecksumCRC32"]})
    done = s3.complete_multipart_upload(Bucket=BUCKET, Key="multi",
                                        UploadId=upload["UploadId"],
                                        MultipartUpload={"Parts": parts})
    assert done["ChecksumCRC32"].endswith("-2")
    s3.put_object(Bucket=BUCKET, Key="dressed", Body=DATA, Metadata={"color": "blue\tgreen"},
                  Tagging="team=ops", CacheControl="no-cache", StorageClass="STANDARD_IA",
                  ContentType="text/plain; charset=utf-8", ChecksumAlgorithm="SHA256")
    s3.copy_object(Bucket=BUCKET, Key="copied", CopySource={"Bucket": BUCKET, "Key": "dressed"})
    b = nodes["b"].s3
    head = b.head_object(Bucket=BUCKET, Key="dressed")
    assert head["Metadata"] == {"color": "blue\tgreen"} and head["StorageClass"] == "STANDARD_IA"
    assert b.head_object(Bucket=BUCKET, Key="multi")["ContentLength"] == 5 * 1024 * 1024 + 4
    assert b.get_object(Bucket=BUCKET, Key="copied")["Body"].read() == DATA


def test_nothing_refused_reached_either_node(nodes: dict[str, Node]) -> None:
    """After every refusal above, each node lists the bucket (ListObjects V1, V2 and
    versions all render) and holds no key of a refused row."""
    assert_listings_render(nodes)
    for node in nodes.values():
        listed = node.s3.list_object_versions(Bucket=BUCKET)
        keys = {v["Key"] for v in listed.get("Versions", [])}
        assert not {k for k in keys if k.startswith(("stamped-", "enum-", "huge",
                                                     "retained"))}, keys
        node.daemon.assert_no_tracebacks()
