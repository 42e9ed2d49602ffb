"""The encryption x compression x write-path matrix on one daemon per backend ([encryption]
enabled, SSE-C allowed over plain HTTP): {plain, SSE-S3, SSE-C, SSE-KMS (the master key's),
bucket default} x {compressed, not} x {single PUT, multipart, CopyObject, UploadPartCopy},
each read back byte-identical whole and by ranges across 64 KiB package (and part)
boundaries, with the headers AWS shows; then no plaintext of an encrypted object anywhere on
disk, and a flipped byte in a stored part an error, never wrong bytes. Bodies are just over
the package size; only the multipart writes need a 5 MiB part."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import (
    ROOT_ACCESS_KEY,
    ROOT_SECRET_KEY,
    Daemon,
    drop_database,
    objstore_cli,
)

P = 64 * 1024
MIB5 = 5 * 1024 * 1024
SECRET = b"MATRIX-SECRET-MARKER-9f8e7d6c5b4a"
PLAIN = b"matrix-plain-marker-0a1b2c3d4e5f"
MODES = ("plain", "sse-s3", "sse-c", "sse-kms", "default")
KMS = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/objstore"}
CUSTOMER_KEY = bytes(range(32))
SSEC = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": CUSTOMER_KEY}
OTHER_SSEC = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": bytes(range(1, 33))}
WRITES = ("put", "multipart", "copy", "part-copy")


def _body(size: int, marker: bytes, seed: int) -> bytes:
    """Compressible bytes (log-like lines) with the marker in every 4 KiB and some noise."""
    rng = os.urandom(512)
    lines = b"".join(b"line %d seed %d compresses well\n" % (i, seed) for i in range(110))
    chunk = (marker + rng + lines)[:4096]
    return (chunk * (size // len(chunk) + 1))[:size]


@pytest.fixture(scope="module", params=BACKENDS)
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    node = Daemon(tmp_path_factory.mktemp(f"matrix-{request.param}"), backend=request.param,
                  extra_config="[encryption]\nenabled = true\nallow_ssec_over_http = true\n")
    with running_daemon(request, node) as running:
        yield running


def _bucket(mode: str, compressed: bool) -> str:
    return f"mx-{'def' if mode == 'default' else 'own'}-{'z' if compressed else 'n'}"


@pytest.fixture(scope="module")
def s3(daemon: Daemon) -> Any:
    client: Any = make_client(daemon.endpoint)
    admin = AdminClient(daemon.endpoint)
    for default in (False, True):
        for compressed in (False, True):
            name = _bucket("default" if default else "plain", compressed)
            client.create_bucket(Bucket=name)
            if default:
                client.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={
                    "Rules": [{"ApplyServerSideEncryptionByDefault": {
                        "SSEAlgorithm": "AES256"}}]})
            if compressed:
                admin.ok("PUT", f"/buckets/{name}/compression", {"algorithm": "zstd",
                                                                 "level": 3})
    return client


@pytest.fixture(scope="module")
def sources(s3: Any) -> dict[str, bytes]:
    """Copy sources: an SSE-S3 compressed one (for encrypted destinations) and a plain one;
    both over 5 MiB so that a part can be copied from them."""
    size = MIB5 + 2 * P + 7
    found = {"secret": _body(size, SECRET, 1), "plain": _body(size, PLAIN, 2)}
    s3.put_object(Bucket=_bucket("plain", True), Key="src-secret", Body=found["secret"],
                  ServerSideEncryption="AES256")
    s3.put_object(Bucket=_bucket("plain", False), Key="src-plain", Body=found["plain"])
    return found


def _sse(mode: str) -> dict[str, Any]:
    """The write arguments of `mode`."""
    if mode == "sse-c":
        return dict(SSEC)
    if mode == "sse-kms":
        return dict(KMS)
    return {"ServerSideEncryption": "AES256"} if mode == "sse-s3" else {}


def _read_args(mode: str) -> dict[str, Any]:
    return dict(SSEC) if mode == "sse-c" else {}


def _shows(answer: dict[str, Any], mode: str) -> bool:
    """Whether an answer shows the encryption AWS shows for `mode`."""
    if mode == "sse-c":
        return (answer.get("SSECustomerAlgorithm") == "AES256"
                and "SSECustomerKeyMD5" in answer and "ServerSideEncryption" not in answer)
    if mode == "sse-kms":
        return (answer.get("ServerSideEncryption") == "aws:kms"
                and answer.get("SSEKMSKeyId", "").startswith("arn:aws:kms:local:"))
    return (answer.get("ServerSideEncryption") == "AES256") == (mode != "plain")


def _etag_of(mode: str, data: bytes) -> str | None:
    """The ETag AWS gives `data` written as `mode` (None: not an MD5, SSE-C)."""
    return None if mode == "sse-c" else f'"{hashlib.md5(data).hexdigest()}"'


def _multipart_etag(parts: list[bytes]) -> str:
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    return f'"{digest}-{len(parts)}"'


def _write(s3: Any, mode: str, bucket: str, key: str, write: str,
           sources: dict[str, bytes]) -> tuple[bytes, str | None]:
    """Write one case; returns the bytes expected and the ETag AWS would give (None: not
    an MD5, SSE-C)."""
    marker = PLAIN if mode == "plain" else SECRET
    source_name = "plain" if mode == "plain" else "secret"
    source_ref = ({"Bucket": _bucket("plain", False), "Key": "src-plain"} if mode == "plain"
                  else {"Bucket": _bucket("plain", True), "Key": "src-secret"})
    if write == "put":
        data = _body(2 * P + 100, marker, 3)
        answer = s3.put_object(Bucket=bucket, Key=key, Body=data, **_sse(mode))
        assert _shows(answer, mode)
        return data, _etag_of(mode, data)
    if write == "copy":
        data = sources[source_name]
        answer = s3.copy_object(Bucket=bucket, Key=key, CopySource=source_ref, **_sse(mode))
        assert _shows(answer, mode)
        return data, _etag_of(mode, data)
    made = s3.create_multipart_upload(Bucket=bucket, Key=key, **_sse(mode))
    assert _shows(made, mode)
    upload = made["UploadId"]
    part_args = _read_args(mode)
    if write == "multipart":
        parts = [_body(MIB5, marker, 4), _body(P + 50, marker, 5)]
        etags = []
        for number, part in enumerate(parts, start=1):
            answer = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload,
                                    PartNumber=number, Body=part, **part_args)
            assert answer["ETag"] == (_etag_of(mode, part) or answer["ETag"])
            assert _shows(answer, mode)
            etags.append(answer["ETag"])
    else:
        whole = sources[source_name]
        spans = [(0, MIB5 - 1), (MIB5 - 10, len(whole) - 1)]
        parts = [whole[a:b + 1] for a, b in spans]
        etags = []
        for number, (a, b) in enumerate(spans, start=1):
            answer = s3.upload_part_copy(Bucket=bucket, Key=key, UploadId=upload,
                                         PartNumber=number, CopySource=source_ref,
                                         CopySourceRange=f"bytes={a}-{b}", **part_args)
            etags.append(answer["CopyPartResult"]["ETag"])
            assert etags[-1] == (_etag_of(mode, parts[number - 1]) or etags[-1])
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
    if mode != "sse-c":  # AWS shows no SSE-C headers on a completion (it has no key)
        assert _shows(done, mode)
    if mode == "sse-c":
        return b"".join(parts), None
    return b"".join(parts), _multipart_etag(parts)


def _ranges(size: int) -> list[tuple[int, int]]:
    found = [(0, 0), (P - 5, P + 5), (2 * P - 1, 2 * P), (size - 7, size - 1)]
    if size > MIB5 + 20:
        found += [(MIB5 - 3, MIB5 + P + 3), (MIB5 - P - 1, MIB5 + 1)]
    return found


# What each case wrote (bucket, key) -> (bytes, mode), read again after `recover`.
WRITTEN: dict[tuple[str, str], tuple[bytes, str]] = {}

CASES = [(mode, compressed, write) for mode in MODES for compressed in (False, True)
         for write in WRITES]


@pytest.mark.parametrize(("mode", "compressed", "write"), CASES,
                         ids=[f"{m}-{'zstd' if c else 'raw'}-{w}" for m, c, w in CASES])
def test_reads_back_byte_identical(s3: Any, sources: dict[str, bytes], mode: str,
                                   compressed: bool, write: str) -> None:
    bucket = _bucket(mode, compressed)
    key = f"case-{mode}-{write}"
    data, etag = _write(s3, mode, bucket, key, write, sources)
    WRITTEN[(bucket, key)] = (data, mode)
    args = _read_args(mode)
    got = s3.get_object(Bucket=bucket, Key=key, **args)
    assert got["Body"].read() == data
    if etag is None:  # SSE-C: an ETag, but not the MD5 of the bytes
        md5 = hashlib.md5(data).hexdigest()
        etag = got["ETag"]
        assert md5 not in etag
    assert got["ETag"] == etag
    assert _shows(got, mode)
    head = s3.head_object(Bucket=bucket, Key=key, **args)
    assert head["ContentLength"] == len(data) and head["ETag"] == etag
    assert _shows(head, mode)
    for start, end in _ranges(len(data)):
        part = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end}", **args)
        assert part["Body"].read() == data[start:end + 1], (start, end)
        assert part["ContentRange"] == f"bytes {start}-{end}/{len(data)}"


def test_no_plaintext_of_an_encrypted_object_on_disk(daemon: Daemon, s3: Any,
                                                     sources: dict[str, bytes]) -> None:
    """After every case above: the secret marker is in no file of the data directory (blobs,
    spool, part files, sidecars, the database) or the daemon's temporary directory, nor is
    the customer's key (raw or base64) nor in the daemon's log; the plain marker is found
    (so the search does find plaintext where there is some)."""
    seen_plain = False
    for root in (daemon.data_dir, daemon.temp_dir):
        for path in Path(root).rglob("*"):
            if not path.is_file():
                continue
            content = path.read_bytes()
            assert SECRET not in content, path
            seen_plain = seen_plain or PLAIN in content
            assert CUSTOMER_KEY not in content and base64.b64encode(CUSTOMER_KEY) not in content
    assert seen_plain
    log = daemon.log_path.read_bytes()
    assert base64.b64encode(CUSTOMER_KEY) not in log and SECRET not in log


def _stored_bytes(daemon: Daemon, bucket: str, key: str) -> int:
    """The stored size of the blobs of `key` (its object blob, or its parts)."""
    total = 0
    for sidecar in daemon.data_dir.rglob("*.meta.json"):
        document = json.loads(sidecar.read_text())
        if (document.get("bucket"), document.get("key")) == (bucket, key) and document.get(
                "kind") in ("object", "part"):
            blob = sidecar.with_name(sidecar.name.removesuffix(".meta.json"))
            total += blob.stat().st_size if blob.exists() else 0
    return total


@pytest.mark.parametrize("write", WRITES)
def test_compressed_writes_are_stored_smaller(daemon: Daemon, s3: Any,
                                              sources: dict[str, bytes], write: str) -> None:
    """Every write path into a compressed bucket compresses (then encrypts): parts and
    copy destinations too; an already-compressed Content-Type is stored as sent."""
    for mode in ("plain", "sse-s3", "sse-kms"):
        key = f"case-{mode}-{write}"
        data = s3.get_object(Bucket=_bucket(mode, True), Key=key, **_read_args(mode))["Body"]
        stored = _stored_bytes(daemon, _bucket(mode, True), key)
        assert 0 < stored < len(data.read()) // 2, (mode, write)
    bucket = _bucket("plain", True)
    upload = s3.create_multipart_upload(Bucket=bucket, Key=f"png-{write}",
                                        ContentType="image/png")["UploadId"]
    part = _body(P + 3, PLAIN, 12)
    etag = s3.upload_part(Bucket=bucket, Key=f"png-{write}", UploadId=upload, PartNumber=1,
                          Body=part)["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key=f"png-{write}", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert _stored_bytes(daemon, bucket, f"png-{write}") == len(part)


def test_an_sse_c_object_needs_its_key(s3: Any, sources: dict[str, bytes]) -> None:
    """GET and HEAD without the key: 400; with another key: 403; a key for a plain object:
    400; copies need the source's key and may re-encrypt under another; a part of an SSE-C
    upload needs the upload's key."""
    bucket = _bucket("plain", False)
    data = _body(P + 1, SECRET, 11)
    s3.put_object(Bucket=bucket, Key="ssec-guarded", Body=data, **SSEC)
    for call, status in ((lambda: s3.get_object(Bucket=bucket, Key="ssec-guarded"), 400),
                         (lambda: s3.head_object(Bucket=bucket, Key="ssec-guarded"), 400),
                         (lambda: s3.get_object(Bucket=bucket, Key="ssec-guarded",
                                                **OTHER_SSEC), 403),
                         (lambda: s3.head_object(Bucket=bucket, Key="ssec-guarded",
                                                 **OTHER_SSEC), 403),
                         (lambda: s3.get_object(Bucket=bucket, Key="src-plain", **SSEC), 400),
                         (lambda: s3.get_object_attributes(
                             Bucket=bucket, Key="ssec-guarded",
                             ObjectAttributes=["ETag", "ObjectSize"]), 400),
                         (lambda: s3.copy_object(Bucket=bucket, Key="ssec-copy", CopySource={
                             "Bucket": bucket, "Key": "ssec-guarded"}), 400)):
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    s3.copy_object(Bucket=bucket, Key="ssec-copy", CopySource={"Bucket": bucket,
                                                               "Key": "ssec-guarded"},
                   CopySourceSSECustomerAlgorithm="AES256",
                   CopySourceSSECustomerKey=CUSTOMER_KEY, **OTHER_SSEC)
    assert s3.get_object(Bucket=bucket, Key="ssec-copy", **OTHER_SSEC)["Body"].read() == data
    other_key = OTHER_SSEC["SSECustomerKey"]
    shown = s3.get_object_attributes(  # boto3 encodes no SSE-C key for this operation
        Bucket=bucket, Key="ssec-copy", ObjectAttributes=["ObjectSize"],
        SSECustomerAlgorithm="AES256", SSECustomerKey=base64.b64encode(other_key).decode(),
        SSECustomerKeyMD5=base64.b64encode(hashlib.md5(other_key).digest()).decode())
    assert shown["ObjectSize"] == len(data)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="ssec-mp", **SSEC)["UploadId"]
    for extra, status in (({}, 400), (OTHER_SSEC, 403)):
        with pytest.raises(ClientError) as caught:
            s3.upload_part(Bucket=bucket, Key="ssec-mp", UploadId=upload, PartNumber=1,
                           Body=b"x", **extra)
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    s3.abort_multipart_upload(Bucket=bucket, Key="ssec-mp", UploadId=upload)


def _part_blobs(daemon: Daemon, key: str) -> list[Path]:
    found = []
    for sidecar in daemon.data_dir.rglob("*.meta.json"):
        document = json.loads(sidecar.read_text())
        if document.get("kind") == "part" and document.get("key") == key:
            found.append(sidecar.with_name(sidecar.name.removesuffix(".meta.json")))
    return found


def test_a_flipped_byte_in_a_stored_part_is_an_error(daemon: Daemon, s3: Any) -> None:
    bucket, key = _bucket("plain", False), "flipped-parts"
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key,
                                        ServerSideEncryption="AES256")["UploadId"]
    data = _body(MIB5, SECRET, 9)
    etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1,
                          Body=data)["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": etag}]})
    (blob,) = _part_blobs(daemon, key)
    stored = bytearray(blob.read_bytes())
    stored[P + 20] ^= 0x01  # inside the second package
    blob.write_bytes(bytes(stored))
    assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-99")["Body"].read() == data[:100]
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={P}-{P + 99}")["Body"].read()
    assert caught.value.response["Error"]["Code"] == "InternalError"


def _aws(daemon: Daemon, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ROOT_ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=ROOT_SECRET_KEY, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"))
    aws = str(Path(sys.executable).with_name("aws"))
    return subprocess.run([aws, "--endpoint-url", daemon.endpoint, *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_aws_cli_multipart_cp_with_sse_and_sse_c(daemon: Daemon, s3: Any,
                                                  tmp_path: Path) -> None:
    """`aws s3 cp --sse AES256` and `--sse-c AES256 --sse-c-key` of a file over the CLI's
    8 MiB multipart threshold, and back (SQLite only: the CLI is the point, not the
    backend)."""
    if daemon.backend != "sqlite":
        pytest.skip("the CLI round trip runs on one backend")
    bucket = _bucket("plain", True)
    data = _body(9 * 1024 * 1024 + 5, SECRET, 13)
    (tmp_path / "up.bin").write_bytes(data)
    key = "k" * 32
    for name, flags in (("cli-sse.bin", ["--sse", "AES256"]),
                        ("cli-ssec.bin", ["--sse-c", "AES256", "--sse-c-key", key])):
        up = _aws(daemon, tmp_path, "s3", "cp", *flags, str(tmp_path / "up.bin"),
                  f"s3://{bucket}/{name}")
        assert up.returncode == 0, up.stderr
        down_flags = flags if name == "cli-ssec.bin" else []
        down = _aws(daemon, tmp_path, "s3", "cp", *down_flags, f"s3://{bucket}/{name}",
                    str(tmp_path / "down.bin"))
        assert down.returncode == 0, down.stderr
        assert (tmp_path / "down.bin").read_bytes() == data
        (tmp_path / "down.bin").unlink()
    head = s3.head_object(Bucket=bucket, Key="cli-sse.bin")
    assert head["ServerSideEncryption"] == "AES256" and head["ETag"].endswith('-2"')
    (tmp_path / "up.bin").unlink()


def _object_blob(daemon: Daemon, bucket: str, key: str) -> bytes:
    for sidecar in daemon.data_dir.rglob("*.meta.json"):
        document = json.loads(sidecar.read_text())
        if (document.get("bucket"), document.get("key"), document.get("kind")) == (
                bucket, key, "object"):
            return sidecar.with_name(sidecar.name.removesuffix(".meta.json")).read_bytes()
    raise AssertionError(f"no blob for {bucket}/{key}")


@pytest.mark.parametrize("compressed", [False, True])
def test_a_copy_onto_itself_with_new_metadata_rewraps_the_key(daemon: Daemon, s3: Any,
                                                                compressed: bool) -> None:
    """An SSE-S3 object (compressed or not) copied onto itself with new metadata keeps its
    stored bytes as they are (the data key is wrapped again for the new version)."""
    bucket = _bucket("plain", compressed)
    data = _body(2 * P + 9, SECRET, 14)
    s3.put_object(Bucket=bucket, Key="rewrap", Body=data, ServerSideEncryption="AES256")
    before = _object_blob(daemon, bucket, "rewrap")
    s3.copy_object(Bucket=bucket, Key="rewrap", CopySource={"Bucket": bucket, "Key": "rewrap"},
                   ServerSideEncryption="AES256", MetadataDirective="REPLACE",
                   Metadata={"colour": "blue"})
    assert _object_blob(daemon, bucket, "rewrap") == before
    got = s3.get_object(Bucket=bucket, Key="rewrap")
    assert got["Body"].read() == data and got["Metadata"] == {"colour": "blue"}


def test_an_empty_part_of_an_encrypted_upload_with_a_checksum(s3: Any) -> None:
    """An empty part (its spool opened before its admission, then restaged) of an SSE-S3
    upload with a checksum algorithm the client does not send per part: computed anyway."""
    bucket = _bucket("plain", False)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="empty-part",
                                        ServerSideEncryption="AES256",
                                        ChecksumAlgorithm="SHA256")["UploadId"]
    url = s3.generate_presigned_url("upload_part", Params={
        "Bucket": bucket, "Key": "empty-part", "UploadId": upload, "PartNumber": 1})
    answer = urllib3.request("PUT", url, body=b"")
    assert answer.status == 200, answer.data
    assert answer.headers["x-amz-server-side-encryption"] == "AES256"
    (listed,) = s3.list_parts(Bucket=bucket, Key="empty-part", UploadId=upload)["Parts"]
    assert listed["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"").digest()).decode()
    s3.abort_multipart_upload(Bucket=bucket, Key="empty-part", UploadId=upload)


def test_recover_and_check_deep_follow_every_case(daemon: Daemon, s3: Any) -> None:
    """Last in the module (restarts its daemon): `check --deep` reads every staged blob
    through its stages and finds only the part flipped above; after the database is lost,
    `recover` brings every case back readable (part keys from the sidecars), and an open
    SSE-S3 upload completes after it."""
    bucket = _bucket("plain", True)
    made = s3.create_multipart_upload(Bucket=bucket, Key="open-upload",
                                      ServerSideEncryption="AES256")
    part = _body(P + 5, SECRET, 15)
    etag = s3.upload_part(Bucket=bucket, Key="open-upload", UploadId=made["UploadId"],
                          PartNumber=1, Body=part)["ETag"]
    daemon.stop()
    checked = objstore_cli(daemon, "check", "--deep")
    found = checked.stdout + checked.stderr
    assert "flipped-parts" in found and "case-" not in found, found
    drop_database(daemon)
    recovered = objstore_cli(daemon, "recover")
    assert recovered.returncode == 0, recovered.stderr
    daemon.start()
    client: Any = make_client(daemon.endpoint)
    assert WRITTEN
    for (name, key), (data, mode) in WRITTEN.items():
        got = client.get_object(Bucket=name, Key=key, Range=f"bytes={P - 5}-{P + 5}",
                                **_read_args(mode))
        assert got["Body"].read() == data[P - 5:P + 6], (name, key)
    client.complete_multipart_upload(
        Bucket=bucket, Key="open-upload", UploadId=made["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert client.get_object(Bucket=bucket, Key="open-upload")["Body"].read() == part
