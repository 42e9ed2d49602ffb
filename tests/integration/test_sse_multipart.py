"""SSE-S3 multipart uploads on one real daemon with [encryption] enabled: the request
headers AWS takes and refuses around them, the AWS CLI's multipart `cp --sse AES256`, and
a flipped byte in a stored package of a part (an error to the client, never wrong bytes,
and a `check --deep` finding).

AWS has no `x-amz-server-side-encryption` parameter on UploadPart, UploadPartCopy,
GetObject or HeadObject: a part follows its upload's setting, a read decrypts whatever the
object holds; the header there is answered 400 InvalidArgument "x-amz-server-side-
encryption header is not supported for this operation." (never 501)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.conftest import encrypted_daemon, make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

P = 64 * 1024
PART = 5 * 1024 * 1024
MARKER = b"SSE-MULTIPART-PLAINTEXT-MARKER-7c1e"
BUCKET = "sse-multipart"
BIN = Path(sys.executable).parent


def _body(size: int) -> bytes:
    chunk = MARKER + os.urandom(4096 - len(MARKER))
    return (chunk * (size // len(chunk) + 1))[:size]


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    with encrypted_daemon(request, tmp_path_factory, "sse-multipart") as running:
        yield running


@pytest.fixture(scope="module")
def s3(daemon: Daemon) -> Any:
    client: Any = make_client(daemon.endpoint)
    client.create_bucket(Bucket=BUCKET)
    return client


def _with_header(s3: Any, operation: str, value: str = "AES256") -> Callable[[], None]:
    """Make `s3` send x-amz-server-side-encryption on `operation` (boto3 has no such
    parameter there); returns the undo."""
    def add(request: Any, **_: Any) -> None:
        request.headers["x-amz-server-side-encryption"] = value

    event = f"before-sign.s3.{operation}"
    s3.meta.events.register(event, add)
    return lambda: s3.meta.events.unregister(event, add)


def _upload(s3: Any, key: str, body: bytes) -> str:
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key, ServerSideEncryption="AES256")
    parts = []
    for number, at in enumerate(range(0, len(body), PART), start=1):
        answer = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload["UploadId"],
                                PartNumber=number, Body=body[at:at + PART])
        assert answer["ServerSideEncryption"] == "AES256"  # the upload's setting
        parts.append({"PartNumber": number, "ETag": answer["ETag"]})
    s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": parts})
    return str(upload["UploadId"])


def _invalid_argument(caught: pytest.ExceptionInfo[ClientError], body: bool = True) -> None:
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    if body:  # a HEAD answer has none
        assert response["Error"]["Code"] == "InvalidArgument"
        assert response["Error"]["Message"] == ("x-amz-server-side-encryption header is not "
                                                "supported for this operation.")
        assert response["Error"]["ArgumentName"] == "x-amz-server-side-encryption"
        assert response["Error"]["ArgumentValue"] == "AES256"


def test_upload_part_with_the_sse_header_is_invalid_argument_as_on_aws(s3: Any) -> None:
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key="header",
                                        ServerSideEncryption="AES256")["UploadId"]
    undo = _with_header(s3, "UploadPart")
    try:
        with pytest.raises(ClientError) as caught:
            s3.upload_part(Bucket=BUCKET, Key="header", UploadId=upload, PartNumber=1,
                           Body=b"refused part")
    finally:
        undo()
    _invalid_argument(caught)
    assert s3.list_parts(Bucket=BUCKET, Key="header", UploadId=upload).get("Parts", []) == []
    # Without it the part is taken, encrypted as its upload says.
    answer = s3.upload_part(Bucket=BUCKET, Key="header", UploadId=upload, PartNumber=1,
                            Body=b"taken part")
    assert answer["ServerSideEncryption"] == "AES256"
    s3.complete_multipart_upload(Bucket=BUCKET, Key="header", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1,
                                                             "ETag": answer["ETag"]}]})
    got = s3.get_object(Bucket=BUCKET, Key="header")
    assert got["Body"].read() == b"taken part" and got["ServerSideEncryption"] == "AES256"


@pytest.mark.parametrize("operation", ["GetObject", "HeadObject"])
def test_a_read_with_the_sse_header_is_invalid_argument_as_on_aws(s3: Any,
                                                                  operation: str) -> None:
    s3.put_object(Bucket=BUCKET, Key="read-me", Body=b"x", ServerSideEncryption="AES256")
    undo = _with_header(s3, operation)
    try:
        with pytest.raises(ClientError) as caught:
            if operation == "GetObject":
                s3.get_object(Bucket=BUCKET, Key="read-me")
            else:
                s3.head_object(Bucket=BUCKET, Key="read-me")
    finally:
        undo()
    _invalid_argument(caught, body=operation == "GetObject")


def test_aws_cli_multipart_cp_with_sse(daemon: Daemon, s3: Any, tmp_path: Path) -> None:
    """`aws s3 cp --sse AES256` of a file above the CLI's multipart threshold (8 MiB):
    the CLI sends the header on CreateMultipartUpload only; the object is encrypted."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ROOT_ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=ROOT_SECRET_KEY, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"))
    data = _body(9 * 1024 * 1024 + 123)
    (tmp_path / "up.bin").write_bytes(data)
    aws = [str(BIN / "aws"), "--endpoint-url", daemon.endpoint, "s3", "cp"]
    up = subprocess.run([*aws, "--sse", "AES256", str(tmp_path / "up.bin"),
                         f"s3://{BUCKET}/cli-multipart.bin"],
                        env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    head = s3.head_object(Bucket=BUCKET, Key="cli-multipart.bin")
    assert head["ServerSideEncryption"] == "AES256" and head["ETag"].endswith('-2"')
    down = subprocess.run([*aws, f"s3://{BUCKET}/cli-multipart.bin", str(tmp_path / "d.bin")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "d.bin").read_bytes() == data


def _part_blobs(daemon: Daemon, key: str) -> list[Path]:
    for path in (daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("bucket") == BUCKET and document.get("key") == key \
                and document.get("parts"):
            return [daemon.data_dir / "blobs" / part["blob_id"][0:2] / part["blob_id"][2:4]
                    / part["blob_id"] for part in document["parts"]]
    raise AssertionError(f"no sidecar of the composite object {key}")


def test_a_flipped_byte_in_a_part_is_an_error_and_a_deep_check_finding(
        daemon: Daemon, s3: Any) -> None:
    data = _body(PART + 3 * P + 5)
    _upload(s3, "mp-victim", data)
    [first, second] = _part_blobs(daemon, "mp-victim")
    assert MARKER not in first.read_bytes() and MARKER not in second.read_bytes()
    stored = bytearray(second.read_bytes())
    stored[P + 16 + 9] ^= 0x20  # the second package of part 2
    second.write_bytes(bytes(stored))
    # What does not touch that package still reads (Ranges decrypt only their packages).
    intact = f"bytes={PART - 10}-{PART + P - 1}"
    assert s3.get_object(Bucket=BUCKET, Key="mp-victim", Range=intact)["Body"].read() == \
        data[PART - 10:PART + P]
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=BUCKET, Key="mp-victim",
                      Range=f"bytes={PART + P}-{PART + P + 10}")["Body"].read()
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    with pytest.raises(Exception) as streamed:  # noqa: PT011 - whatever the client raises
        got = s3.get_object(Bucket=BUCKET, Key="mp-victim")["Body"].read()
        assert got == data  # never reached with the right bytes: it must not read at all
    assert not isinstance(streamed.value, AssertionError)
    result = subprocess.run([str(BIN / "objstore"), "check", "--deep", "--config",
                             str(daemon.config_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    findings = [line for line in result.stdout.splitlines() if f"{BUCKET}/" in line]
    assert findings and all("mp-victim" in line for line in findings), result.stdout
