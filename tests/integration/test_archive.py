"""POST /admin/archive against the real daemon: the archive unpacks to the stored bytes,
every refusal (400, 403, 404) comes before any byte of archive, a large archive streams
with flat daemon memory, and `objstore audit --bucket` names every object an archive sent."""

from __future__ import annotations

import datetime
import hashlib
import http.client
import io
import json
import os
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from objstore.http import sigv4
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client
from tests.integration.daemon import OBJSTORE, ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

MIB = 1024 * 1024
_HTTP = urllib3.PoolManager(retries=False, timeout=120.0)


def post_archive(endpoint: str, body: Any, *, access_key: str = ROOT_ACCESS_KEY,
                 secret_key: str = ROOT_SECRET_KEY) -> Any:
    """The unread response of a signed POST /admin/archive (the caller streams it)."""
    data = json.dumps(body).encode()
    url = f"{endpoint}/admin/archive"
    headers = {"content-type": "application/json"}
    headers.update(sigv4.sign_headers("POST", url, headers, hashlib.sha256(data).hexdigest(),
                                      access_key, secret_key, "us-east-1",
                                      datetime.datetime.now(datetime.UTC)))
    return _HTTP.request("POST", url, body=data, headers=headers, preload_content=False)


def unpack(data: bytes) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for info in tar:
            handle = tar.extractfile(info)
            found[info.name] = None if handle is None else handle.read()
    return found


@pytest.fixture(scope="module")
def stored(daemon: Daemon) -> Iterator[tuple[str, dict[str, bytes]]]:
    """A bucket with a small, a 1 MiB, an empty, a unicode, a directory-marker and a
    two-part multipart object."""
    s3: Any = make_client(daemon.endpoint)
    bucket = f"arch-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    objects = {"a.txt": b"hello archive\n", "dir/b.bin": os.urandom(MIB), "dir/": b"",
               "empty.txt": b"", "ünï/cødé.txt": "grüße".encode()}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    parts = [os.urandom(5 * MIB), os.urandom(MIB + 3)]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="multi/part.bin")["UploadId"]
    etags = [s3.upload_part(Bucket=bucket, Key="multi/part.bin", UploadId=upload,
                            PartNumber=n, Body=p)["ETag"] for n, p in enumerate(parts, 1)]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="multi/part.bin", UploadId=upload,
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": n}
                                   for n, e in enumerate(etags, 1)]})
    objects["multi/part.bin"] = b"".join(parts)
    yield bucket, objects


def test_archive_unpacks_to_the_stored_bytes(daemon: Daemon,
                                             stored: tuple[str, dict[str, bytes]]) -> None:
    bucket, objects = stored
    response = post_archive(daemon.endpoint, {"bucket": bucket, "keys": list(objects)})
    data = response.read()
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/gzip"
    assert response.headers["Content-Disposition"] == f'attachment; filename="{bucket}.tar.gz"'
    found = unpack(data)
    assert found.pop("dir") is None  # the directory marker is a directory entry
    assert found == {key: value for key, value in objects.items() if key != "dir/"}


def test_a_missing_key_is_404_before_any_archive_byte(
        daemon: Daemon, stored: tuple[str, dict[str, bytes]]) -> None:
    bucket, _ = stored
    response = post_archive(daemon.endpoint, {"bucket": bucket,
                                              "keys": ["a.txt", "dir/b.bin", "nope"]})
    assert response.status == 404
    assert response.headers["Content-Type"] == "application/json"
    body = json.loads(response.read())
    assert body["error"] == "NotFound" and "nope" in body["message"]


@pytest.mark.parametrize(("body", "status"), [
    ({"bucket": "no-such-bucket-here", "keys": ["a"]}, 404),
    ({"keys": ["a.txt"]}, 400),
    ({"bucket": "b", "keys": []}, 400),
    ({"bucket": "b", "keys": "a.txt"}, 400),
    ({"bucket": "b", "keys": [1]}, 400),
])
def test_refusals_are_json(daemon: Daemon, body: dict[str, Any], status: int) -> None:
    response = post_archive(daemon.endpoint, body)
    assert response.status == status
    assert json.loads(response.read())["error"] in ("NotFound", "BadRequest")


def test_the_caller_needs_create_archive_and_get_object_on_every_key(
        daemon: Daemon, stored: tuple[str, dict[str, bytes]]) -> None:
    bucket, objects = stored
    admin = AdminClient(daemon.endpoint)
    user = admin.ok("POST", "/users", {"username": f"arch-{uuid.uuid4().hex[:8]}"}, 201)
    key = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    document = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": [f"arn:aws:s3:::{bucket}/dir/*"]},
    ]}
    grant = admin.ok("POST", "/grants", {"name": f"g-{uuid.uuid4().hex[:8]}",
                                         "document": document}, 201)
    admin.ok("PUT", f"/users/{user['user_id']}/grants/{grant['grant_id']}", status=204)
    as_user = {"access_key": key["access_key_id"], "secret_key": key["secret_access_key"]}
    without_svc = post_archive(daemon.endpoint, {"bucket": bucket, "keys": ["dir/b.bin"]},
                               **as_user)
    assert without_svc.status == 403 and json.loads(without_svc.read())["error"] == "AccessDenied"

    document["Statement"].append({"Effect": "Allow", "Action": ["svc:CreateArchive"],
                                  "Resource": ["*"]})
    admin.ok("PUT", f"/grants/{grant['grant_id']}", {"document": document}, 204)
    allowed = post_archive(daemon.endpoint, {"bucket": bucket, "keys": ["dir/b.bin"]},
                           **as_user)
    assert allowed.status == 200 and unpack(allowed.read()) == {"dir/b.bin": objects["dir/b.bin"]}
    outside = post_archive(daemon.endpoint, {"bucket": bucket, "keys": ["dir/b.bin", "a.txt"]},
                           **as_user)
    assert outside.status == 403 and "a.txt" in json.loads(outside.read())["message"]


def test_a_client_that_leaves_mid_archive_harms_nothing(
        daemon: Daemon, stored: tuple[str, dict[str, bytes]]) -> None:
    bucket, objects = stored
    s3: Any = make_client(daemon.endpoint)
    s3.put_object(Bucket=bucket, Key="large.bin", Body=os.urandom(32 * MIB))
    logged = daemon.log_path.stat().st_size
    data = json.dumps({"bucket": bucket, "keys": ["large.bin"]}).encode()
    url = f"{daemon.endpoint}/admin/archive"
    headers = {"content-type": "application/json"}
    headers.update(sigv4.sign_headers("POST", url, headers, hashlib.sha256(data).hexdigest(),
                                      ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1",
                                      datetime.datetime.now(datetime.UTC)))
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    connection.request("POST", "/admin/archive", body=data, headers=headers)
    response = connection.getresponse()
    assert response.status == 200 and len(response.read(64 * 1024)) == 64 * 1024
    connection.sock.close()  # type: ignore[union-attr]
    connection.close()
    again = post_archive(daemon.endpoint, {"bucket": bucket, "keys": ["a.txt"]})
    assert unpack(again.read()) == {"a.txt": objects["a.txt"]}
    with open(daemon.log_path, "rb") as log:
        log.seek(logged)
        assert b"Traceback" not in log.read()


@pytest.mark.slow
def test_a_large_archive_streams_with_flat_memory(daemon: Daemon) -> None:
    """~200 MiB of incompressible objects: the daemon's peak RSS barely moves while the
    archive streams (the client reads and discards it chunk by chunk)."""
    s3: Any = make_client(daemon.endpoint)
    bucket = f"big-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    block = os.urandom(MIB)
    digests = {}
    for n in range(4):
        data = block * 50 + n.to_bytes(4, "big")  # 50 MiB each, distinct
        s3.put_object(Bucket=bucket, Key=f"big-{n}", Body=data)
        digests[f"big-{n}"] = hashlib.sha256(data).hexdigest()
        del data
    before = daemon.peak_rss_bytes()
    response = post_archive(daemon.endpoint, {"bucket": bucket, "keys": sorted(digests)})
    assert response.status == 200
    compressed = 0
    decompressor = _StreamingTarCheck()
    for chunk in response.stream(256 * 1024):
        compressed += len(chunk)
        decompressor.feed(chunk)
    growth = daemon.peak_rss_bytes() - before
    assert decompressor.total > 200 * MIB and compressed > 150 * MIB
    assert growth < 48 * MIB, f"daemon peak RSS grew by {growth / MIB:.1f} MiB"


class _StreamingTarCheck:
    """Counts the uncompressed bytes of a gzip stream without keeping them."""

    def __init__(self) -> None:
        import zlib

        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(self._inflate.decompress(data))


def audit_of_bucket(daemon: Daemon, bucket: str) -> list[dict[str, Any]]:
    """`objstore audit --bucket BUCKET --json`, as an operator asks what left the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBJSTORE_", "AWS_"))}
    env.update(OBJSTORE_ENDPOINT=daemon.endpoint, OBJSTORE_ACCESS_KEY=ROOT_ACCESS_KEY,
               OBJSTORE_SECRET_KEY=ROOT_SECRET_KEY, HOME=str(daemon.workdir))
    result = subprocess.run([OBJSTORE, "audit", "--bucket", bucket, "--limit", "1000", "--json"],
                            capture_output=True, text=True, env=env, timeout=60, check=True)
    entries: list[dict[str, Any]] = json.loads(result.stdout)["entries"]
    return entries


def test_the_audit_log_names_every_object_an_archive_sent(
        daemon: Daemon, stored: tuple[str, dict[str, bytes]]) -> None:
    bucket, objects = stored
    response = post_archive(daemon.endpoint, {"bucket": bucket, "keys": sorted(objects)})
    assert unpack(response.read()).keys() == {name.rstrip("/") for name in objects}
    request_id = response.headers["x-amz-request-id"]
    deadline = time.monotonic() + 15  # entries reach the database within about a second
    while True:
        entries = [e for e in audit_of_bucket(daemon, bucket) if e["request_id"] == request_id]
        if len(entries) > len(objects) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    archive = [e for e in entries if e["operation"] == "admin:CreateArchive"]
    assert len(archive) == 1 and archive[0]["status"] == 200
    sent = {e["key"]: e for e in entries if e["operation"] == "Archive::GetObject"}
    assert sent.keys() == objects.keys()
    for key, entry in sent.items():
        assert (entry["bucket"], entry["bytes_out"], entry["status"]) == (
            bucket, len(objects[key]), 200)
        assert entry["access_key"] == ROOT_ACCESS_KEY and entry["source_ip"] == "127.0.0.1"
        assert entry["details"]["version_id"] == "null"
