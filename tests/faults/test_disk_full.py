"""A full data volume, for real: the daemon runs on a 64 MiB tmpfs mounted as its data
directory (root only; skipped with the reason otherwise), filled through the S3 API.

Every write is then refused with 507 InsufficientStorage in its API's format (S3 XML,
admin JSON), large and small bodies alike and with a response, never a dropped
connection; deletes of objects, versions, buckets and admin entities work and free space;
writes resume once space is back, without a restart; no temporary file stays in
`data_dir/tmp` and the daemon logs no traceback. With SQLite the database lives on the
full volume: a disk filled to the last byte by another program still lets deletes commit
(the database's reserve). With PostgreSQL only the blob volume fills.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from objstore.http import sigv4
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

pytestmark = pytest.mark.timeout(60)

MIB = 1024 * 1024
VOLUME_BYTES = 64 * MIB
MIN_FREE_BYTES = 8 * MIB
RESERVE_BYTES = 4 * MIB
FILL_OBJECT_BYTES = 4 * MIB
DEADLINE_SECONDS = 10.0


@contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[None]:
    """A tmpfs of `size_bytes` mounted on `path` for the duration."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as the data volume needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0700", "tmpfs", str(path)],
        capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"could not mount a tmpfs on {path}: {mounted.stderr.strip()}")
    try:
        yield
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "--lazy", str(path)], check=False)


@pytest.fixture(params=BACKENDS)
def small_node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    node = Daemon(tmp_path / "node", backend=request.param,
                  extra_config=f"min_free_bytes = {MIN_FREE_BYTES}\n"
                               f"db_reserve_bytes = {RESERVE_BYTES}\n")
    with tmpfs(node.data_dir, VOLUME_BYTES), running_daemon(request, node):
        yield node


# -- helpers ------------------------------------------------------------------------------


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def refused(call: Callable[[], Any], what: str) -> None:
    """`call` is answered 507 InsufficientStorage as an S3 error document."""
    with pytest.raises(ClientError) as raised:
        call()
    response = raised.value.response
    status = response["ResponseMetadata"]["HTTPStatusCode"]
    assert (status, response["Error"].get("Code")) == (507, "InsufficientStorage"), \
        (what, response)


def fill(s3: Any, bucket: str) -> list[str]:
    """PUT objects until the guard refuses even small ones; the keys stored. Large bodies
    are refused before they are read once they do not fit; small ones once the sample of
    the free space (at most a second old) is below the minimum."""
    keys: list[str] = []
    for size, most in ((FILL_OBJECT_BYTES, 40), (256 * 1024, 400)):
        body = os.urandom(size)
        for n in range(most):
            key = f"fill-{size}-{n}"
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body)
            except ClientError as exc:
                assert exc.response["Error"]["Code"] == "InsufficientStorage", exc.response
                break
            keys.append(key)
        else:
            pytest.fail(f"{most} objects of {size} bytes did not fill the volume")
    return keys


def fill_to_the_last_byte(path: Path, leave_bytes: int = 0) -> None:
    """Another program writes `path` until the volume is full (but `leave_bytes`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for block in (MIB, 4096, 1):
            while free_bytes(path.parent) >= leave_bytes + block:
                try:
                    os.write(fd, b"\0" * block)
                except OSError:
                    break
    finally:
        os.close(fd)


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_SECONDS} s: {what}")
        time.sleep(0.1)


def accepted(call: Callable[[], Any]) -> bool:
    """True when `call` succeeds, False when it is refused with 507."""
    try:
        call()
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "InsufficientStorage", exc.response
        return False
    return True


def writes_again(s3: Any, bucket: str) -> bool:
    return accepted(lambda: s3.put_object(Bucket=bucket, Key="again", Body=b"x" * 1024))


def spool_is_empty(node: Daemon) -> bool:
    return list((node.data_dir / "tmp").iterdir()) == []


def admin_user(admin: AdminClient, name: str) -> str:
    return str(admin.ok("POST", "/users", {"username": name}, status=201)["user_id"])


# -- the tests ---------------------------------------------------------------------------


def test_a_full_volume_refuses_writes_and_deletes_make_room(small_node: Daemon) -> None:
    s3, admin = make_client(small_node.endpoint), AdminClient(small_node.endpoint)
    s3.create_bucket(Bucket="versions")
    s3.put_bucket_versioning(Bucket="versions", VersioningConfiguration={"Status": "Enabled"})
    version = s3.put_object(Bucket="versions", Key="v", Body=b"v" * MIB)["VersionId"]
    s3.create_bucket(Bucket="empty")
    spare = admin_user(admin, "spare")
    s3.create_bucket(Bucket="fill")
    keys = fill(s3, "fill")
    assert keys

    refused(lambda: s3.put_object(Bucket="fill", Key="small", Body=b"x" * 1024),
            "small PutObject")
    refused(lambda: s3.put_object(Bucket="fill", Key="large", Body=os.urandom(6 * MIB)),
            "large PutObject")
    refused(lambda: s3.create_bucket(Bucket="another"), "CreateBucket")
    refused(lambda: s3.put_object_tagging(Bucket="fill", Key=keys[0], Tagging={
        "TagSet": [{"Key": "k", "Value": "v"}]}), "PutObjectTagging")
    refused(lambda: s3.create_multipart_upload(Bucket="fill", Key="upload"),
            "CreateMultipartUpload")
    refused(lambda: s3.copy_object(Bucket="fill", Key="copy",
                                   CopySource={"Bucket": "fill", "Key": keys[0]}),
            "CopyObject")
    reply = admin.post("/users", {"username": "refused"})
    assert (reply.status, reply.error) == (507, "InsufficientStorage")
    assert s3.get_object(Bucket="fill", Key=keys[0])["Body"].read()  # reads still work

    # Deletes of every kind work on the full volume, and make room.
    before = free_bytes(small_node.data_dir)
    s3.delete_object(Bucket="versions", Key="v", VersionId=version)
    s3.delete_bucket(Bucket="empty")
    admin.ok("DELETE", f"/users/{spare}", status=204)
    s3.delete_object(Bucket="fill", Key=keys[-1])
    half = keys[: len(keys) // 2]
    deleted = s3.delete_objects(Bucket="fill", Delete={
        "Objects": [{"Key": key} for key in half], "Quiet": True})
    assert deleted.get("Errors", []) == []
    freed = sum(int(key.split("-")[1]) for key in half)  # fill-SIZE-N
    # DeleteObjects removes the files after it has answered (one IO job for the batch)
    eventually(lambda: free_bytes(small_node.data_dir) >= before + freed // 2,
               "the deleted objects' space is free again")  # less what the DB took

    # Writes resume without a restart (in every worker within a second, once each has
    # sampled the free space again), and nothing was left behind.
    eventually(lambda: writes_again(s3, "fill"), "a write after deletes made room")
    eventually(lambda: accepted(lambda: s3.create_bucket(Bucket="another")), "CreateBucket")
    eventually(lambda: accepted(lambda: s3.put_object_tagging(Bucket="fill", Key=keys[-2],
               Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})), "PutObjectTagging")
    eventually(lambda: admin.post("/users", {"username": "after"}).status == 201,
               "an admin write")
    eventually(lambda: spool_is_empty(small_node), "data_dir/tmp empty")
    small_node.assert_no_tracebacks()


def test_a_body_that_meets_a_full_disk_midway_is_answered(small_node: Daemon) -> None:
    """A body of no declared length (chunked) can not be refused before it is read: the
    disk fills while it is spooled. It is still read to its end and answered 507 as S3
    XML, and its spool is removed."""
    s3 = make_client(small_node.endpoint)
    s3.create_bucket(Bucket="stream")
    ballast = small_node.data_dir / "ballast"
    fill_to_the_last_byte(ballast, leave_bytes=4 * MIB)
    url = f"{small_node.endpoint}/stream/big"
    headers = sigv4.sign_headers("PUT", url, {}, "UNSIGNED-PAYLOAD", ROOT_ACCESS_KEY,
                                 ROOT_SECRET_KEY, "us-east-1",
                                 datetime.datetime.now(datetime.UTC))
    chunk = os.urandom(64 * 1024)
    body = (chunk for _ in range(16 * MIB // len(chunk)))
    http = urllib3.PoolManager(retries=False, timeout=30.0)
    response = http.request("PUT", url, body=body, headers=headers, chunked=True)
    assert response.status == 507, response.data
    assert b"<Code>InsufficientStorage</Code>" in response.data
    assert response.headers["x-amz-request-id"].encode() in response.data
    assert "could not be spooled" in small_node.log_path.read_text()
    eventually(lambda: spool_is_empty(small_node), "the spool of the refused body removed")
    ballast.unlink()
    eventually(lambda: writes_again(s3, "stream"), "a write once the volume has room")
    small_node.assert_no_tracebacks()


def test_deletes_work_on_a_volume_filled_to_the_last_byte(small_node: Daemon) -> None:
    s3, admin = make_client(small_node.endpoint), AdminClient(small_node.endpoint)
    s3.create_bucket(Bucket="full")
    keys = [f"k{n}" for n in range(4)]
    for key in keys:
        s3.put_object(Bucket="full", Key=key, Body=os.urandom(2 * MIB))
    spare = admin_user(admin, "spare")

    ballast = small_node.data_dir / "ballast"
    fill_to_the_last_byte(ballast)
    assert free_bytes(small_node.data_dir) < 64 * 1024

    refused(lambda: s3.put_object(Bucket="full", Key="small", Body=b"x"), "small PutObject")
    reply = admin.post("/users", {"username": "refused"})
    assert (reply.status, reply.error) == (507, "InsufficientStorage")
    s3.delete_object(Bucket="full", Key=keys[0])
    admin.ok("DELETE", f"/users/{spare}", status=204)
    deleted = s3.delete_objects(Bucket="full", Delete={
        "Objects": [{"Key": key} for key in keys[1:]], "Quiet": True})
    assert deleted.get("Errors", []) == []
    assert s3.list_objects_v2(Bucket="full").get("KeyCount") == 0
    reserve = small_node.data_dir / "meta" / "space-reserve"
    if small_node.backend == "sqlite":
        assert not reserve.exists()  # spent on the deletes

    ballast.unlink()
    eventually(lambda: writes_again(s3, "full"), "a write once the volume has room")
    if small_node.backend == "sqlite":
        eventually(reserve.exists, "the database's reserve made again")
    eventually(lambda: spool_is_empty(small_node), "data_dir/tmp empty")
    small_node.assert_no_tracebacks()
