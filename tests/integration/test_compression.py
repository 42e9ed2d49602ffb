"""Per-bucket zstd compression end to end on one real daemon (with [encryption] enabled, so
compression and SSE-S3 stack): the admin API and CLI set, show and turn it off; a
compressible 10 MiB PUT is stored much smaller and reads back byte-identical, Ranges across
chunk boundaries included; an image/jpeg body is stored as sent; ETag and size are the
client's; `objstore check --deep` is clean, then finds an altered chunk."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import encrypted_daemon, make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon
from tests.integration.test_archive import post_archive, unpack

BUCKET = "squeezed"
C = 256 * 1024  # the format's chunk size
MIB = 1024 * 1024
OBJSTORE = str(Path(sys.executable).with_name("objstore"))


def _compressible(size: int, seed: int = 0) -> bytes:
    lines = b"".join(b"line %d of a log file objstore compresses well, seed %d\n" % (i, seed)
                     for i in range(2000))
    return (lines * (size // len(lines) + 1))[:size]


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    with encrypted_daemon(request, tmp_path_factory, "compression") as running:
        yield running


@pytest.fixture(scope="module")
def s3(daemon: Daemon) -> Any:
    client: Any = make_client(daemon.endpoint)
    client.create_bucket(Bucket=BUCKET)
    AdminClient(daemon.endpoint).ok("PUT", f"/buckets/{BUCKET}/compression",
                                    {"algorithm": "zstd", "level": 3})
    return client


def _cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OBJSTORE, *args, "--endpoint", daemon.endpoint, "--access-key",
                           ROOT_ACCESS_KEY, "--secret-key", ROOT_SECRET_KEY, "--json"],
                          capture_output=True, text=True, timeout=60)


def _blob_of(daemon: Daemon, key: str) -> Path:
    sidecar = next(p for p in daemon.data_dir.rglob("*.meta.json")
                   if json.loads(p.read_text()).get("key") == key)
    return sidecar.with_name(sidecar.name.removesuffix(".meta.json"))


def _sidecar_of(daemon: Daemon, key: str) -> dict[str, Any]:
    path = _blob_of(daemon, key)
    loaded: dict[str, Any] = json.loads(path.with_name(path.name + ".meta.json").read_text())
    return loaded


def test_admin_api_sets_shows_validates_and_removes(daemon: Daemon, s3: Any) -> None:
    admin = AdminClient(daemon.endpoint)
    s3.create_bucket(Bucket="settings-only")
    path = "/buckets/settings-only/compression"
    assert admin.ok("GET", path) == {"bucket": "settings-only", "algorithm": None,
                                     "level": None}
    assert admin.ok("PUT", path, {"algorithm": "zstd", "level": 9})["level"] == 9
    assert admin.ok("GET", path)["algorithm"] == "zstd"
    for body in ({"algorithm": "gzip"}, {"algorithm": "zstd", "level": 30},
                 {"algorithm": "zstd", "level": "fast"}, {"algorithm": "zstd", "x": 1}):
        reply = admin.put(path, body)
        assert (reply.status, reply.error) == (400, "BadRequest"), body
    reply = admin.put("/buckets/no-such-bucket/compression", {"algorithm": "zstd"})
    assert (reply.status, reply.error) == (404, "NotFound")
    assert admin.get("/buckets/no-such-bucket/compression").status == 404
    admin.ok("DELETE", path, status=204)
    assert admin.ok("GET", path)["algorithm"] is None
    s3.put_object(Bucket="settings-only", Key="plain", Body=_compressible(MIB))
    assert _sidecar_of(daemon, "plain").get("compression") is None


def test_cli_sets_gets_and_deletes(daemon: Daemon, s3: Any) -> None:
    s3.create_bucket(Bucket="cli-set")
    result = _cli(daemon, "buckets", "compression", "set", "cli-set", "--level", "5")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["level"] == 5
    shown = json.loads(_cli(daemon, "buckets", "compression", "get", "cli-set").stdout)
    assert (shown["algorithm"], shown["level"]) == ("zstd", 5)
    bad = _cli(daemon, "buckets", "compression", "set", "cli-set", "--level", "99")
    assert bad.returncode != 0
    assert _cli(daemon, "buckets", "compression", "delete", "cli-set").returncode == 0
    shown = json.loads(_cli(daemon, "buckets", "compression", "get", "cli-set").stdout)
    assert shown["algorithm"] is None


@pytest.fixture(scope="module")
def big(s3: Any) -> bytes:
    data = _compressible(10 * MIB + 123)
    answer = s3.put_object(Bucket=BUCKET, Key="big.log", Body=data, ContentType="text/plain")
    assert answer["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    return data


def test_a_compressible_object_is_stored_much_smaller(daemon: Daemon, s3: Any,
                                                       big: bytes) -> None:
    stored = _blob_of(daemon, "big.log").stat().st_size
    assert stored < len(big) // 10, stored
    assert _sidecar_of(daemon, "big.log")["compression"] == "zstd"
    head = s3.head_object(Bucket=BUCKET, Key="big.log")
    assert head["ContentLength"] == len(big)
    assert head["ETag"] == f'"{hashlib.md5(big).hexdigest()}"'
    assert s3.get_object(Bucket=BUCKET, Key="big.log")["Body"].read() == big


@pytest.mark.parametrize(("start", "end"), [(0, 0), (C - 1, C), (C - 5, 3 * C + 4),
                                            (5 * MIB - 3, 7 * MIB + 3),
                                            (10 * MIB, 10 * MIB + 122)])
def test_ranges_are_byte_identical(s3: Any, big: bytes, start: int, end: int) -> None:
    got = s3.get_object(Bucket=BUCKET, Key="big.log", Range=f"bytes={start}-{end}")
    assert got["Body"].read() == big[start:end + 1]
    assert got["ContentRange"] == f"bytes {start}-{end}/{len(big)}"


def test_already_compressed_types_are_stored_as_sent(daemon: Daemon, s3: Any) -> None:
    data = _compressible(2 * MIB, seed=1)
    s3.put_object(Bucket=BUCKET, Key="photo.jpg", Body=data, ContentType="image/jpeg")
    assert _blob_of(daemon, "photo.jpg").stat().st_size == len(data)
    assert _sidecar_of(daemon, "photo.jpg").get("compression") is None
    assert s3.get_object(Bucket=BUCKET, Key="photo.jpg")["Body"].read() == data


def test_incompressible_bytes_cost_only_the_index(daemon: Daemon, s3: Any) -> None:
    data = os.urandom(MIB + 7)
    s3.put_object(Bucket=BUCKET, Key="random.bin", Body=data)
    stored = _blob_of(daemon, "random.bin").stat().st_size
    assert len(data) < stored < len(data) + 200
    got = s3.get_object(Bucket=BUCKET, Key="random.bin", Range=f"bytes={C - 2}-{C + 2}")
    assert got["Body"].read() == data[C - 2:C + 3]


def test_compressed_and_encrypted(daemon: Daemon, s3: Any) -> None:
    data = _compressible(3 * MIB, seed=2)
    answer = s3.put_object(Bucket=BUCKET, Key="both.log", Body=data,
                           ServerSideEncryption="AES256")
    assert answer["ServerSideEncryption"] == "AES256"
    sidecar = _sidecar_of(daemon, "both.log")
    assert (sidecar["compression"], sidecar["encryption_algorithm"]) == ("zstd", "AES256")
    assert _blob_of(daemon, "both.log").stat().st_size < len(data) // 10
    assert s3.get_object(Bucket=BUCKET, Key="both.log")["Body"].read() == data
    got = s3.get_object(Bucket=BUCKET, Key="both.log", Range=f"bytes={C - 9}-{2 * C + 9}")
    assert got["Body"].read() == data[C - 9:2 * C + 10]


def test_check_deep_is_clean_then_finds_an_altered_chunk(daemon: Daemon, s3: Any,
                                                         big: bytes) -> None:
    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run([OBJSTORE, "check", "--deep", "--config",
                               str(daemon.config_path)],
                              capture_output=True, text=True, timeout=300)

    clean = check()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    data = _compressible(2 * MIB, seed=3)
    s3.put_object(Bucket=BUCKET, Key="victim.log", Body=data)
    blob = _blob_of(daemon, "victim.log")
    stored = bytearray(blob.read_bytes())
    stored[10] ^= 0x10  # inside the first (compressed) chunk
    blob.write_bytes(bytes(stored))
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=BUCKET, Key="victim.log", Range="bytes=0-10")["Body"].read()
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    # the chunks it does not cover still read
    assert s3.get_object(Bucket=BUCKET, Key="victim.log", Range=f"bytes={C}-{C + 9}")[
        "Body"].read() == data[C:C + 10]
    found = check()
    assert found.returncode == 1, found.stdout + found.stderr
    findings = [line for line in found.stdout.splitlines() if f"{BUCKET}/" in line]
    assert findings and all("victim.log" in line for line in findings), found.stdout


def test_a_change_applies_to_the_next_put(daemon: Daemon, s3: Any) -> None:
    """The setting read at admission is cached, and every change empties that cache."""
    admin = AdminClient(daemon.endpoint)
    s3.create_bucket(Bucket="toggled")
    path = "/buckets/toggled/compression"
    data = _compressible(MIB, seed=4)
    for round_ in range(2):
        admin.ok("PUT", path, {"algorithm": "zstd", "level": 1})
        s3.put_object(Bucket="toggled", Key=f"on-{round_}", Body=data)
        assert _sidecar_of(daemon, f"on-{round_}")["compression"] == "zstd"
        admin.ok("DELETE", path, status=204)
        s3.put_object(Bucket="toggled", Key=f"off-{round_}", Body=data)
        assert _sidecar_of(daemon, f"off-{round_}").get("compression") is None
    for key in ("on-0", "off-0", "on-1", "off-1"):
        assert s3.get_object(Bucket="toggled", Key=key)["Body"].read() == data


def test_copies_and_archives_read_through_the_stages(daemon: Daemon, s3: Any,
                                                     big: bytes) -> None:
    s3.copy_object(Bucket=BUCKET, Key="big-copy.log",
                   CopySource={"Bucket": BUCKET, "Key": "big.log"})
    assert s3.get_object(Bucket=BUCKET, Key="big-copy.log")["Body"].read() == big
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="assembled")["UploadId"]
    start, end = C - 3, 9 * C + 5
    part = s3.upload_part_copy(Bucket=BUCKET, Key="assembled", UploadId=upload, PartNumber=1,
                               CopySource={"Bucket": BUCKET, "Key": "big.log"},
                               CopySourceRange=f"bytes={start}-{end}")
    s3.complete_multipart_upload(Bucket=BUCKET, Key="assembled", UploadId=upload,
                                 MultipartUpload={"Parts": [
                                     {"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=BUCKET, Key="assembled")["Body"].read() == big[start:end + 1]
    response = post_archive(daemon.endpoint, {"bucket": BUCKET, "keys": ["big.log"]})
    assert response.status == 200
    assert unpack(response.read()) == {"big.log": big}


def test_export_carries_the_setting_and_import_restores_it(daemon: Daemon, s3: Any) -> None:
    admin = AdminClient(daemon.endpoint)
    s3.create_bucket(Bucket="exported")
    path = "/buckets/exported/compression"
    admin.ok("PUT", path, {"algorithm": "zstd", "level": 4})
    exported = admin.ok("GET", "/export?sections=buckets")
    bucket = next(b for b in exported["buckets"] if b["name"] == "exported")
    assert json.loads(bucket["config"]["compression"]) == {"algorithm": "zstd", "level": 4}
    admin.ok("DELETE", path, status=204)
    admin.ok("POST", "/import?mode=overwrite&sections=buckets", exported)
    assert admin.ok("GET", path)["level"] == 4
    bucket["config"]["compression"] = json.dumps({"algorithm": "zstd", "level": 99})
    report = admin.ok("POST", "/import?mode=overwrite&sections=buckets", exported)
    assert [(e["item"], e["message"]) for e in report["errors"]] == [
        ("exported", "level must be an integer from 1 to 19.")]
    assert admin.ok("GET", path)["level"] == 4


def test_empty_and_small_bodies(daemon: Daemon, s3: Any) -> None:
    for key, data in (("empty", b""), ("tiny", b"x"), ("chunk", _compressible(C, seed=5))):
        answer = s3.put_object(Bucket=BUCKET, Key=key, Body=data)
        assert answer["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        assert _sidecar_of(daemon, key)["compression"] == "zstd"
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data
        assert s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == len(data)
