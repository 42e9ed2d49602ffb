"""Multipart upload end to end against the real daemon: boto3 (every operation and error
case, its default checksums, TransferConfig uploads and downloads), the aws CLI, and what a
completion leaves on disk (`objstore check`, `objstore recover`)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from awscrt import checksums
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon, drop_database, objstore_cli

MIB = 1024 * 1024
PART = 5 * MIB
AWS = str(Path(sys.executable).with_name("aws"))
OBJSTORE = str(Path(sys.executable).with_name("objstore"))


def new_bucket(s3: Any) -> str:
    name = f"mp-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = excinfo.value.response
    return str(response["Error"]["Code"]), int(response["ResponseMetadata"]["HTTPStatusCode"])


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def composite_etag(parts: list[bytes]) -> str:
    joined = b"".join(hashlib.md5(p).digest() for p in parts)
    return f'"{hashlib.md5(joined).hexdigest()}-{len(parts)}"'


def data_files(daemon: Daemon) -> dict[str, int]:
    """Blob files (not sidecars) on the data volume, with their sizes."""
    found = {}
    for path in (daemon.data_dir / "blobs").rglob("*"):
        if path.is_file() and not path.name.endswith(".meta.json"):
            found[path.name] = path.stat().st_size
    return found


def sidecar_only_blobs(daemon: Daemon) -> set[str]:
    files = set(data_files(daemon))
    return {p.name[: -len(".meta.json")] for p in (daemon.data_dir / "blobs").rglob("*.meta.json")
            if p.name[: -len(".meta.json")] not in files}


def removed_in_time(done: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait (bounded) for files whose removal runs after the answer."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "the deleted files were not removed in time"
        time.sleep(0.02)


class Upload:
    """One multipart upload driven through boto3."""

    def __init__(self, s3: Any, bucket: str, key: str, **create: Any) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self.created = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)
        self.upload_id: str = self.created["UploadId"]
        self.parts: dict[int, dict[str, Any]] = {}

    def put(self, number: int, body: bytes, **extra: Any) -> dict[str, Any]:
        response: dict[str, Any] = self.s3.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number,
            Body=body, **extra)
        self.parts[number] = response
        return response

    def listed(self, *numbers: int, checksum: str | None = None) -> list[dict[str, Any]]:
        entries = []
        for number in numbers or sorted(self.parts):
            entry = {"PartNumber": number, "ETag": self.parts[number]["ETag"]}
            if checksum:
                entry[checksum] = self.parts[number][checksum]
            entries.append(entry)
        return entries

    def complete(self, parts: list[dict[str, Any]] | None = None, **extra: Any) -> Any:
        return self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id,
            MultipartUpload={"Parts": self.listed() if parts is None else parts}, **extra)


# -- the main path ----------------------------------------------------------------------


def test_upload_complete_and_read_back(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    key = "dir/ünï code+%.bin"
    upload = Upload(s3, bucket, key, ContentType="video/mp4", Metadata={"colour": "blue"},
                    CacheControl="max-age=9", ContentDisposition="attachment",
                    StorageClass="STANDARD_IA", Tagging="project=alpha")
    datas = [os.urandom(PART), os.urandom(PART + 3), os.urandom(1234)]
    for number, data in enumerate(datas, start=1):
        assert upload.put(number, data)["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    files_before = data_files(daemon)
    done = upload.complete()
    assert done["ETag"] == composite_etag(datas)
    assert (done["Bucket"], done["Key"]) == (bucket, key)
    assert done["Location"].endswith("/" + bucket + "/dir/%C3%BCn%C3%AF%20code%2B%25.bin")
    assert "VersionId" not in done
    assert data_files(daemon) == files_before  # the parts' bytes were not rewritten
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == b"".join(datas)
    assert got["ETag"] == composite_etag(datas)
    assert (got["ContentType"], got["Metadata"], got["CacheControl"]) == (
        "video/mp4", {"colour": "blue"}, "max-age=9")
    assert (got["ContentDisposition"], got["StorageClass"]) == ("attachment", "STANDARD_IA")
    assert got["ResponseMetadata"]["HTTPHeaders"].get("x-amz-tagging-count") == "1"
    ranged = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={PART - 5}-{PART + 4}")
    assert ranged["Body"].read() == b"".join(datas)[PART - 5:PART + 5]
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"], o["ETag"]) for o in listed] == [
        (key, sum(map(len, datas)), composite_etag(datas))]
    with pytest.raises(ClientError) as caught:
        s3.list_parts(Bucket=bucket, Key=key, UploadId=upload.upload_id)
    assert error_of(caught) == ("NoSuchUpload", 404)


def test_unlisted_and_replaced_parts_are_deleted(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    before = data_files(daemon)
    upload = Upload(s3, bucket, "k")
    upload.put(1, b"first version of part 1")
    after_first = set(data_files(daemon)) - set(before)
    upload.put(1, os.urandom(PART))
    upload.put(2, b"tail")
    upload.put(3, b"uploaded but never listed")
    assert not after_first & set(data_files(daemon))  # the replaced part's blob is gone
    parts = s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in parts] == [
        (n, upload.parts[n]["ETag"]) for n in (1, 2, 3)]
    composites_before = sidecar_only_blobs(daemon)
    upload.complete(upload.listed(1, 2))
    new = {name: size for name, size in data_files(daemon).items() if name not in before}
    assert sorted(new.values()) == [4, PART]
    assert len(sidecar_only_blobs(daemon) - composites_before) == 1
    # Overwriting the composite frees its parts and its sidecar; so does deleting.
    s3.put_object(Bucket=bucket, Key="k", Body=b"plain")
    new = {name: size for name, size in data_files(daemon).items() if name not in before}
    assert sorted(new.values()) == [5]
    assert sidecar_only_blobs(daemon) == composites_before
    again = Upload(s3, bucket, "k")
    again.put(1, b"x")
    again.complete()
    s3.delete_object(Bucket=bucket, Key="k")
    # A delete removes its version's files after the answer (engine/removals.py).
    removed_in_time(lambda: data_files(daemon) == before
                    and sidecar_only_blobs(daemon) == composites_before)


def test_abort(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    before = data_files(daemon)
    upload = Upload(s3, bucket, "k")
    upload.put(1, b"a")
    upload.put(2, b"b")
    with pytest.raises(ClientError) as caught:
        s3.delete_bucket(Bucket=bucket)
    assert error_of(caught) == ("BucketNotEmpty", 409)
    response = s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload.upload_id)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert data_files(daemon) == before
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket)
    for call in (
        lambda: s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload.upload_id),
        lambda: upload.put(3, b"late"),
        lambda: upload.complete([{"PartNumber": 1, "ETag": upload.parts[1]["ETag"]}]),
        lambda: s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id),
    ):
        with pytest.raises(ClientError) as caught:
            call()
        assert error_of(caught) == ("NoSuchUpload", 404)
    s3.delete_bucket(Bucket=bucket)


# -- errors -----------------------------------------------------------------------------


def test_upload_ids_are_bound_to_their_bucket_and_key(s3: Any) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k")
    for key in ("other", "k/"):
        with pytest.raises(ClientError) as caught:
            s3.upload_part(Bucket=bucket, Key=key, UploadId=upload.upload_id, PartNumber=1,
                           Body=b"x")
        assert error_of(caught) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError) as caught:
        s3.upload_part(Bucket=bucket, Key="k", UploadId="no-such-upload", PartNumber=1,
                       Body=b"x")
    assert error_of(caught) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError) as caught:
        s3.create_multipart_upload(Bucket="no-such-bucket-here", Key="k")
    assert error_of(caught) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as caught:
        s3.list_multipart_uploads(Bucket="no-such-bucket-here")
    assert error_of(caught) == ("NoSuchBucket", 404)


@pytest.mark.parametrize("number", [0, 10001])
def test_part_numbers_out_of_range(s3: Any, number: int) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k")
    with pytest.raises(ClientError) as caught:
        upload.put(number, b"x")
    assert error_of(caught) == ("InvalidArgument", 400)
    upload.put(10000, b"the last part number is fine")


def test_completion_errors_change_nothing(s3: Any) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k")
    upload.put(1, os.urandom(PART))
    upload.put(2, b"small")
    upload.put(3, b"last")
    wrong_etag = [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]
    cases = [
        ([], ("MalformedXML", 400)),
        (upload.listed(2, 1), ("InvalidPartOrder", 400)),
        (upload.listed(1, 1), ("InvalidPartOrder", 400)),
        (upload.listed(1) + [{"PartNumber": 4, "ETag": upload.parts[3]["ETag"]}],
         ("InvalidPart", 400)),
        (wrong_etag, ("InvalidPart", 400)),
        (upload.listed(1, 2, 3), ("EntityTooSmall", 400)),
    ]
    for parts, expected in cases:
        with pytest.raises(ClientError) as caught:
            upload.complete(parts)
        assert error_of(caught) == expected, parts
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="k")
    listed = s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id)["Parts"]
    assert len(listed) == 3
    assert upload.complete(upload.listed(1, 3))["ETag"].endswith('-2"')


def test_malformed_complete_body(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k")
    upload.put(1, b"x")

    def send_body(request: Any, **_: Any) -> None:
        request.data = b"<CompleteMultipartUpload><Part><PartNumber>1"

    s3.meta.events.register("before-sign.s3.CompleteMultipartUpload", send_body)
    try:
        with pytest.raises(ClientError) as caught:
            upload.complete()
    finally:
        s3.meta.events.unregister("before-sign.s3.CompleteMultipartUpload", send_body)
    assert error_of(caught) == ("MalformedXML", 400)
    assert len(s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id)["Parts"]) == 1


# -- conditional completion ---------------------------------------------------------------


def test_conditional_completion(s3: Any) -> None:
    bucket = new_bucket(s3)
    first = Upload(s3, bucket, "k")
    first.put(1, b"one")
    with pytest.raises(ClientError) as caught:
        first.complete(IfMatch='"0123"')
    assert error_of(caught) == ("NoSuchKey", 404)
    done = first.complete(IfNoneMatch="*")
    second = Upload(s3, bucket, "k")
    second.put(1, b"two")
    with pytest.raises(ClientError) as caught:
        second.complete(IfNoneMatch="*")
    assert error_of(caught) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as caught:
        second.complete(IfMatch='"0123456789abcdef0123456789abcdef"')
    assert error_of(caught) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as caught:
        second.complete(IfNoneMatch=done["ETag"])
    assert error_of(caught) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"one"
    second.complete(IfMatch=done["ETag"])
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"two"


def test_versioned_bucket_completion_returns_a_version_id(s3: Any) -> None:
    bucket = new_bucket(s3)
    try:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    except ClientError as error:
        if error.response["Error"]["Code"] == "NotImplemented":
            pytest.skip("bucket versioning is not available in this build yet")
        raise
    upload = Upload(s3, bucket, "k")
    upload.put(1, b"v1")
    done = upload.complete()
    assert done["VersionId"] and done["VersionId"] != "null"
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["VersionId"] == done["VersionId"]


def _answer(done: dict[str, Any]) -> dict[str, Any]:
    return {name: done.get(name) for name in ("Location", "Bucket", "Key", "ETag",
                                              "VersionId", "ChecksumCRC32")}


@pytest.mark.parametrize("versioned", [False, True])
def test_a_retried_completion_gets_the_same_answer(s3: Any, versioned: bool) -> None:
    bucket = new_bucket(s3)
    if versioned:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    upload = Upload(s3, bucket, "k", ChecksumAlgorithm="CRC32")
    upload.put(1, b"a" * PART, ChecksumAlgorithm="CRC32")
    upload.put(2, b"end", ChecksumAlgorithm="CRC32")
    first = upload.complete(upload.listed(checksum="ChecksumCRC32"))
    again = upload.complete(upload.listed(checksum="ChecksumCRC32"))
    assert _answer(again) == _answer(first)
    assert (first.get("VersionId") is not None) == versioned
    with pytest.raises(ClientError) as excinfo:  # another part list: as AWS, no such upload
        upload.complete(upload.listed(1))
    assert error_of(excinfo) == ("NoSuchUpload", 404)
    s3.put_object(Bucket=bucket, Key="k", Body=b"newer")
    if versioned:  # the version it made is still there
        assert _answer(upload.complete()) == _answer(first)
    else:
        with pytest.raises(ClientError) as excinfo:
            upload.complete()
        assert error_of(excinfo) == ("NoSuchUpload", 404)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# -- UploadPartCopy ----------------------------------------------------------------------


def test_upload_part_copy(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    source = os.urandom(PART + 100)
    s3.put_object(Bucket=bucket, Key="source", Body=source)
    upload = Upload(s3, bucket, "dest")
    first = s3.upload_part_copy(Bucket=bucket, Key="dest", UploadId=upload.upload_id,
                                PartNumber=1, CopySource={"Bucket": bucket, "Key": "source"},
                                CopySourceRange=f"bytes=0-{PART - 1}")
    assert first["CopyPartResult"]["ETag"] == f'"{hashlib.md5(source[:PART]).hexdigest()}"'
    assert "LastModified" in first["CopyPartResult"]
    second = s3.upload_part_copy(Bucket=bucket, Key="dest", UploadId=upload.upload_id,
                                 PartNumber=2, CopySource=f"/{bucket}/source")
    parts = [{"PartNumber": 1, "ETag": first["CopyPartResult"]["ETag"]},
             {"PartNumber": 2, "ETag": second["CopyPartResult"]["ETag"]}]
    upload.complete(parts)
    got = s3.get_object(Bucket=bucket, Key="dest")["Body"].read()
    assert got == source[:PART] + source


def test_upload_part_copy_is_never_a_copy_object(s3: Any) -> None:
    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="source", Body=b"bytes")
    with pytest.raises(ClientError) as caught:
        s3.upload_part_copy(Bucket=bucket, Key="dest", UploadId="no-such-upload", PartNumber=1,
                            CopySource={"Bucket": bucket, "Key": "source"})
    assert error_of(caught) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="dest")


def test_upload_part_copy_errors(s3: Any) -> None:
    bucket = new_bucket(s3)
    put = s3.put_object(Bucket=bucket, Key="source", Body=b"0123456789")
    upload = Upload(s3, bucket, "dest")

    def copy(**extra: Any) -> Any:
        args = {"CopySource": {"Bucket": bucket, "Key": "source"}, **extra}
        return s3.upload_part_copy(Bucket=bucket, Key="dest", UploadId=upload.upload_id,
                                   PartNumber=1, **args)

    cases = [
        ({"CopySource": {"Bucket": bucket, "Key": "missing"}}, ("NoSuchKey", 404)),
        ({"CopySource": {"Bucket": "no-such-bucket-x", "Key": "k"}}, ("NoSuchBucket", 404)),
        ({"CopySourceRange": "bytes=5-10"}, ("InvalidRange", 416)),
        ({"CopySourceRange": "bytes=5-"}, ("InvalidArgument", 400)),
        ({"CopySourceIfMatch": '"0123"'}, ("PreconditionFailed", 412)),
        ({"CopySourceIfNoneMatch": put["ETag"]}, ("PreconditionFailed", 412)),
        ({"CopySourceIfUnmodifiedSince": "Mon, 01 Jan 2001 00:00:00 GMT"},
         ("PreconditionFailed", 412)),
        ({"CopySourceIfModifiedSince": "Fri, 01 Jan 2100 00:00:00 GMT"},
         ("PreconditionFailed", 412)),
    ]
    for extra, expected in cases:
        with pytest.raises(ClientError) as caught:
            copy(**extra)
        assert error_of(caught) == expected, extra
    ok = copy(CopySourceIfMatch=put["ETag"], CopySourceRange="bytes=2-4")
    assert ok["CopyPartResult"]["ETag"] == f'"{hashlib.md5(b"234").hexdigest()}"'


# -- checksums ----------------------------------------------------------------------------


def test_boto3_default_part_checksums_without_an_upload_algorithm(s3: Any) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k")
    assert "ChecksumAlgorithm" not in upload.created
    data = os.urandom(1000)
    response = upload.put(1, data)  # boto3 sends a CRC32 trailer by default
    assert response["ChecksumCRC32"] == b64(zlib.crc32(data).to_bytes(4, "big"))
    upload.complete()
    head = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert "ChecksumCRC32" not in head and "ChecksumType" not in head


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "SHA1", "SHA256"])
def test_composite_checksums(s3: Any, algorithm: str) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k", ChecksumAlgorithm=algorithm)
    assert (upload.created["ChecksumAlgorithm"], upload.created["ChecksumType"]) == (
        algorithm, "COMPOSITE")
    datas = [os.urandom(PART), os.urandom(777)]
    member = f"Checksum{algorithm}"
    for number, data in enumerate(datas, start=1):
        upload.put(number, data, ChecksumAlgorithm=algorithm)
    listed = s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id)
    assert (listed["ChecksumAlgorithm"], listed["ChecksumType"]) == (algorithm, "COMPOSITE")
    assert [p[member] for p in listed["Parts"]] == [upload.parts[n][member] for n in (1, 2)]
    with pytest.raises(ClientError) as caught:
        upload.complete()  # the per-part checksums are required for COMPOSITE
    assert error_of(caught) == ("InvalidRequest", 400)
    done = upload.complete(upload.listed(checksum=member))
    raw = b"".join(base64.b64decode(upload.parts[n][member]) for n in (1, 2))
    digest = {"CRC32": lambda d: zlib.crc32(d).to_bytes(4, "big"),
              "CRC32C": lambda d: checksums.crc32c(d).to_bytes(4, "big"),
              "SHA1": lambda d: hashlib.sha1(d).digest(),
              "SHA256": lambda d: hashlib.sha256(d).digest()}[algorithm]
    expected = f"{b64(digest(raw))}-2"
    assert (done[member], done["ChecksumType"]) == (expected, "COMPOSITE")
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert (got[member], got["ChecksumType"]) == (expected, "COMPOSITE")
    assert got["Body"].read() == b"".join(datas)


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
def test_full_object_checksums(s3: Any, algorithm: str) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k", ChecksumAlgorithm=algorithm, ChecksumType="FULL_OBJECT")
    assert upload.created["ChecksumType"] == "FULL_OBJECT"
    datas = [os.urandom(PART), os.urandom(PART), os.urandom(99)]
    for number, data in enumerate(datas, start=1):
        upload.put(number, data, ChecksumAlgorithm=algorithm)
    whole = b"".join(datas)
    crc = {"CRC32": lambda d: zlib.crc32(d).to_bytes(4, "big"),
           "CRC32C": lambda d: checksums.crc32c(d).to_bytes(4, "big"),
           "CRC64NVME": lambda d: checksums.crc64nvme(d).to_bytes(8, "big")}[algorithm]
    expected = b64(crc(whole))
    member = f"Checksum{algorithm}"
    with pytest.raises(ClientError) as caught:
        upload.complete(**{member: b64(crc(b"something else"))})
    assert error_of(caught) == ("BadDigest", 400)
    done = upload.complete(**{member: expected, "ChecksumType": "FULL_OBJECT",
                              "MpuObjectSize": len(whole)})
    assert (done[member], done["ChecksumType"]) == (expected, "FULL_OBJECT")
    # boto3 validates a FULL_OBJECT checksum against the body it receives
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["ResponseMetadata"]["HTTPHeaders"][f"x-amz-checksum-{algorithm.lower()}"] \
        == expected
    assert got["Body"].read() == whole


def test_checksum_header_refusals(s3: Any) -> None:
    bucket = new_bucket(s3)
    with pytest.raises(ClientError) as caught:
        s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm="SHA256",
                                   ChecksumType="FULL_OBJECT")
    assert error_of(caught) == ("InvalidRequest", 400)
    upload = Upload(s3, bucket, "k", ChecksumAlgorithm="CRC32C")
    with pytest.raises(ClientError) as caught:
        upload.put(1, b"data", ChecksumAlgorithm="SHA256")
    assert error_of(caught) == ("InvalidRequest", 400)
    with pytest.raises(ClientError) as caught:
        upload.put(1, b"data", ChecksumCRC32C=b64(checksums.crc32c(b"other").to_bytes(4, "big")))
    assert error_of(caught) == ("BadDigest", 400)
    with pytest.raises(ClientError) as caught:
        upload.put(1, b"data", ContentMD5=b64(hashlib.md5(b"other").digest()))
    assert error_of(caught) == ("BadDigest", 400)
    assert "Parts" not in s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id)


# -- boto3 transfers ----------------------------------------------------------------------


def test_transfer_manager_round_trip(s3: Any, tmp_path: Path) -> None:
    bucket = new_bucket(s3)
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(21 * MIB))
    config = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=PART,
                            max_concurrency=4)
    s3.upload_file(str(source), bucket, "big.bin", Config=config)
    head = s3.head_object(Bucket=bucket, Key="big.bin", ChecksumMode="ENABLED")
    assert head["ETag"].endswith('-5"') and head["ContentLength"] == 21 * MIB
    assert head["ChecksumType"] == "COMPOSITE" and head["ChecksumCRC32"].endswith("-5")
    target = tmp_path / "target.bin"
    s3.download_file(bucket, "big.bin", str(target), Config=config)
    assert target.read_bytes() == source.read_bytes()


def test_transfer_manager_full_object_checksum(s3: Any) -> None:
    bucket = new_bucket(s3)
    data = os.urandom(12 * MIB)
    full = b64(zlib.crc32(data).to_bytes(4, "big"))
    config = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART)
    s3.upload_fileobj(io.BytesIO(data), bucket, "k", ExtraArgs={"ChecksumCRC32": full},
                      Config=config)
    head = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC32"], head["ChecksumType"]) == (full, "FULL_OBJECT")
    target = io.BytesIO()
    s3.download_fileobj(bucket, "k", target, Config=config)
    assert target.getvalue() == data


# -- listing ------------------------------------------------------------------------------


def test_list_parts_pages(s3: Any) -> None:
    bucket = new_bucket(s3)
    upload = Upload(s3, bucket, "k", StorageClass="STANDARD_IA")
    for number in (1, 2, 5, 7, 9):
        upload.put(number, f"part {number}".encode())
    page = s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id, MaxParts=2)
    assert [p["PartNumber"] for p in page["Parts"]] == [1, 2]
    assert (page["IsTruncated"], page["NextPartNumberMarker"], page["MaxParts"]) == (True, 2, 2)
    assert page["Initiator"]["DisplayName"] == "root" and page["Owner"]["DisplayName"] == "root"
    assert page["StorageClass"] == "STANDARD_IA"
    page = s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id, MaxParts=2,
                         PartNumberMarker=5)
    assert [p["PartNumber"] for p in page["Parts"]] == [7, 9] and not page["IsTruncated"]
    paginator = s3.get_paginator("list_parts")
    numbers = [p["PartNumber"] for resp in paginator.paginate(
        Bucket=bucket, Key="k", UploadId=upload.upload_id, PaginationConfig={"PageSize": 2})
        for p in resp.get("Parts", [])]
    assert numbers == [1, 2, 5, 7, 9]
    part = s3.list_parts(Bucket=bucket, Key="k", UploadId=upload.upload_id)["Parts"][0]
    assert part["Size"] == len(b"part 1") and part["ETag"] == upload.parts[1]["ETag"]


def test_list_multipart_uploads(s3: Any) -> None:
    bucket = new_bucket(s3)
    made: dict[str, list[str]] = {}
    for key in ["a/1", "a/2", "b", "b", "c/x", "d e+f"]:
        made.setdefault(key, []).append(Upload(s3, bucket, key).upload_id)
    everything = s3.list_multipart_uploads(Bucket=bucket)
    assert [(u["Key"], u["UploadId"]) for u in everything["Uploads"]] == [
        (key, upload_id) for key in sorted(made) for upload_id in made[key]]
    assert everything["Uploads"][0]["Initiator"]["DisplayName"] == "root"
    grouped = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["a/", "c/"]
    assert [u["Key"] for u in grouped["Uploads"]] == ["b", "b", "d e+f"]
    prefixed = s3.list_multipart_uploads(Bucket=bucket, Prefix="a/")
    assert [u["Key"] for u in prefixed["Uploads"]] == ["a/1", "a/2"]
    page = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/", MaxUploads=2)
    assert page["IsTruncated"] and [p["Prefix"] for p in page["CommonPrefixes"]] == ["a/"]
    assert (page["NextKeyMarker"], page["NextUploadIdMarker"]) == ("b", made["b"][0])
    rest = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/", KeyMarker="b",
                                     UploadIdMarker=made["b"][0])
    assert [u["UploadId"] for u in rest["Uploads"]] == [made["b"][1], made["d e+f"][0]]
    paginator = s3.get_paginator("list_multipart_uploads")
    keys = [u["Key"] for resp in paginator.paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 2}) for u in resp.get("Uploads", [])]
    assert keys == ["a/1", "a/2", "b", "b", "c/x", "d e+f"]
    # botocore decodes listings of objects, not of uploads: the keys arrive as sent
    encoded = s3.list_multipart_uploads(Bucket=bucket, Prefix="d e", EncodingType="url")
    assert [u["Key"] for u in encoded["Uploads"]] == ["d%20e%2Bf"]
    assert (encoded["Prefix"], encoded["EncodingType"]) == ("d%20e", "url")


# -- a hundred parts, and the data volume after a completion -----------------------------


def test_a_hundred_part_completion_rewrites_nothing(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    source = os.urandom(PART)
    s3.put_object(Bucket=bucket, Key="source", Body=source)
    upload = Upload(s3, bucket, "big")
    etags = []
    for number in range(1, 101):
        copied = s3.upload_part_copy(Bucket=bucket, Key="big", UploadId=upload.upload_id,
                                     PartNumber=number,
                                     CopySource={"Bucket": bucket, "Key": "source"})
        etags.append({"PartNumber": number, "ETag": copied["CopyPartResult"]["ETag"]})
    files_before = data_files(daemon)
    composites_before = sidecar_only_blobs(daemon)
    done = upload.complete(etags)
    assert done["ETag"] == composite_etag([source] * 100)
    assert data_files(daemon) == files_before
    assert len(sidecar_only_blobs(daemon) - composites_before) == 1
    head = s3.head_object(Bucket=bucket, Key="big")
    assert head["ContentLength"] == 100 * PART
    middle = s3.get_object(Bucket=bucket, Key="big", Range=f"bytes={50 * PART - 3}-{50 * PART + 2}")
    assert middle["Body"].read() == source[-3:] + source[:3]


# -- the aws CLI --------------------------------------------------------------------------


def aws(env: dict[str, str], endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AWS, "--endpoint-url", endpoint, *args], env=env, text=True,
                          capture_output=True, timeout=300)


def test_aws_cli_multipart_copy_and_list(daemon: Daemon, aws_env: dict[str, str],
                                         tmp_path: Path) -> None:
    for setting, value in (("multipart_threshold", "8MB"), ("multipart_chunksize", "8MB")):
        configured = subprocess.run([AWS, "configure", "set", f"default.s3.{setting}", value],
                                    env=aws_env, capture_output=True, text=True, timeout=60)
        assert configured.returncode == 0, configured.stderr
    bucket = f"cli-mp-{uuid.uuid4().hex[:10]}"
    assert aws(aws_env, daemon.endpoint, "s3", "mb", f"s3://{bucket}").returncode == 0
    source = tmp_path / "forty.bin"
    source.write_bytes(os.urandom(40 * MIB + 123))
    up = aws(aws_env, daemon.endpoint, "s3", "cp", str(source), f"s3://{bucket}/forty.bin")
    assert up.returncode == 0, up.stderr
    head = aws(aws_env, daemon.endpoint, "s3api", "head-object", "--bucket", bucket,
               "--key", "forty.bin")
    assert head.returncode == 0, head.stderr
    assert json.loads(head.stdout)["ETag"].endswith('-6"')  # 5 parts of 8 MiB and the rest
    copy = tmp_path / "copy.bin"
    down = aws(aws_env, daemon.endpoint, "s3", "cp", f"s3://{bucket}/forty.bin", str(copy))
    assert down.returncode == 0, down.stderr
    assert copy.read_bytes() == source.read_bytes()

    created = aws(aws_env, daemon.endpoint, "s3api", "create-multipart-upload", "--bucket",
                  bucket, "--key", "pending/one")
    assert created.returncode == 0, created.stderr
    upload_id = json.loads(created.stdout)["UploadId"]
    listed = aws(aws_env, daemon.endpoint, "s3api", "list-multipart-uploads", "--bucket", bucket)
    assert listed.returncode == 0, listed.stderr
    uploads = json.loads(listed.stdout)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("pending/one", upload_id)]
    aborted = aws(aws_env, daemon.endpoint, "s3api", "abort-multipart-upload", "--bucket",
                  bucket, "--key", "pending/one", "--upload-id", upload_id)
    assert aborted.returncode == 0, aborted.stderr
    empty = aws(aws_env, daemon.endpoint, "s3api", "list-multipart-uploads", "--bucket", bucket)
    assert "Uploads" not in (json.loads(empty.stdout) if empty.stdout.strip() else {})


# -- check and recover on a fresh daemon ----------------------------------------------------








def test_check_and_recover_understand_multipart_objects(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="multi")
    datas = [os.urandom(PART), os.urandom(4321)]
    done = Upload(s3, "multi", "video", ContentType="video/mp4", Metadata={"n": "1"},
                  ChecksumAlgorithm="SHA256")
    for number, data in enumerate(datas, start=1):
        done.put(number, data, ChecksumAlgorithm="SHA256")
    completed = done.complete(done.listed(checksum="ChecksumSHA256"))
    pending = Upload(s3, "multi", "pending")
    pending.put(1, b"an open upload's part")
    node.stop()

    report = objstore_cli(node, "check", "--orphan-grace-seconds", "0", "--deep")
    assert report.returncode == 0, report.stdout + report.stderr
    assert "ok: database and files agree" in report.stdout
    drop_database(node)
    recovered = objstore_cli(node, "recover")
    assert recovered.returncode == 0, recovered.stderr

    node.start()
    s3 = make_client(node.endpoint)
    got = s3.get_object(Bucket="multi", Key="video", ChecksumMode="ENABLED")
    assert got["Body"].read() == b"".join(datas)
    assert got["ETag"] == completed["ETag"] == composite_etag(datas)
    assert (got["ContentType"], got["Metadata"]) == ("video/mp4", {"n": "1"})
    assert got["ChecksumSHA256"] == completed["ChecksumSHA256"]
