"""Bucket quotas against the real daemon: the admin endpoints (GET/PUT/DELETE
/admin/buckets/{bucket}/quota) and the rule on every write path through boto3 (PutObject,
overwrites, CopyObject, CompleteMultipartUpload), exact under concurrent writers."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon
from tests.integration.test_rbac import Person, allow

MIB = 1024 * 1024


@pytest.fixture
def admin(daemon: Daemon) -> AdminClient:
    return AdminClient(daemon.endpoint)


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"quota-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def set_quota(admin: AdminClient, bucket: str, **limits: int | None) -> Any:
    return admin.ok("PUT", f"/buckets/{bucket}/quota", limits)


def refused(call: Any) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value
    assert error.response["Error"]["Code"] == "QuotaExceeded", error.response
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return error


# -- the admin endpoints ------------------------------------------------------------------


def test_quota_endpoints(admin: AdminClient, s3: Any, bucket: str) -> None:
    path = f"/buckets/{bucket}/quota"
    empty = {"bucket": bucket, "max_bytes": None, "max_objects": None,
             "usage": {"objects": 0, "bytes": 0}}
    assert admin.ok("GET", path) == empty
    s3.put_object(Bucket=bucket, Key="a", Body=b"12345")
    assert set_quota(admin, bucket, max_bytes=100) == {
        "bucket": bucket, "max_bytes": 100, "max_objects": None,
        "usage": {"objects": 1, "bytes": 5}}
    assert set_quota(admin, bucket, max_objects=7)["max_bytes"] is None  # PUT states it all
    assert admin.ok("GET", path)["max_objects"] == 7
    admin.ok("DELETE", path, status=204)
    assert admin.ok("GET", path)["max_objects"] is None
    admin.ok("DELETE", path, status=204)
    set_quota(admin, bucket, max_bytes=None, max_objects=None)
    assert admin.ok("GET", path)["usage"] == {"objects": 1, "bytes": 5}


@pytest.mark.parametrize("body", [
    {"max_bytes": -1}, {"max_objects": -5}, {"max_bytes": "10"}, {"max_objects": 1.5},
    {"max_bytes": True}, {"maximum": 3},
])
def test_bad_quotas_are_400(admin: AdminClient, bucket: str, body: dict[str, Any]) -> None:
    reply = admin.put(f"/buckets/{bucket}/quota", body)
    assert (reply.status, reply.error) == (400, "BadRequest")
    assert admin.ok("GET", f"/buckets/{bucket}/quota")["max_bytes"] is None


def test_unknown_bucket_is_404(admin: AdminClient) -> None:
    for method, body in (("GET", None), ("PUT", {"max_bytes": 1}), ("DELETE", None)):
        reply = admin.call(method, "/buckets/no-such-quota-bucket/quota", body)
        assert (reply.status, reply.error) == (404, "NotFound"), method


def test_only_administrators_manage_quotas(admin: AdminClient, bucket: str) -> None:
    person = Person(admin)
    person.grant(allow(["s3:*", "svc:*"], ["*"]))
    reply = person.client.get(f"/buckets/{bucket}/quota")
    assert (reply.status, reply.error) == (403, "AccessDenied")
    assert person.client.put(f"/buckets/{bucket}/quota", {"max_bytes": 1}).status == 403
    person.grant(allow(["*"], ["*"]))  # AdministratorAccess-equivalent
    assert person.client.get(f"/buckets/{bucket}/quota").status == 200


# -- the rule on every write path -------------------------------------------------------


def test_object_count_quota(admin: AdminClient, s3: Any, bucket: str) -> None:
    set_quota(admin, bucket, max_objects=2)
    s3.put_object(Bucket=bucket, Key="a", Body=b"1")
    s3.put_object(Bucket=bucket, Key="b", Body=b"2")
    refused(lambda: s3.put_object(Bucket=bucket, Key="c", Body=b"3"))
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="c")
    s3.put_object(Bucket=bucket, Key="a", Body=b"overwritten")  # no new object
    refused(lambda: s3.copy_object(Bucket=bucket, Key="c",
                                   CopySource={"Bucket": bucket, "Key": "a"}))
    s3.delete_object(Bucket=bucket, Key="b")  # deletes make room
    s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "a"})
    assert admin.ok("GET", f"/buckets/{bucket}/quota")["usage"] == {"objects": 2, "bytes": 22}


def test_byte_quota_and_overwrites(admin: AdminClient, s3: Any, bucket: str) -> None:
    set_quota(admin, bucket, max_bytes=100)
    s3.put_object(Bucket=bucket, Key="a", Body=b"x" * 60)
    refused(lambda: s3.put_object(Bucket=bucket, Key="b", Body=b"x" * 41))
    s3.put_object(Bucket=bucket, Key="b", Body=b"x" * 40)
    refused(lambda: s3.put_object(Bucket=bucket, Key="a", Body=b"x" * 61))
    s3.put_object(Bucket=bucket, Key="a", Body=b"x" * 10)  # shrinking is always fine
    assert admin.ok("GET", f"/buckets/{bucket}/quota")["usage"] == {"objects": 2, "bytes": 50}


def test_versions_count(admin: AdminClient, s3: Any, bucket: str) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    set_quota(admin, bucket, max_objects=2)
    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    s3.put_object(Bucket=bucket, Key="k", Body=b"2")
    refused(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"3"))
    s3.delete_object(Bucket=bucket, Key="k")  # a delete marker is never refused
    assert admin.ok("GET", f"/buckets/{bucket}/quota")["usage"]["objects"] == 2


def test_multipart_completion(admin: AdminClient, s3: Any, bucket: str) -> None:
    set_quota(admin, bucket, max_bytes=6 * MIB)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    parts = []
    for number, size in ((1, 5 * MIB), (2, 2 * MIB)):
        etag = s3.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=number,
                              Body=b"p" * size)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    refused(lambda: s3.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=upload,
                                                 MultipartUpload={"Parts": parts}))
    assert s3.list_parts(Bucket=bucket, Key="big", UploadId=upload)["Parts"]  # still open
    set_quota(admin, bucket, max_bytes=7 * MIB)
    s3.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=upload,
                                 MultipartUpload={"Parts": parts})
    assert s3.head_object(Bucket=bucket, Key="big")["ContentLength"] == 7 * MIB


@pytest.mark.parametrize("dimension", ["objects", "bytes"])
def test_concurrent_writers(daemon: Daemon, admin: AdminClient, bucket: str,
                            dimension: str) -> None:
    limit, writers, size = 5, 16, 1000
    if dimension == "objects":
        set_quota(admin, bucket, max_objects=limit)
    else:
        set_quota(admin, bucket, max_bytes=limit * size)
    clients = [make_client(daemon.endpoint) for _ in range(writers)]

    def write(n: int) -> str:
        try:
            clients[n].put_object(Bucket=bucket, Key=f"k{n}", Body=b"z" * size)
        except ClientError as error:
            return str(error.response["Error"]["Code"])
        return "ok"

    with ThreadPoolExecutor(writers) as pool:
        outcomes = list(pool.map(write, range(writers)))
    assert outcomes.count("ok") == limit
    assert outcomes.count("QuotaExceeded") == writers - limit
    usage = admin.ok("GET", f"/buckets/{bucket}/quota")["usage"]
    assert usage == {"objects": limit, "bytes": limit * size}
    listed = clients[0].list_objects_v2(Bucket=bucket).get("Contents", [])
    assert len(listed) == limit
