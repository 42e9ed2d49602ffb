"""SSE-S3 end to end on one real daemon with [encryption] enabled (the local master key),
through boto3: PUT/GET/HEAD with `x-amz-server-side-encryption: AES256`, Ranges across
64 KiB package boundaries, ETag = MD5 of the client's bytes, no plaintext anywhere under the
data directory or the daemon's TMPDIR, a flipped stored byte an error (never wrong bytes),
what is still refused (501/400), and bucket default encryption (Put/Get/DeleteBucket-
Encryption with boto3 and the AWS CLI, applied to PUT and CopyObject, kept by `recover`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import encrypted_daemon, make_client
from tests.integration.daemon import (
    ROOT_ACCESS_KEY,
    ROOT_SECRET_KEY,
    Daemon,
    drop_database,
    objstore_cli,
)

P = 64 * 1024
MARKER = b"SSE-S3-PLAINTEXT-MARKER-d41d8cd9"
BUCKET = "sse"
OBJSTORE = str(Path(sys.executable).with_name("objstore"))


def _body(size: int) -> bytes:
    """`size` bytes with the marker repeated through them (every package holds it)."""
    chunk = MARKER + os.urandom(4096 - len(MARKER))
    return (chunk * (size // len(chunk) + 1))[:size]


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    with encrypted_daemon(request, tmp_path_factory, "sse-s3") as running:
        yield running


@pytest.fixture(scope="module")
def s3(daemon: Daemon) -> Any:
    client: Any = make_client(daemon.endpoint)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture(scope="module")
def stored(s3: Any) -> dict[str, bytes]:
    """Objects written once for the module: empty, small (kept in memory), and large
    (spilled to the spool) ones."""
    bodies = {"empty": b"", "small": _body(P + 10), "large": _body(3 * 1024 * 1024 + 77)}
    for key, data in bodies.items():
        answer = s3.put_object(Bucket=BUCKET, Key=key, Body=data, ServerSideEncryption="AES256")
        assert answer["ServerSideEncryption"] == "AES256"
        assert answer["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    return bodies


def test_get_and_head_answer_the_plaintext(s3: Any, stored: dict[str, bytes]) -> None:
    for key, data in stored.items():
        got = s3.get_object(Bucket=BUCKET, Key=key)
        assert got["Body"].read() == data
        assert got["ServerSideEncryption"] == "AES256"
        head = s3.head_object(Bucket=BUCKET, Key=key)
        assert head["ContentLength"] == len(data)
        assert head["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        assert head["ServerSideEncryption"] == "AES256"


MIB = 1024 * 1024


@pytest.mark.parametrize(("start", "end"), [(P - 1, P), (P - 5, 3 * P + 4), (0, 0),
                                            (2 * P, 3 * P - 1), (MIB - 3, 2 * MIB + 3)])
def test_ranges_across_package_boundaries(s3: Any, stored: dict[str, bytes], start: int,
                                          end: int) -> None:
    data = stored["large"]
    got = s3.get_object(Bucket=BUCKET, Key="large", Range=f"bytes={start}-{end}")
    assert got["Body"].read() == data[start:end + 1]
    assert got["ContentRange"] == f"bytes {start}-{end}/{len(data)}"
    tail = s3.get_object(Bucket=BUCKET, Key="small", Range="bytes=-20")["Body"].read()
    assert tail == stored["small"][-20:]


def test_no_plaintext_on_disk(daemon: Daemon, stored: dict[str, bytes]) -> None:
    for root in (daemon.data_dir, daemon.temp_dir):
        found = [path for path in Path(root).rglob("*")
                 if path.is_file() and MARKER in path.read_bytes()]
        assert found == []


def test_master_key_private_and_never_logged(daemon: Daemon, stored: dict[str, bytes]) -> None:
    key_file = daemon.data_dir / "control" / "keys" / "master.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secret = key_file.read_text().split()[1]
    assert secret not in daemon.log_path.read_text(errors="replace")
    sidecars = [json.loads(p.read_text()) for p in daemon.data_dir.rglob("*.meta.json")]
    encrypted = [s for s in sidecars if s.get("encryption_algorithm") == "AES256"]
    assert len(encrypted) >= 3
    assert all(s["encryption_key_id"].startswith("local:") for s in encrypted)
    assert all(secret not in json.dumps(s) for s in sidecars)


def test_plain_objects_are_untouched(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="plain", Body=b"plain bytes")
    got = s3.get_object(Bucket=BUCKET, Key="plain")
    assert got["Body"].read() == b"plain bytes" and "ServerSideEncryption" not in got


def test_copy_of_an_encrypted_object_reads_back(s3: Any, stored: dict[str, bytes]) -> None:
    s3.copy_object(Bucket=BUCKET, Key="copied", CopySource={"Bucket": BUCKET, "Key": "small"})
    got = s3.get_object(Bucket=BUCKET, Key="copied")
    assert got["Body"].read() == stored["small"]
    assert "ServerSideEncryption" not in got  # no header, no bucket default: stored plain


@pytest.mark.parametrize(("value", "status"), [("aws:kms:dsse", 501), ("AES-256", 400)])
def test_other_algorithms_refused(s3: Any, value: str, status: int) -> None:
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=BUCKET, Key="refused", Body=b"x", ServerSideEncryption=value)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    with pytest.raises(ClientError):
        s3.head_object(Bucket=BUCKET, Key="refused")


def test_sse_c_refused_over_plain_http(s3: Any, stored: dict[str, bytes]) -> None:
    """SSE-C over plain HTTP without [encryption] allow_ssec_over_http: 400, as AWS."""
    for call in (
        lambda: s3.copy_object(Bucket=BUCKET, Key="c2", SSECustomerAlgorithm="AES256",
                               SSECustomerKey="k" * 32,
                               CopySource={"Bucket": BUCKET, "Key": "small"}),
        lambda: s3.put_object(Bucket=BUCKET, Key="c3", Body=b"x", SSECustomerAlgorithm="AES256",
                              SSECustomerKey="k" * 32),
    ):
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.response["Error"]["Code"] == "InvalidRequest"
        assert "secure connection" in caught.value.response["Error"]["Message"]


def test_a_flipped_stored_byte_is_an_error_never_wrong_bytes(daemon: Daemon, s3: Any) -> None:
    data = _body(2 * P + 100)
    s3.put_object(Bucket=BUCKET, Key="victim", Body=data, ServerSideEncryption="AES256")
    sidecar = next(p for p in daemon.data_dir.rglob("*.meta.json")
                   if json.loads(p.read_text()).get("key") == "victim")
    blob = sidecar.with_name(sidecar.name.removesuffix(".meta.json"))
    stored = bytearray(blob.read_bytes())
    stored[P + 16 + 7] ^= 0x40  # inside the second package
    blob.write_bytes(bytes(stored))
    assert s3.get_object(Bucket=BUCKET, Key="victim", Range=f"bytes=0-{P - 1}")[
        "Body"].read() == data[:P]
    for byte_range in (f"bytes={P}-{P + 10}", f"bytes=0-{P + 1}"):
        with pytest.raises(ClientError) as caught:
            s3.get_object(Bucket=BUCKET, Key="victim", Range=byte_range)["Body"].read()
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    # `check --deep` reads through the stages: the altered package is a finding, and the
    # intact encrypted objects are not.
    result = subprocess.run([OBJSTORE, "check", "--deep", "--config", str(daemon.config_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    findings = [line for line in result.stdout.splitlines() if "sse/" in line]
    assert findings and all("victim" in line for line in findings), result.stdout


def test_a_flipped_byte_late_in_a_streamed_get_cuts_the_answer(daemon: Daemon, s3: Any
                                                                ) -> None:
    data = _body(2 * 1024 * 1024)
    s3.put_object(Bucket=BUCKET, Key="streamed-victim", Body=data, ServerSideEncryption="AES256")
    sidecar = next(p for p in daemon.data_dir.rglob("*.meta.json")
                   if json.loads(p.read_text()).get("key") == "streamed-victim")
    blob = sidecar.with_name(sidecar.name.removesuffix(".meta.json"))
    stored = bytearray(blob.read_bytes())
    stored[len(stored) - 1000] ^= 0x01  # in the last package
    blob.write_bytes(bytes(stored))
    with pytest.raises(Exception) as caught:  # noqa: PT011 - whatever the client raises
        got = s3.get_object(Bucket=BUCKET, Key="streamed-victim")["Body"].read()
        assert got == data  # never reached with the right bytes: it must not read at all
    assert not isinstance(caught.value, AssertionError)


def test_admin_info_reports_encryption(daemon: Daemon) -> None:
    info = AdminClient(daemon.endpoint).ok("GET", "/info")
    assert info["encryption_enabled"] is True and info["kms_provider"] == "local"
    assert "kms_endpoint" not in info


def test_upload_part_copy_from_an_encrypted_source(s3: Any, stored: dict[str, bytes]) -> None:
    """The part is copied through a decrypting reader (stored as sent: the upload asked
    for no encryption)."""
    data = stored["large"]
    start, end = P - 3, 17 * P + 5
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="assembled")["UploadId"]
    part = s3.upload_part_copy(Bucket=BUCKET, Key="assembled", UploadId=upload, PartNumber=1,
                               CopySource={"Bucket": BUCKET, "Key": "large"},
                               CopySourceRange=f"bytes={start}-{end}")
    copied = data[start:end + 1]
    assert part["CopyPartResult"]["ETag"] == f'"{hashlib.md5(copied).hexdigest()}"'
    s3.complete_multipart_upload(
        Bucket=BUCKET, Key="assembled", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=BUCKET, Key="assembled")["Body"].read() == copied


def _stored_blob(daemon: Daemon, key: str) -> bytes:
    sidecar = next(p for p in daemon.data_dir.rglob("*.meta.json")
                   if json.loads(p.read_text()).get("key") == key
                   and json.loads(p.read_text()).get("kind") == "object")
    return sidecar.with_name(sidecar.name.removesuffix(".meta.json")).read_bytes()


@pytest.mark.parametrize("source", ["small", "plain-source"])
def test_copy_with_sse_s3_encrypts_the_destination(daemon: Daemon, s3: Any,
                                                   stored: dict[str, bytes], source: str) -> None:
    """An SSE-S3 destination from an encrypted source (the same plan: the stored bytes
    copied, the data key re-wrapped for the copy) or from a plain one (read as stored,
    written through the destination's stages)."""
    data = stored["small"] if source == "small" else _body(2 * P + 3)
    if source == "plain-source":
        s3.put_object(Bucket=BUCKET, Key=source, Body=data)
    target = f"sse-copy-of-{source}"
    answer = s3.copy_object(Bucket=BUCKET, Key=target, ServerSideEncryption="AES256",
                            CopySource={"Bucket": BUCKET, "Key": source})
    assert answer["ServerSideEncryption"] == "AES256"
    assert answer["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    got = s3.get_object(Bucket=BUCKET, Key=target, Range=f"bytes={P - 2}-{P + 2}")
    assert got["Body"].read() == data[P - 2:P + 3]
    assert got["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=BUCKET, Key=target)["Body"].read() == data
    assert MARKER not in _stored_blob(daemon, target)
    if source == "small":  # not re-encrypted: the very same packages
        assert _stored_blob(daemon, target) == _stored_blob(daemon, source)


def test_copy_onto_itself_with_sse_s3_encrypts_it(daemon: Daemon, s3: Any) -> None:
    data = _body(P + 1)
    s3.put_object(Bucket=BUCKET, Key="self", Body=data)
    s3.copy_object(Bucket=BUCKET, Key="self", ServerSideEncryption="AES256",
                   CopySource={"Bucket": BUCKET, "Key": "self"})
    head = s3.head_object(Bucket=BUCKET, Key="self")
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == len(data)
    assert s3.get_object(Bucket=BUCKET, Key="self")["Body"].read() == data
    assert MARKER not in _stored_blob(daemon, "self")


def test_aws_cli_cp_with_sse(daemon: Daemon, s3: Any, tmp_path: Path) -> None:
    """`aws s3 cp --sse AES256`, as a new user tries it (a single PutObject below the
    CLI's multipart threshold), and back."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ROOT_ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=ROOT_SECRET_KEY, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"))
    aws = str(Path(sys.executable).with_name("aws"))
    data = _body(3 * P + 11)
    (tmp_path / "up.bin").write_bytes(data)
    up = subprocess.run([aws, "--endpoint-url", daemon.endpoint, "s3", "cp", "--sse", "AES256",
                         str(tmp_path / "up.bin"), f"s3://{BUCKET}/cli.bin"],
                        env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    assert s3.head_object(Bucket=BUCKET, Key="cli.bin")["ServerSideEncryption"] == "AES256"
    down = subprocess.run([aws, "--endpoint-url", daemon.endpoint, "s3", "cp",
                           f"s3://{BUCKET}/cli.bin", str(tmp_path / "down.bin")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "down.bin").read_bytes() == data
    assert MARKER not in _stored_blob(daemon, "cli.bin")


DEFAULT_BUCKET = "sse-default"


def _aws(daemon: Daemon, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ROOT_ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=ROOT_SECRET_KEY, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"))
    aws = str(Path(sys.executable).with_name("aws"))
    return subprocess.run([aws, "--endpoint-url", daemon.endpoint, *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_bucket_encryption_round_trip_with_the_aws_cli(daemon: Daemon, s3: Any,
                                                       tmp_path: Path) -> None:
    """put-bucket-encryption / get / delete; without one, GET answers AWS's 404."""
    s3.create_bucket(Bucket="sse-cli")
    missing = _aws(daemon, tmp_path, "s3api", "get-bucket-encryption", "--bucket", "sse-cli")
    assert missing.returncode != 0
    assert "ServerSideEncryptionConfigurationNotFoundError" in missing.stderr
    config = json.dumps({"Rules": [{"ApplyServerSideEncryptionByDefault":
                                    {"SSEAlgorithm": "AES256"}}]})
    put = _aws(daemon, tmp_path, "s3api", "put-bucket-encryption", "--bucket", "sse-cli",
               "--server-side-encryption-configuration", config)
    assert put.returncode == 0, put.stderr
    got = _aws(daemon, tmp_path, "s3api", "get-bucket-encryption", "--bucket", "sse-cli")
    assert got.returncode == 0, got.stderr
    rules = json.loads(got.stdout)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    deleted = _aws(daemon, tmp_path, "s3api", "delete-bucket-encryption", "--bucket", "sse-cli")
    assert deleted.returncode == 0, deleted.stderr
    again = _aws(daemon, tmp_path, "s3api", "get-bucket-encryption", "--bucket", "sse-cli")
    assert "ServerSideEncryptionConfigurationNotFoundError" in again.stderr


def _sse_default(algorithm: str) -> dict[str, Any]:
    return {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": algorithm}}]}


@pytest.mark.parametrize(("algorithm", "code"), [("aws:kms:dsse", "NotImplemented"),
                                                 ("DES", "MalformedXML")])
def test_bucket_encryption_refuses_what_it_can_not_apply(s3: Any, algorithm: str,
                                                         code: str) -> None:
    s3.create_bucket(Bucket="sse-refused")
    with pytest.raises(ClientError) as caught:
        s3.put_bucket_encryption(Bucket="sse-refused",
                                 ServerSideEncryptionConfiguration=_sse_default(algorithm))
    assert caught.value.response["Error"]["Code"] == code
    with pytest.raises(ClientError) as caught:
        s3.get_bucket_encryption(Bucket="sse-refused")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as caught:
        s3.get_bucket_encryption(Bucket="no-such-bucket-here")
    assert caught.value.response["Error"]["Code"] == "NoSuchBucket"


def test_a_put_into_a_default_encrypted_bucket_is_encrypted(daemon: Daemon, s3: Any,
                                                            tmp_path: Path) -> None:
    """No header, the bucket's default applies: PUT (boto3 and `aws s3 cp`), CopyObject;
    HEAD and GET answer the header; after DeleteBucketEncryption new objects are plain."""
    s3.create_bucket(Bucket=DEFAULT_BUCKET)
    s3.put_bucket_encryption(Bucket=DEFAULT_BUCKET,
                             ServerSideEncryptionConfiguration=_sse_default("AES256"))
    data = _body(2 * P + 9)
    answer = s3.put_object(Bucket=DEFAULT_BUCKET, Key="by-default", Body=data)
    assert answer["ServerSideEncryption"] == "AES256"
    assert answer["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    head = s3.head_object(Bucket=DEFAULT_BUCKET, Key="by-default")
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == len(data)
    got = s3.get_object(Bucket=DEFAULT_BUCKET, Key="by-default", Range=f"bytes={P - 3}-{P + 3}")
    assert got["Body"].read() == data[P - 3:P + 4] and got["ServerSideEncryption"] == "AES256"
    assert MARKER not in _stored_blob(daemon, "by-default")

    (tmp_path / "up.bin").write_bytes(data)
    up = _aws(daemon, tmp_path, "s3", "cp", str(tmp_path / "up.bin"),
              f"s3://{DEFAULT_BUCKET}/cli-default.bin")
    assert up.returncode == 0, up.stderr
    assert s3.head_object(Bucket=DEFAULT_BUCKET, Key="cli-default.bin")[
        "ServerSideEncryption"] == "AES256"
    assert MARKER not in _stored_blob(daemon, "cli-default.bin")

    s3.put_object(Bucket=BUCKET, Key="plain-to-copy", Body=data)
    copied = s3.copy_object(Bucket=DEFAULT_BUCKET, Key="copied-in",
                            CopySource={"Bucket": BUCKET, "Key": "plain-to-copy"})
    assert copied["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=DEFAULT_BUCKET, Key="copied-in")["Body"].read() == data
    assert MARKER not in _stored_blob(daemon, "copied-in")
    s3.delete_object(Bucket=BUCKET, Key="plain-to-copy")  # keeps the data dir marker-free

    # A multipart upload follows the default too (its parts are encrypted).
    made = s3.create_multipart_upload(Bucket=DEFAULT_BUCKET, Key="multipart")
    assert made["ServerSideEncryption"] == "AES256"
    s3.abort_multipart_upload(Bucket=DEFAULT_BUCKET, Key="multipart", UploadId=made["UploadId"])

    s3.delete_bucket_encryption(Bucket=DEFAULT_BUCKET)
    made = s3.create_multipart_upload(Bucket=DEFAULT_BUCKET, Key="multipart")
    assert "ServerSideEncryption" not in made
    s3.abort_multipart_upload(Bucket=DEFAULT_BUCKET, Key="multipart", UploadId=made["UploadId"])
    plain = s3.put_object(Bucket=DEFAULT_BUCKET, Key="after-delete", Body=b"plain again")
    assert "ServerSideEncryption" not in plain
    assert "ServerSideEncryption" not in s3.head_object(Bucket=DEFAULT_BUCKET,
                                                        Key="after-delete")


# -- SSE-KMS, mapped to the node's master key (crypto/kms_key.py) -------------------------

KMS_MARKER = b"SSE-KMS-PLAINTEXT-MARKER-9e107d9d"
KMS_BUCKET = "sse-kms"
KMS_DEFAULT_BUCKET = "sse-kms-default"


def _kms_body(size: int) -> bytes:
    chunk = KMS_MARKER + os.urandom(4096 - len(KMS_MARKER))
    return (chunk * (size // len(chunk) + 1))[:size]


@pytest.fixture(scope="module")
def key_id(daemon: Daemon) -> str:
    listed = objstore_cli(daemon, "key", "list")
    assert listed.returncode == 0, listed.stderr
    (active,) = [line.split()[0] for line in listed.stdout.splitlines() if "(active)" in line]
    assert active.startswith("local:")
    return active


def _shows_kms(answer: dict[str, Any], key_id: str) -> bool:
    return (answer["ServerSideEncryption"] == "aws:kms"
            and answer["SSEKMSKeyId"] == f"arn:aws:kms:{key_id}")


def test_kms_put_get_head_copy_with_every_accepted_key_id(daemon: Daemon, s3: Any,
                                                          key_id: str) -> None:
    """aws:kms with no key id, the master key's id, its ARN forms and the alias: encrypted
    as SSE-S3, recorded as aws:kms, and every answer shows the key's ARN."""
    s3.create_bucket(Bucket=KMS_BUCKET)
    data = _kms_body(2 * P + 21)
    given = [None, key_id, f"arn:aws:kms:{key_id}",
             f"arn:aws:kms:us-east-1:000000000000:key/{key_id}", "alias/objstore"]
    for number, requested in enumerate(given):
        extra = {} if requested is None else {"SSEKMSKeyId": requested}
        key = f"kms-{number}"
        put = s3.put_object(Bucket=KMS_BUCKET, Key=key, Body=data,
                            ServerSideEncryption="aws:kms", **extra)
        assert _shows_kms(put, key_id), (requested, put)
        assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        head = s3.head_object(Bucket=KMS_BUCKET, Key=key)
        assert _shows_kms(head, key_id) and head["ContentLength"] == len(data)
        got = s3.get_object(Bucket=KMS_BUCKET, Key=key, Range=f"bytes={P - 2}-{P + 2}")
        assert got["Body"].read() == data[P - 2:P + 3] and _shows_kms(got, key_id)
        assert KMS_MARKER not in _stored_blob(daemon, key)
    sidecars = [json.loads(p.read_text()) for p in daemon.data_dir.rglob("*.meta.json")]
    kms = [c for c in sidecars if c.get("bucket") == KMS_BUCKET and c.get("kind") == "object"]
    assert {(c["encryption_algorithm"], c["encryption_key_id"]) for c in kms} == {
        ("aws:kms", key_id)}
    # CopyObject: SSE-S3 to SSE-KMS (the data key wrapped anew) and SSE-KMS to a plain copy.
    copied = s3.copy_object(Bucket=KMS_BUCKET, Key="kms-copy", ServerSideEncryption="aws:kms",
                            SSEKMSKeyId="alias/objstore",
                            CopySource={"Bucket": KMS_BUCKET, "Key": "kms-0"})
    assert _shows_kms(copied, key_id)
    got = s3.get_object(Bucket=KMS_BUCKET, Key="kms-copy")
    assert got["Body"].read() == data and _shows_kms(got, key_id)
    as_sse_s3 = s3.copy_object(Bucket=KMS_BUCKET, Key="kms-to-s3", ServerSideEncryption="AES256",
                               CopySource={"Bucket": KMS_BUCKET, "Key": "kms-1"})
    assert as_sse_s3["ServerSideEncryption"] == "AES256" and "SSEKMSKeyId" not in as_sse_s3
    assert s3.get_object(Bucket=KMS_BUCKET, Key="kms-to-s3")["Body"].read() == data


@pytest.mark.parametrize("requested", ["alias/nope", "local:0000000000000000",
                                       "arn:aws:kms:us-east-1:111122223333:key/"
                                       "1234abcd-12ab-34cd-56ef-1234567890ab"])
def test_kms_unknown_key_id_is_refused_as_aws_does(s3: Any, stored: dict[str, bytes],
                                                   key_id: str, requested: str) -> None:
    """400 KMS.NotFoundException, nothing stored: PUT, copy, multipart, bucket default."""
    attempts = [
        lambda: s3.put_object(Bucket=BUCKET, Key="kms-refused", Body=b"x",
                              ServerSideEncryption="aws:kms", SSEKMSKeyId=requested),
        lambda: s3.copy_object(Bucket=BUCKET, Key="kms-refused", ServerSideEncryption="aws:kms",
                               SSEKMSKeyId=requested,
                               CopySource={"Bucket": BUCKET, "Key": "small"}),
        lambda: s3.create_multipart_upload(Bucket=BUCKET, Key="kms-refused",
                                           ServerSideEncryption="aws:kms",
                                           SSEKMSKeyId=requested),
        lambda: s3.put_bucket_encryption(Bucket=BUCKET, ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {
                "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": requested}}]}),
    ]
    for number, attempt in enumerate(attempts):
        with pytest.raises(ClientError) as caught:
            attempt()
            pytest.fail(f"attempt {number} was not refused")
        error = caught.value.response
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 400, number
        assert error["Error"]["Code"] == "KMS.NotFoundException"
        assert error["Error"]["Message"] == f"Invalid keyId {requested}"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=BUCKET, Key="kms-refused")
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    # A key id with AES256 is the client's mistake (AWS: InvalidArgument).
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=BUCKET, Key="kms-refused", Body=b"x", ServerSideEncryption="AES256",
                      SSEKMSKeyId=key_id)
    assert caught.value.response["Error"]["Code"] == "InvalidArgument"


def test_kms_multipart_upload(daemon: Daemon, s3: Any, key_id: str) -> None:
    """CreateMultipartUpload with aws:kms: create, UploadPart, UploadPartCopy and the
    completion show aws:kms and the key; the object reads back and is stored encrypted."""
    parts = [_kms_body(5 * 1024 * 1024 + 3), _kms_body(P + 7)]
    made = s3.create_multipart_upload(Bucket=KMS_BUCKET, Key="kms-multi",
                                      ServerSideEncryption="aws:kms", SSEKMSKeyId=key_id,
                                      BucketKeyEnabled=True)
    assert _shows_kms(made, key_id)
    upload = made["UploadId"]
    first = s3.upload_part(Bucket=KMS_BUCKET, Key="kms-multi", UploadId=upload, PartNumber=1,
                           Body=parts[0])
    assert _shows_kms(first, key_id)
    s3.put_object(Bucket=KMS_BUCKET, Key="kms-part-source", Body=parts[1],
                  ServerSideEncryption="aws:kms")
    second = s3.upload_part_copy(Bucket=KMS_BUCKET, Key="kms-multi", UploadId=upload,
                                 PartNumber=2,
                                 CopySource={"Bucket": KMS_BUCKET, "Key": "kms-part-source"})
    assert _shows_kms(second, key_id)
    done = s3.complete_multipart_upload(
        Bucket=KMS_BUCKET, Key="kms-multi", UploadId=upload, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": first["ETag"]},
            {"PartNumber": 2, "ETag": second["CopyPartResult"]["ETag"]}]})
    assert _shows_kms(done, key_id)
    whole = b"".join(parts)
    got = s3.get_object(Bucket=KMS_BUCKET, Key="kms-multi")
    assert got["Body"].read() == whole and _shows_kms(got, key_id)
    ranged = s3.get_object(Bucket=KMS_BUCKET, Key="kms-multi",
                           Range=f"bytes={len(parts[0]) - 5}-{len(parts[0]) + 5}")
    assert ranged["Body"].read() == whole[len(parts[0]) - 5:len(parts[0]) + 6]


def test_kms_with_the_aws_cli(daemon: Daemon, s3: Any, key_id: str, tmp_path: Path) -> None:
    """`aws s3 cp --sse aws:kms [--sse-kms-key-id ...]`, single and multipart (above the
    CLI's 8 MiB threshold), and back."""
    small, large = _kms_body(3 * P + 5), _kms_body(9 * 1024 * 1024 + 1)
    (tmp_path / "small.bin").write_bytes(small)
    (tmp_path / "large.bin").write_bytes(large)
    for name, extra in (("small.bin", ["--sse-kms-key-id", key_id]),
                        ("large.bin", ["--sse-kms-key-id", "alias/objstore"]),
                        ("default-key.bin", [])):
        source = tmp_path / ("small.bin" if name == "default-key.bin" else name)
        up = _aws(daemon, tmp_path, "s3", "cp", "--sse", "aws:kms", *extra, str(source),
                  f"s3://{KMS_BUCKET}/cli/{name}")
        assert up.returncode == 0, up.stderr
        assert _shows_kms(s3.head_object(Bucket=KMS_BUCKET, Key=f"cli/{name}"), key_id)
        down = _aws(daemon, tmp_path, "s3", "cp", f"s3://{KMS_BUCKET}/cli/{name}",
                    str(tmp_path / f"down-{name}"))
        assert down.returncode == 0, down.stderr
        assert (tmp_path / f"down-{name}").read_bytes() == source.read_bytes()
    refused = _aws(daemon, tmp_path, "s3", "cp", "--sse", "aws:kms", "--sse-kms-key-id",
                   "alias/unknown", str(tmp_path / "small.bin"), f"s3://{KMS_BUCKET}/cli/no")
    assert refused.returncode != 0 and "KMS.NotFoundException" in refused.stderr


def test_kms_bucket_default(daemon: Daemon, s3: Any, stored: dict[str, bytes], key_id: str,
                            tmp_path: Path) -> None:
    """PutBucketEncryption with aws:kms and a KMSMasterKeyID (boto3 and the CLI): stored,
    answered back with BucketKeyEnabled, applied to PUT, `aws s3 cp`, CopyObject and
    multipart uploads; a request's own AES256 wins."""
    s3.create_bucket(Bucket=KMS_DEFAULT_BUCKET)
    config = {"Rules": [{"ApplyServerSideEncryptionByDefault": {
        "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "alias/objstore"},
        "BucketKeyEnabled": True}]}
    put = _aws(daemon, tmp_path, "s3api", "put-bucket-encryption", "--bucket",
               KMS_DEFAULT_BUCKET, "--server-side-encryption-configuration", json.dumps(config))
    assert put.returncode == 0, put.stderr
    rule = s3.get_bucket_encryption(Bucket=KMS_DEFAULT_BUCKET)[
        "ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "alias/objstore"}
    assert rule["BucketKeyEnabled"] is True
    data = _kms_body(P + 33)
    assert _shows_kms(s3.put_object(Bucket=KMS_DEFAULT_BUCKET, Key="kms-by-default",
                                    Body=data), key_id)
    got = s3.get_object(Bucket=KMS_DEFAULT_BUCKET, Key="kms-by-default")
    assert got["Body"].read() == data and _shows_kms(got, key_id)
    assert KMS_MARKER not in _stored_blob(daemon, "kms-by-default")
    (tmp_path / "up.bin").write_bytes(data)
    up = _aws(daemon, tmp_path, "s3", "cp", str(tmp_path / "up.bin"),
              f"s3://{KMS_DEFAULT_BUCKET}/kms-cli-default.bin")
    assert up.returncode == 0, up.stderr
    assert _shows_kms(s3.head_object(Bucket=KMS_DEFAULT_BUCKET, Key="kms-cli-default.bin"),
                      key_id)
    copied = s3.copy_object(Bucket=KMS_DEFAULT_BUCKET, Key="kms-copied-in",
                            CopySource={"Bucket": BUCKET, "Key": "small"})
    assert _shows_kms(copied, key_id)
    made = s3.create_multipart_upload(Bucket=KMS_DEFAULT_BUCKET, Key="kms-multi-default")
    assert _shows_kms(made, key_id)
    s3.abort_multipart_upload(Bucket=KMS_DEFAULT_BUCKET, Key="kms-multi-default",
                              UploadId=made["UploadId"])
    own = s3.put_object(Bucket=KMS_DEFAULT_BUCKET, Key="kms-own-choice", Body=b"x",
                        ServerSideEncryption="AES256")
    assert own["ServerSideEncryption"] == "AES256" and "SSEKMSKeyId" not in own
    # The master key's own id (and no key id) can be the default too; a KMSMasterKeyID with
    # AES256 is refused as AWS refuses it.
    s3.put_bucket_encryption(Bucket=KMS_DEFAULT_BUCKET, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms",
                                                          "KMSMasterKeyID": key_id}}]})
    s3.put_bucket_encryption(Bucket=KMS_DEFAULT_BUCKET,
                             ServerSideEncryptionConfiguration=_sse_default("aws:kms"))
    assert "KMSMasterKeyID" not in s3.get_bucket_encryption(Bucket=KMS_DEFAULT_BUCKET)[
        "ServerSideEncryptionConfiguration"]["Rules"][0]["ApplyServerSideEncryptionByDefault"]
    with pytest.raises(ClientError) as caught:
        s3.put_bucket_encryption(Bucket=KMS_DEFAULT_BUCKET, ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256",
                                                              "KMSMasterKeyID": key_id}}]})
    assert caught.value.response["Error"]["Code"] == "InvalidArgument"


def test_no_kms_plaintext_on_disk(daemon: Daemon, s3: Any) -> None:
    """After every SSE-KMS test above (every body holds the marker, every one encrypted):
    the marker is nowhere under the data directory or the daemon's TMPDIR."""
    assert s3.list_objects_v2(Bucket=KMS_BUCKET)["KeyCount"] >= 8
    for root in (daemon.data_dir, daemon.temp_dir):
        found = [path for path in Path(root).rglob("*")
                 if path.is_file() and KMS_MARKER in path.read_bytes()]
        assert found == []


def test_recover_keeps_the_default_and_the_encrypted_objects(daemon: Daemon, s3: Any) -> None:
    """Last in the module (restarts its daemon): the bucket default comes back from the
    control record, and an object it encrypted reads back, after the database is lost."""
    bucket = "sse-recover"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_encryption(Bucket=bucket,
                             ServerSideEncryptionConfiguration=_sse_default("AES256"))
    data = _body(P + 77)
    s3.put_object(Bucket=bucket, Key="kept", Body=data)
    daemon.stop()
    drop_database(daemon)
    recovered = objstore_cli(daemon, "recover")
    assert recovered.returncode == 0, recovered.stderr
    daemon.start()
    client: Any = make_client(daemon.endpoint)
    rule = client.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"][
        "Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    got = client.get_object(Bucket=bucket, Key="kept")
    assert got["Body"].read() == data and got["ServerSideEncryption"] == "AES256"
    assert client.put_object(Bucket=bucket, Key="new", Body=b"x")["ServerSideEncryption"] \
        == "AES256"
