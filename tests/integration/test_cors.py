"""Bucket CORS with boto3 and the requests a browser sends: Put/Get/DeleteBucketCors,
a preflight OPTIONS answered per rule (403 CORSResponse when none matches), and the
Access-Control-* headers on actual responses, errors and presigned requests included."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.integration.daemon import Daemon

APP = "https://app.example.com"
RULES = {"CORSRules": [
    {"ID": "app", "AllowedOrigins": ["https://*.example.com"], "AllowedMethods": ["GET", "PUT"],
     "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag", "x-amz-request-id"],
     "MaxAgeSeconds": 300},
    {"AllowedOrigins": ["*"], "AllowedMethods": ["HEAD"]},
]}


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"cors-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def test_configuration_round_trip(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as missing:
        s3.get_bucket_cors(Bucket=bucket)
    assert missing.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration=RULES)
    got = s3.get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert got[0]["AllowedOrigins"] == ["https://*.example.com"] and got[0]["ID"] == "app"
    assert got[0]["MaxAgeSeconds"] == 300 and got[1]["AllowedMethods"] == ["HEAD"]
    with pytest.raises(ClientError) as refused:
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
            {"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}]})
    assert refused.value.response["Error"]["Code"] == "InvalidRequest"
    s3.delete_bucket_cors(Bucket=bucket)
    with pytest.raises(ClientError):
        s3.get_bucket_cors(Bucket=bucket)


def test_preflight_and_actual_responses(daemon: Daemon, s3: Any, bucket: str) -> None:
    url = f"{daemon.endpoint}/{bucket}/photo.jpg"
    preflight = {"Origin": APP, "Access-Control-Request-Method": "PUT",
                 "Access-Control-Request-Headers": "content-type,x-amz-meta-a"}
    before = urllib3.request("OPTIONS", url, headers=preflight)
    assert before.status == 403 and b"<Code>CORSResponse</Code>" in before.data
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration=RULES)
    allowed = urllib3.request("OPTIONS", url, headers=preflight)
    assert allowed.status == 200, allowed.data
    assert allowed.headers["Access-Control-Allow-Origin"] == APP
    assert allowed.headers["Access-Control-Allow-Methods"] == "GET, PUT"
    assert allowed.headers["Access-Control-Allow-Headers"] == "content-type, x-amz-meta-a"
    assert allowed.headers["Access-Control-Max-Age"] == "300"
    other = urllib3.request("OPTIONS", url, headers={**preflight, "Origin": "https://evil.test"})
    assert other.status == 403 and b"<Code>CORSResponse</Code>" in other.data
    assert "Access-Control-Allow-Origin" not in other.headers
    # actual responses: a presigned PUT and GET, and an error, carry the headers
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket,
                                                               "Key": "photo.jpg"})
    put = urllib3.request("PUT", put_url, body=b"jpeg", headers={"Origin": APP})
    assert put.status == 200 and put.headers["Access-Control-Allow-Origin"] == APP
    assert put.headers["Access-Control-Expose-Headers"] == "ETag, x-amz-request-id"
    assert "Origin" in put.headers["Vary"]
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket,
                                                               "Key": "photo.jpg"})
    got = urllib3.request("GET", get_url, headers={"Origin": APP})
    assert got.data == b"jpeg" and got.headers["Access-Control-Allow-Origin"] == APP
    denied = urllib3.request("GET", url, headers={"Origin": APP})  # unsigned: 403
    assert denied.status == 403 and denied.headers["Access-Control-Allow-Origin"] == APP
    missing = urllib3.request("GET", get_url.replace("photo.jpg", "nothing"),
                              headers={"Origin": APP})
    assert missing.status == 403 and missing.headers["Access-Control-Allow-Origin"] == APP
    head = urllib3.request("HEAD", url, headers={"Origin": "https://elsewhere.test"})
    assert head.headers["Access-Control-Allow-Origin"] == "*"
    unmatched = urllib3.request("GET", get_url, headers={"Origin": "https://evil.test"})
    assert unmatched.status == 200 and "Access-Control-Allow-Origin" not in unmatched.headers


def test_preflight_of_a_missing_bucket_is_refused(daemon: Daemon) -> None:
    answer = urllib3.request("OPTIONS", f"{daemon.endpoint}/no-such-bucket-cors/k", headers={
        "Origin": APP, "Access-Control-Request-Method": "GET"})
    assert answer.status == 403 and b"CORSResponse" in answer.data
