"""Object operations real clients rely on, end to end against the real daemon: conditional
reads and writes, x-amz-tagging, partNumber, DeleteObjects, CopyObject (boto3 and
`aws s3 cp`), GetObjectAttributes and the benign ACL answers."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from objstore.meta.records import ObjectRecord
from objstore.meta.store import SyncMetaStore, open_sync_store
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon
from tests.integration.test_aws_cli import aws

ODD_KEYS = ["with space.txt", "plus+sign", "per%cent", "ünïcödé/ключ", "dir/", "a&b<c>\"'"]
PART = 5 * 1024 * 1024
HOUR_AGO = formatdate(time.time() - 3600, usegmt=True)
IN_AN_HOUR = formatdate(time.time() + 3600, usegmt=True)


# -- helpers -----------------------------------------------------------------------------


def new_bucket(s3: Any) -> str:
    name = f"o-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name


def code_of(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return str(excinfo.value.response["Error"]["Code"])


def status_of(excinfo: pytest.ExceptionInfo[ClientError]) -> int:
    return int(excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"])


def headers_of(excinfo: pytest.ExceptionInfo[ClientError]) -> dict[str, str]:
    return dict(excinfo.value.response["ResponseMetadata"]["HTTPHeaders"])


def count_blobs(daemon: Daemon) -> int:
    return sum(
        1 for _, _, files in os.walk(daemon.data_dir / "blobs")
        for f in files if not f.endswith(".meta.json")
    )


def signed(daemon: Daemon, method: str, path: str, *, body: bytes = b"",
           headers: dict[str, str] | None = None) -> urllib3.BaseHTTPResponse:
    """A raw SigV4-signed request, for what the SDK refuses to send (bad bodies, missing
    headers, out-of-range parameters). `path` is already URL-encoded, query included."""
    url = daemon.endpoint + path
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    request.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    S3SigV4Auth(Credentials(ROOT_ACCESS_KEY, ROOT_SECRET_KEY), "s3", "us-east-1").add_auth(
        request
    )
    return urllib3.PoolManager(retries=False).request(
        method, url, body=body, headers=dict(request.headers.items())
    )


def xml_code(response: urllib3.BaseHTTPResponse) -> str:
    data = response.data.decode()
    return data.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in data else ""


@dataclass(frozen=True)
class StorageSettings:
    data_dir: str
    metadata_backend: str
    postgres_url: str | None
    sqlite_path: str | None = None
    db_pool_size: int = 1


@pytest.fixture
def meta(daemon: Daemon) -> Iterator[SyncMetaStore]:
    """The daemon's metadata database, opened from the test (for states no S3 call can
    make: other users, objects larger than a test should write)."""
    url = None
    if daemon.pg_database:
        url = f"postgresql://postgres@127.0.0.1:5432/{daemon.pg_database}"
    store = open_sync_store(StorageSettings(str(daemon.data_dir), daemon.backend, url))
    yield store
    store.close()


def allow(actions: list[str], resources: list[str]) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources}


def user_with(daemon: Daemon, *statements: dict[str, Any]) -> Any:
    """A boto3 client of a new non-root user holding one grant made of `statements`."""
    admin = AdminClient(daemon.endpoint)
    user = admin.ok("POST", "/users", {"username": f"user-{uuid.uuid4().hex[:10]}"}, 201)
    credential = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    grant = admin.ok("POST", "/grants", {"name": f"grant-{uuid.uuid4().hex[:10]}",
                                         "document": document}, 201)
    admin.ok("PUT", f"/users/{user['user_id']}/grants/{grant['grant_id']}", None, 204)
    client: Any = make_client(daemon.endpoint, credential["access_key_id"],
                              credential["secret_access_key"])
    client.username = user["username"]
    return client


@pytest.fixture
def bucket(s3: Any) -> str:
    return new_bucket(s3)


# -- conditional GET / HEAD --------------------------------------------------------------


def test_if_match_and_if_unmodified_since(s3: Any, bucket: str) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"hello")["ETag"]
    assert s3.get_object(Bucket=bucket, Key="k", IfMatch=etag)["Body"].read() == b"hello"
    assert s3.get_object(Bucket=bucket, Key="k", IfUnmodifiedSince=IN_AN_HOUR)["ETag"] == etag
    for condition in ({"IfMatch": '"0123"'}, {"IfUnmodifiedSince": HOUR_AGO}):
        with pytest.raises(ClientError) as caught:
            s3.get_object(Bucket=bucket, Key="k", **condition)
        assert code_of(caught) == "PreconditionFailed"
        with pytest.raises(ClientError) as caught:
            s3.head_object(Bucket=bucket, Key="k", **condition)
        assert status_of(caught) == 412
    # If-Match wins over a failing If-Unmodified-Since
    got = s3.get_object(Bucket=bucket, Key="k", IfMatch=etag, IfUnmodifiedSince=HOUR_AGO)
    assert got["Body"].read() == b"hello"


def test_not_modified_carries_validators_and_no_body(s3: Any, bucket: str,
                                                     daemon: Daemon) -> None:
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"hello")
    for condition in ({"IfNoneMatch": put["ETag"]}, {"IfModifiedSince": IN_AN_HOUR}):
        for call in (s3.get_object, s3.head_object):
            with pytest.raises(ClientError) as caught:
                call(Bucket=bucket, Key="k", **condition)
            assert status_of(caught) == 304
            headers = headers_of(caught)
            assert headers["etag"] == put["ETag"]
            assert headers["last-modified"]
    raw = signed(daemon, "GET", f"/{bucket}/k", headers={"If-None-Match": put["ETag"]})
    assert raw.status == 304 and raw.data == b""
    # If-None-Match that does not match wins over a failing If-Modified-Since
    got = s3.get_object(Bucket=bucket, Key="k", IfNoneMatch='"other"',
                        IfModifiedSince=IN_AN_HOUR)
    assert got["Body"].read() == b"hello"
    assert s3.get_object(Bucket=bucket, Key="k", IfModifiedSince=HOUR_AGO)["ETag"] == put["ETag"]


def test_precondition_failed_on_head_has_no_body(daemon: Daemon, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    raw = signed(daemon, "HEAD", f"/{bucket}/k", headers={"If-Match": '"nope"'})
    assert raw.status == 412 and raw.data == b""
    raw = signed(daemon, "GET", f"/{bucket}/k", headers={"If-Match": '"nope"'})
    assert raw.status == 412 and xml_code(raw) == "PreconditionFailed"


# -- conditional PutObject ---------------------------------------------------------------


def test_create_only_put(daemon: Daemon, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    blobs = count_blobs(daemon)
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert code_of(caught) == "PreconditionFailed" and status_of(caught) == 412
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"
    assert count_blobs(daemon) == blobs  # the refused write left no blob behind


def test_put_if_match(daemon: Daemon, s3: Any, bucket: str) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["ETag"]
    blobs = count_blobs(daemon)
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=bucket, Key="k", Body=b"lost", IfMatch='"' + "0" * 32 + '"')
    assert code_of(caught) == "PreconditionFailed"
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=bucket, Key="absent", Body=b"lost", IfMatch=etag)
    assert code_of(caught) == "NoSuchKey"
    assert count_blobs(daemon) == blobs
    s3.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"


def test_put_if_none_match_with_an_etag(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", IfNoneMatch='"abc"')  # nothing there
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"v1", IfNoneMatch='"abc"')["ETag"]
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=bucket, Key="k", Body=b"v2", IfNoneMatch=etag)
    assert code_of(caught) == "PreconditionFailed" and status_of(caught) == 412
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1"


SSE_C_KEY = b"k" * 32
SSE_C = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": SSE_C_KEY.decode()}


@pytest.mark.parametrize("encryption", [
    {"ServerSideEncryption": "AES256"},
    {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "some-key"},
    SSE_C,
], ids=["sse-s3", "sse-kms", "sse-c"])
def test_encryption_requests_are_refused_and_store_nothing(
        daemon: Daemon, s3: Any, bucket: str, encryption: dict[str, str]) -> None:
    """A request asking for encryption this daemon can not give must never be stored in
    plaintext behind a 200: PutObject, CopyObject, CreateMultipartUpload and UploadPart
    are refused, 501 NotImplemented for SSE-S3 without [encryption] and for SSE-KMS, 400
    InvalidRequest for SSE-C over plain HTTP (as AWS)."""
    expected = ("InvalidRequest", 400) if "SSECustomerKey" in encryption else (
        "NotImplemented", 501)
    s3.put_object(Bucket=bucket, Key="plain", Body=b"plain bytes")
    blobs = count_blobs(daemon)
    attempts = [
        lambda: s3.put_object(Bucket=bucket, Key="secret", Body=b"secret", **encryption),
        lambda: s3.copy_object(Bucket=bucket, Key="secret",
                               CopySource={"Bucket": bucket, "Key": "plain"}, **encryption),
        lambda: s3.create_multipart_upload(Bucket=bucket, Key="secret", **encryption),
    ]
    for attempt in attempts:
        with pytest.raises(ClientError) as caught:
            attempt()
        assert (code_of(caught), status_of(caught)) == expected
    upload = s3.create_multipart_upload(Bucket=bucket, Key="secret")["UploadId"]
    if "SSECustomerKey" in encryption:
        with pytest.raises(ClientError) as caught:
            s3.upload_part(Bucket=bucket, Key="secret", UploadId=upload, PartNumber=1,
                           Body=b"part", **encryption)
        assert code_of(caught) == "InvalidRequest"
        parts = s3.list_parts(Bucket=bucket, Key="secret", UploadId=upload)
        assert parts.get("Parts", []) == []
    s3.abort_multipart_upload(Bucket=bucket, Key="secret", UploadId=upload)
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="secret")
    assert count_blobs(daemon) == blobs


def test_sse_c_reads_and_copy_sources_are_refused(s3: Any, bucket: str) -> None:
    """SSE-C over plain HTTP (no [encryption] allow_ssec_over_http): 400, as AWS."""
    s3.put_object(Bucket=bucket, Key="plain", Body=b"plain bytes")
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="plain", **SSE_C)
    assert code_of(caught) == "InvalidRequest"
    with pytest.raises(ClientError) as caught:
        s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "plain"},
                       CopySourceSSECustomerAlgorithm="AES256",
                       CopySourceSSECustomerKey=SSE_C_KEY.decode())
    assert code_of(caught) == "InvalidRequest"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="copy")


def test_bucket_encryption_configuration_is_refused(s3: Any, bucket: str) -> None:
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    with pytest.raises(ClientError) as caught:
        s3.put_bucket_encryption(Bucket=bucket,
                                 ServerSideEncryptionConfiguration={"Rules": [rule]})
    assert code_of(caught) == "NotImplemented" and status_of(caught) == 501
    s3.put_object(Bucket=bucket, Key="after", Body=b"x")
    assert "ServerSideEncryption" not in s3.head_object(Bucket=bucket, Key="after")


def test_concurrent_create_only_puts_have_one_winner(daemon: Daemon, bucket: str) -> None:
    def attempt(index: int) -> str:
        client: Any = make_client(daemon.endpoint)
        try:
            client.put_object(Bucket=bucket, Key="race", Body=f"writer {index}".encode(),
                              IfNoneMatch="*")
        except ClientError as error:
            return str(error.response["Error"]["Code"])
        return "ok"

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(16)))
    assert results.count("ok") == 1
    assert set(results) == {"ok", "PreconditionFailed"}


# -- x-amz-tagging on PutObject ----------------------------------------------------------


def test_put_with_tagging_reports_the_count(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&b=two%20words&empty=")
    assert s3.get_object(Bucket=bucket, Key="t")["TagCount"] == 3
    head = s3.head_object(Bucket=bucket, Key="t")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "3"
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    assert "TagCount" not in s3.get_object(Bucket=bucket, Key="plain")


@pytest.mark.parametrize("tagging", [
    "&".join(f"k{i}=v" for i in range(11)),
    "k" * 129 + "=v",
    "k=" + "v" * 257,
    "k=1&k=2",
    "aws:owner=me",
    "=novalue",
])
def test_invalid_tagging_header_is_refused(s3: Any, bucket: str, tagging: str) -> None:
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging=tagging)
    assert code_of(caught) == "InvalidTag"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="t")


# -- partNumber --------------------------------------------------------------------------


def test_part_number_of_a_plain_object(daemon: Daemon, s3: Any, bucket: str) -> None:
    body = os.urandom(1000)
    s3.put_object(Bucket=bucket, Key="p", Body=body)
    got = s3.get_object(Bucket=bucket, Key="p", PartNumber=1)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == "bytes 0-999/1000"
    assert got["Body"].read() == body
    assert "PartsCount" not in got
    head = s3.head_object(Bucket=bucket, Key="p", PartNumber=1)
    assert head["ContentLength"] == 1000 and head["ContentRange"] == "bytes 0-999/1000"
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="p", PartNumber=2)
    assert code_of(caught) == "InvalidPartNumber" and status_of(caught) == 416
    with pytest.raises(ClientError) as caught:
        s3.head_object(Bucket=bucket, Key="p", PartNumber=2)
    assert status_of(caught) == 416
    for bad in ("0", "10001", "x"):
        raw = signed(daemon, "GET", f"/{bucket}/p?partNumber={bad}")
        assert raw.status == 400 and xml_code(raw) == "InvalidArgument", bad
    raw = signed(daemon, "GET", f"/{bucket}/p?partNumber=1", headers={"Range": "bytes=0-1"})
    assert raw.status == 400 and xml_code(raw) == "InvalidRequest"


def upload_composite(s3: Any, bucket: str, key: str, sizes: list[int],
                     **create: Any) -> list[bytes]:
    """A completed multipart upload of random parts of the given sizes."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    algorithm = create.get("ChecksumAlgorithm")
    datas = [os.urandom(size) for size in sizes]
    listed = []
    for number, data in enumerate(datas, start=1):
        extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
        part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number,
                              Body=data, **extra)
        entry = {"PartNumber": number, "ETag": part["ETag"]}
        if algorithm and create.get("ChecksumType") != "FULL_OBJECT":
            entry[f"Checksum{algorithm}"] = part[f"Checksum{algorithm}"]
        listed.append(entry)
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                 MultipartUpload={"Parts": listed})
    return datas


def test_part_number_of_a_composite_object(s3: Any, bucket: str) -> None:
    datas = upload_composite(s3, bucket, "m", [PART, PART, 1000])
    total = sum(map(len, datas))
    got = s3.get_object(Bucket=bucket, Key="m", PartNumber=2)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == f"bytes {PART}-{2 * PART - 1}/{total}"
    assert got["PartsCount"] == 3
    assert got["Body"].read() == datas[1]
    head = s3.head_object(Bucket=bucket, Key="m", PartNumber=3)
    assert head["ContentLength"] == 1000 and head["PartsCount"] == 3
    assert head["ContentRange"] == f"bytes {2 * PART}-{total - 1}/{total}"
    assert "PartsCount" not in s3.head_object(Bucket=bucket, Key="m")  # only with partNumber
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="m", PartNumber=4)
    assert code_of(caught) == "InvalidPartNumber"


# -- DeleteObjects -----------------------------------------------------------------------


def test_delete_objects_with_odd_keys(s3: Any, bucket: str) -> None:
    for key in ODD_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    s3.put_object(Bucket=bucket, Key="keep", Body=b"x")
    names = [*ODD_KEYS, "never-existed"]
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in names]})
    assert sorted(d["Key"] for d in result["Deleted"]) == sorted(names)
    assert "Errors" not in result
    listed = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed["Contents"]] == ["keep"]


def test_delete_objects_quiet_lists_only_errors(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="a", Body=b"x")
    s3.put_object(Bucket=bucket, Key="b", Body=b"x")
    result = s3.delete_objects(Bucket=bucket, Delete={"Quiet": True, "Objects": [
        {"Key": "a"},
        {"Key": "b", "VersionId": "null"},
        {"Key": "c", "VersionId": "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"},
    ]})
    assert "Deleted" not in result
    assert result["Errors"] == [{  # not an id this server could have issued
        "Key": "c", "VersionId": "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY", "Code": "InvalidArgument",
        "Message": "Invalid version id specified",
    }]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    loud = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a",
                                                                  "VersionId": "null"}]})
    assert loud["Deleted"] == [{"Key": "a", "VersionId": "null"}]


def test_delete_objects_with_1000_long_keys(s3: Any, bucket: str) -> None:
    keys = [f"{i:04d}" + "&" * 1000 for i in range(1000)]  # ~5 MB of XML once escaped
    for key in keys[:3]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert len(result["Deleted"]) == 1000 and "Errors" not in result
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_delete_objects_request_errors(daemon: Daemon, s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as caught:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [
            {"Key": f"k{i}"} for i in range(1001)]})
    assert code_of(caught) == "MalformedXML"
    with pytest.raises(ClientError) as caught:
        s3.delete_objects(Bucket="no-such-bucket-" + uuid.uuid4().hex[:8],
                          Delete={"Objects": [{"Key": "k"}]})
    assert code_of(caught) == "NoSuchBucket"
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    document = b"<Delete><Object><Key>k</Key></Object></Delete>"
    md5 = base64.b64encode(hashlib.md5(document).digest()).decode()
    bare = signed(daemon, "POST", f"/{bucket}?delete", body=document)
    assert bare.status == 400 and xml_code(bare) == "InvalidRequest"
    for bad in (b"<Delete><Object><Key>k</Key></Object>", b"<Delete></Delete>",
                b"<Delete><Object><VersionId>v</VersionId></Object></Delete>",
                b"<Delete><Quiet>maybe</Quiet><Object><Key>k</Key></Object></Delete>"):
        digest = base64.b64encode(hashlib.md5(bad).digest()).decode()
        refused = signed(daemon, "POST", f"/{bucket}?delete", body=bad,
                         headers={"Content-MD5": digest})
        assert refused.status == 400 and xml_code(refused) == "MalformedXML", bad
    wrong = signed(daemon, "POST", f"/{bucket}?delete", body=document,
                   headers={"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="})
    assert wrong.status == 400 and xml_code(wrong) == "BadDigest"
    assert s3.head_object(Bucket=bucket, Key="k")["ContentLength"] == 1  # nothing deleted
    ok = signed(daemon, "POST", f"/{bucket}?delete", body=document,
                headers={"Content-MD5": md5})
    assert ok.status == 200 and b"<Deleted><Key>k</Key></Deleted>" in ok.data


def test_delete_objects_authorizes_every_key(daemon: Daemon, s3: Any, bucket: str) -> None:
    alice = user_with(daemon, allow(["s3:DeleteObject"], [f"arn:aws:s3:::{bucket}/open/*"]))
    for key in ("open/a", "guarded"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    result = alice.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "open/a"}, {"Key": "guarded"}, {"Key": "open/b", "VersionId": "null"}]})
    # with a VersionId the key needs s3:DeleteObjectVersion, as on AWS, which the spec's
    # s3:DeleteObject covers (S3-ACTIONS.md) ...
    assert [d["Key"] for d in result["Deleted"]] == ["open/a", "open/b"]
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("guarded", "AccessDenied")]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["guarded"]
    # ... unless a Deny names the granular action
    bob = user_with(daemon, allow(["s3:DeleteObject"], [f"arn:aws:s3:::{bucket}/*"]),
                    {"Effect": "Deny", "Action": ["s3:DeleteObjectVersion"],
                     "Resource": ["*"]})
    result = bob.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "guarded", "VersionId": "null"}]})
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("guarded", "AccessDenied")]


# -- CopyObject --------------------------------------------------------------------------


def test_copy_keeps_bytes_metadata_and_tags(daemon: Daemon, s3: Any, bucket: str) -> None:
    target = new_bucket(s3)
    body = os.urandom(3_000_000)
    put = s3.put_object(Bucket=bucket, Key="src", Body=body, ContentType="text/x-test",
                        Metadata={"colour": "blue"}, CacheControl="max-age=9",
                        StorageClass="STANDARD_IA", Tagging="a=1&b=2")
    blobs = count_blobs(daemon)
    copied = s3.copy_object(Bucket=target, Key="dst", CopySource={"Bucket": bucket,
                                                                    "Key": "src"})
    assert copied["CopyObjectResult"]["ETag"] == put["ETag"]
    assert copied["CopyObjectResult"]["LastModified"]
    assert "CopySourceVersionId" not in copied and "VersionId" not in copied
    assert count_blobs(daemon) == blobs + 1  # a blob of its own, not a shared file
    got = s3.get_object(Bucket=target, Key="dst")
    assert got["Body"].read() == body
    assert got["ETag"] == put["ETag"]
    assert got["ContentType"] == "text/x-test"
    assert got["Metadata"] == {"colour": "blue"}
    assert got["CacheControl"] == "max-age=9"
    assert got["TagCount"] == 2
    assert "StorageClass" not in got  # the destination's class is STANDARD unless asked
    s3.delete_object(Bucket=bucket, Key="src")
    assert s3.get_object(Bucket=target, Key="dst")["Body"].read() == body


def test_copy_needs_read_on_the_source_and_write_on_the_destination(
    daemon: Daemon, s3: Any, bucket: str,
) -> None:
    target = new_bucket(s3)
    for key in ("readable", "secret"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    copier = user_with(
        daemon,
        allow(["s3:GetObject"], [f"arn:aws:s3:::{bucket}/readable"]),
        allow(["s3:PutObject"], [f"arn:aws:s3:::{target}/*"]),
    )
    copier.copy_object(Bucket=target, Key="copy", CopySource=f"{bucket}/readable")
    assert s3.get_object(Bucket=target, Key="copy")["Body"].read() == b"readable"
    assert s3.get_object_acl(Bucket=target, Key="copy")["Owner"]["DisplayName"] == \
        copier.username  # the writer owns the copy
    refused: list[dict[str, Any]] = [
        {"Bucket": target, "Key": "c2", "CopySource": f"{bucket}/secret"},
        {"Bucket": bucket, "Key": "c3", "CopySource": f"{bucket}/readable"},
    ]
    for params in refused:
        with pytest.raises(ClientError) as caught:
            copier.copy_object(**params)
        assert code_of(caught) == "AccessDenied", params
    assert s3.list_objects_v2(Bucket=target)["KeyCount"] == 1
    # a source version needs s3:GetObjectVersion, which the spec's s3:GetObject covers
    copier.copy_object(Bucket=target, Key="c4", CopySource={
        "Bucket": bucket, "Key": "readable", "VersionId": "null"})


def test_copy_replace_directives(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"data", ContentType="text/plain",
                  Metadata={"old": "1"}, Tagging="a=1")
    s3.copy_object(Bucket=bucket, Key="dst", CopySource=f"{bucket}/src",
                   MetadataDirective="REPLACE", ContentType="application/json",
                   Metadata={"new": "2"}, TaggingDirective="REPLACE", Tagging="x=1&y=2&z=3",
                   StorageClass="STANDARD_IA")
    got = s3.get_object(Bucket=bucket, Key="dst")
    assert got["ContentType"] == "application/json"
    assert got["Metadata"] == {"new": "2"}
    assert got["TagCount"] == 3
    assert got["StorageClass"] == "STANDARD_IA"
    s3.copy_object(Bucket=bucket, Key="untagged", CopySource=f"{bucket}/src",
                   TaggingDirective="REPLACE")
    assert "TagCount" not in s3.get_object(Bucket=bucket, Key="untagged")
    with pytest.raises(ClientError) as caught:
        s3.copy_object(Bucket=bucket, Key="dst", CopySource=f"{bucket}/src",
                       MetadataDirective="MERGE")
    assert code_of(caught) == "InvalidArgument"


@pytest.mark.parametrize("key", ODD_KEYS)
def test_copy_sources_with_odd_keys(daemon: Daemon, s3: Any, bucket: str, key: str) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    s3.copy_object(Bucket=bucket, Key=key + ".copy", CopySource={"Bucket": bucket, "Key": key})
    assert s3.get_object(Bucket=bucket, Key=key + ".copy")["Body"].read() == key.encode()
    # the header as other clients write it: URL-encoded path with a leading slash
    source = quote(f"/{bucket}/{key}", safe="/")
    raw = signed(daemon, "PUT", f"/{bucket}/{quote('raw/' + key, safe='/')}",
                 headers={"x-amz-copy-source": source})
    assert raw.status == 200, raw.data
    assert s3.get_object(Bucket=bucket, Key="raw/" + key)["Body"].read() == key.encode()


def test_copy_source_version_null(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"v")
    s3.copy_object(Bucket=bucket, Key="dst",
                   CopySource={"Bucket": bucket, "Key": "src", "VersionId": "null"})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"v"
    with pytest.raises(ClientError) as caught:
        s3.copy_object(Bucket=bucket, Key="dst", CopySource={
            "Bucket": bucket, "Key": "src", "VersionId": str(uuid.uuid4())})
    assert code_of(caught) == "NoSuchVersion"


def test_copy_missing_things(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"v")
    missing = "no-such-bucket-" + uuid.uuid4().hex[:8]
    cases = [
        ({"Bucket": bucket, "Key": "dst", "CopySource": f"{bucket}/absent"}, "NoSuchKey"),
        ({"Bucket": bucket, "Key": "dst", "CopySource": f"{missing}/src"}, "NoSuchBucket"),
        ({"Bucket": missing, "Key": "dst", "CopySource": f"{bucket}/src"}, "NoSuchBucket"),
    ]
    for params, code in cases:
        with pytest.raises(ClientError) as caught:
            s3.copy_object(**params)
        assert code_of(caught) == code, params


def test_copy_source_conditions(s3: Any, bucket: str) -> None:
    etag = s3.put_object(Bucket=bucket, Key="src", Body=b"v")["ETag"]
    source = f"{bucket}/src"
    for condition in ({"CopySourceIfMatch": '"nope"'}, {"CopySourceIfNoneMatch": etag},
                      {"CopySourceIfModifiedSince": IN_AN_HOUR},
                      {"CopySourceIfUnmodifiedSince": HOUR_AGO}):
        with pytest.raises(ClientError) as caught:
            s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, **condition)
        assert code_of(caught) == "PreconditionFailed" and status_of(caught) == 412
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="dst")
    s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, CopySourceIfMatch=etag,
                   CopySourceIfUnmodifiedSince=IN_AN_HOUR)
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"v"


def test_conditional_copy_destination(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"new")
    s3.put_object(Bucket=bucket, Key="dst", Body=b"old")
    with pytest.raises(ClientError) as caught:
        s3.copy_object(Bucket=bucket, Key="dst", CopySource=f"{bucket}/src", IfNoneMatch="*")
    assert code_of(caught) == "PreconditionFailed"
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"old"


def test_copy_onto_itself(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="self", Body=b"v", Metadata={"a": "1"})
    with pytest.raises(ClientError) as caught:
        s3.copy_object(Bucket=bucket, Key="self", CopySource=f"{bucket}/self")
    assert code_of(caught) == "InvalidRequest"
    assert "copy an object to itself" in caught.value.response["Error"]["Message"]
    s3.copy_object(Bucket=bucket, Key="self", CopySource=f"{bucket}/self",
                   MetadataDirective="REPLACE", Metadata={"a": "2"})
    assert s3.head_object(Bucket=bucket, Key="self")["Metadata"] == {"a": "2"}
    s3.copy_object(Bucket=bucket, Key="self", CopySource=f"{bucket}/self",
                   StorageClass="STANDARD_IA")
    head = s3.head_object(Bucket=bucket, Key="self")
    assert head["StorageClass"] == "STANDARD_IA" and head["Metadata"] == {"a": "2"}
    assert s3.get_object(Bucket=bucket, Key="self")["Body"].read() == b"v"


def test_copy_carries_full_object_checksums(s3: Any, bucket: str) -> None:
    put = s3.put_object(Bucket=bucket, Key="src", Body=b"checked", ChecksumAlgorithm="SHA256")
    copied = s3.copy_object(Bucket=bucket, Key="dst", CopySource=f"{bucket}/src")
    assert copied["CopyObjectResult"]["ChecksumSHA256"] == put["ChecksumSHA256"]
    head = s3.head_object(Bucket=bucket, Key="dst", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == put["ChecksumSHA256"]


def test_copy_source_above_5_gib_is_refused(s3: Any, bucket: str,
                                            meta: SyncMetaStore) -> None:
    # A row only: no test should write 5 GiB; the refusal must come before any byte moves.
    meta.put_object(ObjectRecord(bucket=bucket, key="huge", version_id="null",
                                 blob_id=str(uuid.uuid4()), size=5 * 1024**3 + 1,
                                 etag="0" * 32, last_modified=time.time()))
    with pytest.raises(ClientError) as caught:
        s3.copy_object(Bucket=bucket, Key="dst", CopySource=f"{bucket}/huge")
    assert code_of(caught) == "InvalidRequest"
    assert "5368709120" in caught.value.response["Error"]["Message"]
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="dst")


def test_aws_cli_server_side_copy(daemon: Daemon, s3: Any, aws_env: dict[str, str],
                                  bucket: str, tmp_path: Path) -> None:
    target = new_bucket(s3)
    body = os.urandom(200_000)
    s3.put_object(Bucket=bucket, Key="dir/a b+c.bin", Body=body)
    copied = aws(aws_env, daemon.endpoint, "s3", "cp", f"s3://{bucket}/dir/a b+c.bin",
                 f"s3://{target}/copied/ü.bin")
    assert copied.returncode == 0, copied.stderr
    assert s3.get_object(Bucket=target, Key="copied/ü.bin")["Body"].read() == body
    listed = aws(aws_env, daemon.endpoint, "s3api", "list-objects-v2", "--bucket", target)
    assert [o["Key"] for o in json.loads(listed.stdout)["Contents"]] == ["copied/ü.bin"]


@pytest.mark.parametrize(("create", "carried"), [
    ({"ChecksumAlgorithm": "SHA256"}, False),
    ({"ChecksumAlgorithm": "CRC32", "ChecksumType": "FULL_OBJECT"}, True),
])
def test_copy_of_a_composite_is_a_plain_object(s3: Any, bucket: str, create: dict[str, str],
                                               carried: bool) -> None:
    datas = upload_composite(s3, bucket, "m", [PART, 300], **create)
    content = b"".join(datas)
    source = s3.head_object(Bucket=bucket, Key="m", ChecksumMode="ENABLED")
    copied = s3.copy_object(Bucket=bucket, Key="flat", CopySource=f"{bucket}/m")
    etag = f'"{hashlib.md5(content).hexdigest()}"'
    assert copied["CopyObjectResult"]["ETag"] == etag
    got = s3.get_object(Bucket=bucket, Key="flat", ChecksumMode="ENABLED")
    assert got["ETag"] == etag and got["Body"].read() == content
    member = "Checksum" + create["ChecksumAlgorithm"]
    if carried:  # a full-object checksum describes the bytes wherever they are
        assert got[member] == source[member] and got["ChecksumType"] == "FULL_OBJECT"
    else:  # a composite one describes parts the copy no longer has
        assert member not in got
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="flat", PartNumber=2)
    assert code_of(caught) == "InvalidPartNumber"
    attributes = s3.get_object_attributes(Bucket=bucket, Key="flat",
                                          ObjectAttributes=["ObjectParts", "ETag"])
    assert "ObjectParts" not in attributes and attributes["ETag"] == etag.strip('"')


# -- GetObjectAttributes -----------------------------------------------------------------


def test_object_attributes_of_a_plain_object(daemon: Daemon, s3: Any, bucket: str) -> None:
    put = s3.put_object(Bucket=bucket, Key="a", Body=b"attributes", ChecksumAlgorithm="SHA256",
                        StorageClass="STANDARD_IA")
    got = s3.get_object_attributes(Bucket=bucket, Key="a", ObjectAttributes=[
        "ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
    assert got["ETag"] == put["ETag"].strip('"')
    assert got["Checksum"] == {"ChecksumSHA256": put["ChecksumSHA256"],
                               "ChecksumType": "FULL_OBJECT"}
    assert got["StorageClass"] == "STANDARD_IA"
    assert got["ObjectSize"] == len(b"attributes")
    assert "ObjectParts" not in got  # as AWS: a single-PUT object has no parts
    assert got["LastModified"]
    only_size = s3.get_object_attributes(Bucket=bucket, Key="a", ObjectAttributes=["ObjectSize"])
    assert "ETag" not in only_size and only_size["ObjectSize"] == 10
    with pytest.raises(ClientError) as caught:
        s3.get_object_attributes(Bucket=bucket, Key="absent", ObjectAttributes=["ETag"])
    assert code_of(caught) == "NoSuchKey"
    with pytest.raises(ClientError) as caught:
        s3.get_object_attributes(Bucket=bucket, Key="a", ObjectAttributes=["Colour"])
    assert code_of(caught) == "InvalidArgument"
    raw = signed(daemon, "GET", f"/{bucket}/a?attributes")
    assert raw.status == 400 and xml_code(raw) == "InvalidArgument"


def test_object_attributes_page_the_parts_of_a_composite(s3: Any, bucket: str) -> None:
    datas = upload_composite(s3, bucket, "m", [PART, PART, 10], ChecksumAlgorithm="SHA256")
    wanted = ["ObjectParts", "Checksum", "ObjectSize", "ETag"]
    first = s3.get_object_attributes(Bucket=bucket, Key="m", ObjectAttributes=wanted,
                                     MaxParts=2)
    parts = first["ObjectParts"]
    assert parts["TotalPartsCount"] == 3 and parts["IsTruncated"] is True
    assert parts["MaxParts"] == 2 and parts["NextPartNumberMarker"] == 2
    assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(1, PART), (2, PART)]
    assert parts["Parts"][0]["ChecksumSHA256"] == base64.b64encode(
        hashlib.sha256(datas[0]).digest()).decode()
    assert first["Checksum"]["ChecksumType"] == "COMPOSITE"
    assert "-" not in first["Checksum"]["ChecksumSHA256"]  # reported without the -N suffix
    assert first["ETag"].endswith("-3") and first["ObjectSize"] == 2 * PART + 10
    rest = s3.get_object_attributes(Bucket=bucket, Key="m", ObjectAttributes=wanted,
                                    PartNumberMarker=2)
    assert rest["ObjectParts"]["IsTruncated"] is False
    assert [p["PartNumber"] for p in rest["ObjectParts"]["Parts"]] == [3]


def test_object_attributes_of_a_composite_without_checksums(daemon: Daemon) -> None:
    s3: Any = make_client(daemon.endpoint, request_checksum_calculation="when_required")
    bucket = new_bucket(s3)
    upload_composite(s3, bucket, "m", [PART, 10])
    got = s3.get_object_attributes(Bucket=bucket, Key="m", ObjectAttributes=["ObjectParts"])
    assert got["ObjectParts"] == {"TotalPartsCount": 2}  # as AWS: no Part list then


def test_object_attributes_need_both_actions(daemon: Daemon, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="a", Body=b"x")
    arn = f"arn:aws:s3:::{bucket}/a"
    # The spec's s3:GetObject covers s3:GetObjectAttributes (S3-ACTIONS.md); a Deny of the
    # granular action still refuses.
    reader = user_with(daemon, allow(["s3:GetObject"], [arn]))
    denied = user_with(daemon, allow(["s3:GetObject"], [arn]),
                       {"Effect": "Deny", "Action": ["s3:GetObjectAttributes"],
                        "Resource": [arn]})
    with pytest.raises(ClientError) as caught:
        denied.get_object_attributes(Bucket=bucket, Key="a", ObjectAttributes=["ObjectSize"])
    assert code_of(caught) == "AccessDenied"
    got = reader.get_object_attributes(Bucket=bucket, Key="a", ObjectAttributes=["ObjectSize"])
    assert got["ObjectSize"] == 1


# -- ACLs --------------------------------------------------------------------------------


def test_acls_answer_the_owner_with_full_control(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    for acl in (s3.get_bucket_acl(Bucket=bucket), s3.get_object_acl(Bucket=bucket, Key="k")):
        owner = acl["Owner"]
        assert owner["DisplayName"] == "root" and owner["ID"]
        assert acl["Grants"] == [{
            "Grantee": {"ID": owner["ID"], "DisplayName": "root", "Type": "CanonicalUser"},
            "Permission": "FULL_CONTROL",
        }]
    with pytest.raises(ClientError) as caught:
        s3.get_object_acl(Bucket=bucket, Key="absent")
    assert code_of(caught) == "NoSuchKey"
    with pytest.raises(ClientError) as caught:
        s3.get_bucket_acl(Bucket="no-such-bucket-" + uuid.uuid4().hex[:8])
    assert code_of(caught) == "NoSuchBucket"


def test_only_owner_only_acls_can_be_set(daemon: Daemon, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]
    same = {"Owner": owner, "Grants": [{"Grantee": {"ID": owner["ID"], "Type": "CanonicalUser"},
                                        "Permission": "FULL_CONTROL"}]}
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy=same)
    s3.put_object_acl(Bucket=bucket, Key="k", ACL="private")
    s3.put_object_acl(Bucket=bucket, Key="k", AccessControlPolicy=same)
    public = {"Owner": owner, "Grants": [*same["Grants"], {
        "Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
        "Permission": "READ"}]}
    refused = [
        lambda: s3.put_bucket_acl(Bucket=bucket, ACL="public-read"),
        lambda: s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy=public),
        lambda: s3.put_object_acl(Bucket=bucket, Key="k", ACL="public-read-write"),
        lambda: s3.put_object_acl(Bucket=bucket, Key="k", GrantRead="uri=x"),
        lambda: s3.put_object(Bucket=bucket, Key="k2", Body=b"x", ACL="public-read"),
    ]
    for attempt in refused:
        with pytest.raises(ClientError) as caught:
            attempt()
        assert code_of(caught) == "AccessControlListNotSupported"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="k2")
    s3.put_object(Bucket=bucket, Key="k3", Body=b"x", ACL="private")
    with pytest.raises(ClientError) as caught:
        s3.put_object_acl(Bucket=bucket, Key="absent", ACL="private")
    assert code_of(caught) == "NoSuchKey"
    malformed = signed(daemon, "PUT", f"/{bucket}?acl", body=b"<AccessControlPolicy>")
    assert malformed.status == 400 and xml_code(malformed) == "MalformedACLError"
