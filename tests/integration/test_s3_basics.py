"""The everyday S3 path end to end with boto3: buckets, objects, ranges, metadata, errors."""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.integration.daemon import Daemon


def new_bucket(s3: Any) -> str:
    name = f"b-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name


def error_code(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return str(excinfo.value.response["Error"]["Code"])


def test_bucket_lifecycle(s3: Any) -> None:
    name = new_bucket(s3)
    s3.create_bucket(Bucket=name)  # idempotent for its owner
    s3.head_bucket(Bucket=name)
    listed = s3.list_buckets()
    assert name in [b["Name"] for b in listed["Buckets"]]
    assert listed["Owner"]["DisplayName"] == "root"
    assert s3.get_bucket_location(Bucket=name)["LocationConstraint"] is None
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(ClientError) as caught:
        s3.delete_bucket(Bucket=name)
    assert error_code(caught) == "BucketNotEmpty"
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as caught:
        s3.head_bucket(Bucket=name)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as caught:
        s3.delete_bucket(Bucket=name)
    assert error_code(caught) == "NoSuchBucket"


@pytest.mark.parametrize("name", ["ab", "Upper-Case", "a..b", "192.168.0.1", "bad_name"])
def test_invalid_bucket_names(s3: Any, name: str) -> None:
    with pytest.raises(ClientError) as caught:
        s3.create_bucket(Bucket=name)
    assert error_code(caught) == "InvalidBucketName"


def test_wrong_location_constraint(s3: Any) -> None:
    with pytest.raises(ClientError) as caught:
        s3.create_bucket(Bucket=f"b-{uuid.uuid4().hex[:8]}",
                         CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert error_code(caught) == "InvalidLocationConstraint"


def test_put_get_head_with_metadata(s3: Any) -> None:
    bucket = new_bucket(s3)
    body = os.urandom(300_000)
    put = s3.put_object(
        Bucket=bucket, Key="dir/ünï code+%.bin", Body=body, ContentType="application/x-test",
        Metadata={"colour": "blue", "x-two": "2"}, CacheControl="max-age=60",
        ContentDisposition="attachment", ContentLanguage="en", StorageClass="STANDARD_IA",
    )
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="dir/ünï code+%.bin")
    assert got["Body"].read() == body
    assert got["ContentType"] == "application/x-test"
    assert got["Metadata"] == {"colour": "blue", "x-two": "2"}
    assert got["CacheControl"] == "max-age=60"
    assert got["ContentDisposition"] == "attachment"
    assert got["StorageClass"] == "STANDARD_IA"
    head = s3.head_object(Bucket=bucket, Key="dir/ünï code+%.bin")
    assert head["ContentLength"] == len(body)
    assert head["ETag"] == put["ETag"]


def test_overwrite_replaces_and_removes_old_blob(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"one" * 1000)
    before = count_blobs(daemon)
    s3.put_object(Bucket=bucket, Key="k", Body=b"two")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"two"
    assert count_blobs(daemon) == before


def count_blobs(daemon: Daemon) -> int:
    return sum(
        1 for _, _, files in os.walk(daemon.data_dir / "blobs")
        for f in files if not f.endswith(".meta.json")
    )


@pytest.mark.parametrize("size", [10, 300_000, 3_000_000])
def test_ranges(s3: Any, size: int) -> None:
    bucket = new_bucket(s3)
    body = os.urandom(size)
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    for header, expected in [
        ("bytes=0-4", body[0:5]),
        (f"bytes={size - 3}-", body[-3:]),
        ("bytes=-7", body[-7:]),
        (f"bytes=2-{size * 2}", body[2:]),
    ]:
        got = s3.get_object(Bucket=bucket, Key="r", Range=header)
        assert got["Body"].read() == expected
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"].endswith(f"/{size}")
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={size}-")
    assert error_code(caught) == "InvalidRange"
    headers = caught.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert headers["content-range"] == f"bytes */{size}"


def test_missing_things(s3: Any) -> None:
    bucket = new_bucket(s3)
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="nope")
    assert error_code(caught) == "NoSuchKey"
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket="no-such-bucket-here", Key="nope")
    assert error_code(caught) == "NoSuchBucket"
    s3.delete_object(Bucket=bucket, Key="nope")  # a missing key is not an error


def test_checksums_sent_by_the_sdk_are_verified_and_returned(s3: Any) -> None:
    bucket = new_bucket(s3)
    for algorithm in ("CRC32", "CRC32C", "SHA256", "CRC64NVME", "SHA1"):
        put = s3.put_object(Bucket=bucket, Key=algorithm, Body=b"checked",
                            ChecksumAlgorithm=algorithm)
        field = f"Checksum{algorithm}"
        assert put[field]
        head = s3.head_object(Bucket=bucket, Key=algorithm, ChecksumMode="ENABLED")
        assert head[field] == put[field]


def test_wrong_content_md5_is_refused_and_stores_nothing(daemon: Daemon, s3: Any) -> None:
    bucket = new_bucket(s3)
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=bucket, Key="k", Body=b"data",
                      ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==")
    assert error_code(caught) == "BadDigest"
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_listing_v1_and_v2(s3: Any) -> None:
    bucket = new_bucket(s3)
    keys = ["a/1", "a/2", "b", "c/d/e", "dir/", "z"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    v2 = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [c["Key"] for c in v2["Contents"]] == ["b", "z"]
    assert [p["Prefix"] for p in v2["CommonPrefixes"]] == ["a/", "c/", "dir/"]
    paginator = s3.get_paginator("list_objects_v2")
    seen = [o["Key"] for page in paginator.paginate(Bucket=bucket, PaginationConfig={
        "PageSize": 2}) for o in page.get("Contents", [])]
    assert seen == keys
    v1 = s3.list_objects(Bucket=bucket, Prefix="a/", MaxKeys=1)
    assert v1["IsTruncated"] and [c["Key"] for c in v1["Contents"]] == ["a/1"]
    assert s3.list_objects_v2(Bucket=bucket, MaxKeys=0)["IsTruncated"] is False


def test_every_response_has_request_ids_and_xml_errors(daemon: Daemon, s3: Any) -> None:
    http = urllib3.PoolManager()
    response = http.request("GET", daemon.endpoint + "/some-bucket/key")
    assert response.status == 403
    assert response.headers["Content-Type"] == "application/xml"
    request_id = response.headers["x-amz-request-id"]
    assert f"<RequestId>{request_id}</RequestId>".encode() in response.data
    assert response.headers["x-amz-id-2"] and response.headers["Server"] == "objstore"
    assert b"<html" not in response.data.lower()
    bucket = new_bucket(s3)
    with pytest.raises(ClientError) as caught:
        s3.get_bucket_website(Bucket=bucket)
    assert error_code(caught) == "NotImplemented"
    admin = http.request("GET", daemon.endpoint + "/admin/nope")
    assert admin.status == 404 and admin.headers["Content-Type"] == "application/json"


def test_health(daemon: Daemon) -> None:
    http = urllib3.PoolManager()
    response = http.request("GET", daemon.endpoint + "/admin/health")
    assert response.status == 200 and response.json() == {"status": "ok"}
    assert "Retry-After" not in response.headers


@pytest.mark.parametrize("method", ["OPTIONS", "PATCH", "TRACE", "PROPFIND"])
def test_odd_methods_get_s3_errors_not_500(daemon: Daemon, method: str) -> None:
    response = urllib3.PoolManager(retries=False).request(method, daemon.endpoint + "/b/k")
    assert 400 <= response.status < 500
    assert response.headers["Content-Type"] == "application/xml"


def test_disconnect_mid_upload_leaves_no_spool(daemon: Daemon, s3: Any) -> None:
    import datetime
    import socket
    import time

    from objstore.http import sigv4
    from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY

    bucket = new_bucket(s3)
    length = 50 * 1024 * 1024
    headers = sigv4.sign_headers(  # signed: an unsigned body is refused before it is read
        "PUT", f"{daemon.endpoint}/{bucket}/partial",
        {"host": f"127.0.0.1:{daemon.port}", "content-length": str(length)},
        sigv4.UNSIGNED_PAYLOAD, ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1",
        datetime.datetime.now(datetime.UTC))
    with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        sock.sendall(
            f"PUT /{bucket}/partial HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
            f"Content-Length: {length}\r\n".encode()
            + "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode()
            + b"\r\n"
        )
        sock.sendall(b"x" * (5 * 1024 * 1024))  # spills to a spool file, then we vanish
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while os.listdir(daemon.data_dir / "tmp") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.listdir(daemon.data_dir / "tmp") == []
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="partial")


def test_client_leaving_mid_download_is_clean(daemon: Daemon, s3: Any) -> None:
    import datetime
    import socket
    import time

    from objstore.http import sigv4
    from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY

    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="big", Body=os.urandom(8 * 1024 * 1024))
    url = f"{daemon.endpoint}/{bucket}/big"
    headers = sigv4.sign_headers("GET", url, {}, sigv4.UNSIGNED_PAYLOAD, ROOT_ACCESS_KEY,
                                 ROOT_SECRET_KEY, "us-east-1", datetime.datetime.now(datetime.UTC))
    request = f"GET /{bucket}/big HTTP/1.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        sock.sendall(request.encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    time.sleep(0.5)
    s3.head_object(Bucket=bucket, Key="big")  # the daemon is still fine
    assert "Producer was not unregistered" not in daemon.log_path.read_text(errors="replace")
