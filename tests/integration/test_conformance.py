"""Corners of S3 conformance that real clients meet, with boto3: user metadata that is not
US-ASCII (RFC 2047 in and out, as AWS), a part whose checksum is wrong (BadDigest), and
encoding-type=url on the key fields of every listing."""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"conf-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def test_non_ascii_metadata_as_aws_returns_it(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={
        "plain": "ascii value", "encoded": "=?UTF-8?B?SGVsbG8gV29ybGTDqQ==?="})
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["Metadata"]["plain"] == "ascii value"
    assert head["Metadata"]["encoded"] == "=?UTF-8?Q?Hello_World=C3=A9?="


def test_wrong_part_checksum_is_bad_digest(s3: Any, bucket: str) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp",
                                        ChecksumAlgorithm="SHA256")["UploadId"]
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    with pytest.raises(ClientError) as caught:
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"part",
                       ChecksumSHA256=wrong)
    assert caught.value.response["Error"]["Code"] == "BadDigest"
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)


def test_encoding_type_url_on_every_listing(s3: Any, bucket: str) -> None:
    # asked explicitly, botocore leaves the fields as the server encoded them
    key = "dir one/ü+x\x01"
    encoded = "dir%20one/%C3%BC%2Bx%01"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="dir one/ü+x")["UploadId"]
    v2 = s3.list_objects_v2(Bucket=bucket, EncodingType="url", Prefix="dir ")
    assert [o["Key"] for o in v2["Contents"]] == [encoded] and v2["Prefix"] == "dir%20"
    v1 = s3.list_objects(Bucket=bucket, EncodingType="url", Delimiter="/")
    assert v1["CommonPrefixes"] == [{"Prefix": "dir%20one/"}]
    versions = s3.list_object_versions(Bucket=bucket, EncodingType="url")
    assert [v["Key"] for v in versions["Versions"]] == [encoded]
    uploads = s3.list_multipart_uploads(Bucket=bucket, EncodingType="url")
    assert [u["Key"] for u in uploads["Uploads"]] == ["dir%20one/%C3%BC%2Bx"]
    s3.abort_multipart_upload(Bucket=bucket, Key="dir one/ü+x", UploadId=upload)


def test_expiration_header_with_a_tag_filter(s3: Any, bucket: str) -> None:
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [{
        "ID": "temp", "Status": "Enabled", "Expiration": {"Days": 3},
        "Filter": {"Tag": {"Key": "kind", "Value": "temp"}}}]})
    tagged = s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="kind=temp")
    assert 'rule-id="temp"' in tagged["Expiration"]
    assert 'rule-id="temp"' in s3.head_object(Bucket=bucket, Key="t")["Expiration"]
    plain = s3.put_object(Bucket=bucket, Key="p", Body=b"x")
    assert "Expiration" not in plain
    assert "Expiration" not in s3.head_object(Bucket=bucket, Key="p")
