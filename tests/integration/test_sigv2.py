"""SigV2 (HMAC-SHA1) with the clients that still produce it: `aws s3 presign` (awscli
1.x), boto3 with signature_version "s3", a presigned URL fetched by curl; an expired or
tampered URL is 403 with the S3 error document."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest
import urllib3
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from objstore.http import sigv2
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

AWS = str(Path(sys.executable).with_name("aws"))


def v2_client(endpoint: str, secret_key: str = ROOT_SECRET_KEY) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ROOT_ACCESS_KEY,
                        aws_secret_access_key=secret_key, region_name="us-east-1",
                        config=BotoConfig(signature_version="s3",
                                          retries={"max_attempts": 1}))


@pytest.fixture
def bucket(daemon: Daemon) -> str:
    name = f"v2-{uuid.uuid4().hex[:12]}"
    v2_client(daemon.endpoint).create_bucket(Bucket=name)
    return name


def test_boto3_signature_s3_operations(daemon: Daemon, bucket: str) -> None:
    s3 = v2_client(daemon.endpoint)
    s3.put_object(Bucket=bucket, Key="dir/é x.txt", Body=b"hello v2",
                  Metadata={"colour": "blue"}, ContentType="text/plain")
    got = s3.get_object(Bucket=bucket, Key="dir/é x.txt")
    assert got["Body"].read() == b"hello v2" and got["Metadata"] == {"colour": "blue"}
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="dir/")
    assert [o["Key"] for o in listed["Contents"]] == ["dir/é x.txt"]
    s3.put_object_tagging(Bucket=bucket, Key="dir/é x.txt",
                          Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})
    assert s3.get_object_tagging(Bucket=bucket, Key="dir/é x.txt")["TagSet"] == [
        {"Key": "a", "Value": "b"}]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1,
                          Body=b"part")["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": etag}]})
    s3.delete_object(Bucket=bucket, Key="mp")
    with pytest.raises(ClientError) as caught:
        v2_client(daemon.endpoint, "wrong").list_objects(Bucket=bucket)
    assert caught.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_aws_s3_presign_and_curl(daemon: Daemon, bucket: str, aws_env: dict[str, str]) -> None:
    v2_client(daemon.endpoint).put_object(Bucket=bucket, Key="share me.txt", Body=b"shared")
    made = subprocess.run([AWS, "--endpoint-url", daemon.endpoint, "s3", "presign",
                           f"s3://{bucket}/share me.txt", "--expires-in", "300"],
                          env=aws_env, text=True, capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    url = made.stdout.strip()
    assert "AWSAccessKeyId=" in url and "Signature=" in url  # awscli 1.x presigns SigV2
    fetched = subprocess.run(["curl", "-sS", "-f", url], capture_output=True, timeout=30)
    assert fetched.returncode == 0 and fetched.stdout == b"shared"
    tampered = url.replace("share%20me.txt", "share%20me.tx")
    answer = urllib3.request("GET", tampered)
    assert answer.status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in answer.data


def test_expired_url_is_refused(daemon: Daemon, bucket: str) -> None:
    expires = int(time.time()) - 5
    signature = sigv2.sign_v2(f"GET\n\n\n{expires}\n/{bucket}/k".encode(), ROOT_SECRET_KEY)
    url = (f"{daemon.endpoint}/{bucket}/k?AWSAccessKeyId={ROOT_ACCESS_KEY}&Expires={expires}"
           f"&Signature={quote(signature, safe='')}")
    answer = urllib3.request("GET", url)
    assert answer.status == 403 and b"Request has expired" in answer.data


def test_presigned_put(daemon: Daemon, bucket: str) -> None:
    s3 = v2_client(daemon.endpoint)
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "up"},
                                    ExpiresIn=60)
    assert urllib3.request("PUT", url, body=b"uploaded").status == 200
    assert s3.get_object(Bucket=bucket, Key="up")["Body"].read() == b"uploaded"
