"""Browser form uploads (POST Object) with boto3's generate_presigned_post posted by
`requests` as multipart/form-data: every condition of the POST policy enforced, the
success_action_* answers, and hostile forms answered 4xx with nothing stored."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any
from xml.etree import ElementTree

import boto3
import pytest
import requests
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from objstore.http import post_policy
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"post-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def code_of(answer: requests.Response) -> str:
    return ElementTree.fromstring(answer.content).findtext("Code") or ""


def post(presigned: dict[str, Any], content: bytes = b"form bytes", filename: str = "a.txt",
         extra: dict[str, str] | None = None) -> requests.Response:
    fields = {**presigned["fields"], **(extra or {})}
    return requests.post(presigned["url"], data=fields,
                         files={"file": (filename, content)}, timeout=30)


def test_presigned_post_round_trip(s3: Any, bucket: str) -> None:
    presigned = s3.generate_presigned_post(
        bucket, "uploads/${filename}",
        Fields={"Content-Type": "text/plain", "x-amz-meta-colour": "blue",
                "success_action_status": "201"},
        Conditions=[{"Content-Type": "text/plain"}, {"x-amz-meta-colour": "blue"},
                    {"success_action_status": "201"}, ["starts-with", "$key", "uploads/"],
                    ["content-length-range", 1, 1024]],
        ExpiresIn=300)
    answer = post(presigned, b"hello form", "report.txt")
    assert answer.status_code == 201, answer.text
    document = ElementTree.fromstring(answer.content)
    assert document.findtext("{*}Key") == "uploads/report.txt"
    assert document.findtext("{*}Bucket") == bucket
    got = s3.get_object(Bucket=bucket, Key="uploads/report.txt")
    assert got["Body"].read() == b"hello form"
    assert got["ContentType"] == "text/plain" and got["Metadata"] == {"colour": "blue"}
    assert got["ETag"] == answer.headers["ETag"]


def test_conditions_are_enforced(s3: Any, bucket: str) -> None:
    presigned = s3.generate_presigned_post(
        bucket, "k", Fields={"Content-Type": "image/png"},
        Conditions=[["starts-with", "$Content-Type", "image/"],
                    ["content-length-range", 2, 10]], ExpiresIn=300)
    assert post(presigned, b"ok").status_code == 204
    too_big = post(presigned, b"x" * 11)
    assert (too_big.status_code, code_of(too_big)) == (400, "EntityTooLarge")
    too_small = post(presigned, b"x")
    assert (too_small.status_code, code_of(too_small)) == (400, "EntityTooSmall")
    wrong_type = post(presigned, extra={"Content-Type": "text/html"})
    assert (wrong_type.status_code, code_of(wrong_type)) == (403, "AccessDenied")
    assert "Invalid according to Policy" in wrong_type.text
    extra = post(presigned, extra={"x-amz-meta-sneaky": "1"})
    assert code_of(extra) == "AccessDenied" and "Extra input fields" in extra.text
    other_key = post(presigned, extra={"key": "elsewhere"})
    assert code_of(other_key) == "AccessDenied"
    tampered = dict(presigned, fields={**presigned["fields"],
                                       "x-amz-signature": "0" * 64})
    assert code_of(post(tampered)) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="elsewhere")


def test_expired_policy_and_redirect(s3: Any, bucket: str) -> None:
    expired = s3.generate_presigned_post(bucket, "late", ExpiresIn=-10)
    answer = post(expired)
    assert code_of(answer) == "AccessDenied" and "Policy expired" in answer.text
    redirect = s3.generate_presigned_post(
        bucket, "r", Fields={"success_action_redirect": "https://app.example.com/done?x=1"},
        Conditions=[{"success_action_redirect": "https://app.example.com/done?x=1"}])
    answer = requests.post(redirect["url"], data=redirect["fields"],
                           files={"file": ("r", b"r")}, allow_redirects=False, timeout=30)
    assert answer.status_code == 303
    assert answer.headers["Location"].startswith("https://app.example.com/done?x=1&bucket=")


def test_sigv2_post_policy(daemon: Daemon, bucket: str, s3: Any) -> None:
    v2 = boto3.client("s3", endpoint_url=daemon.endpoint, aws_access_key_id=ROOT_ACCESS_KEY,
                      aws_secret_access_key=ROOT_SECRET_KEY, region_name="us-east-1",
                      config=BotoConfig(signature_version="s3"))
    presigned = v2.generate_presigned_post(bucket, "v2-form")
    assert "AWSAccessKeyId" in presigned["fields"]
    assert post(presigned, b"v2").status_code == 204
    assert s3.get_object(Bucket=bucket, Key="v2-form")["Body"].read() == b"v2"


def test_hostile_forms_are_4xx(daemon: Daemon, s3: Any, bucket: str) -> None:
    url = f"{daemon.endpoint}/{bucket}"
    presigned = s3.generate_presigned_post(bucket, "h", ExpiresIn=300)
    garbage = base64.b64encode(b"[1,2").decode()
    claims = post_policy.parse_form_auth({**presigned["fields"], "policy": garbage})
    assert claims is not None
    signed_garbage = {**presigned["fields"], "policy": garbage,
                      "x-amz-signature": post_policy.form_signature(claims, ROOT_SECRET_KEY)}
    cases: list[tuple[Any, ...]] = [
        # not multipart
        ({"data": b"key=h", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
         "RequestIsNotMultiPartContent"),
        # no file
        ({"files": {k: (None, v) for k, v in presigned["fields"].items()}},
         "IncorrectNumberOfFilesInPostRequest"),
        # unsigned
        ({"files": {"key": (None, "h"), "file": ("f", b"x")}}, "AccessDenied"),
        # fields too large before the file
        ({"files": {"key": (None, "h"), "junk": (None, "x" * 30000), "file": ("f", b"x")}},
         "MaxPostPreDataLengthExceededError"),
        # truncated body
        ({"data": b"--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nh",
          "headers": {"Content-Type": "multipart/form-data; boundary=b"}},
         "MalformedPOSTRequest"),
        # garbage policy
        ({"files": {**{k: (None, v) for k, v in signed_garbage.items()}, "file": ("f", b"x")}},
         "InvalidPolicyDocument"),
    ]
    for kwargs, code in cases:
        answer = requests.post(url, timeout=30, **kwargs)
        assert 400 <= answer.status_code < 500 and code_of(answer) == code, (code, answer.text)
    # a field after the file is ignored, as AWS does (not part of the policy check)
    fields = list(presigned["fields"].items())
    body_parts = [*((k, (None, v)) for k, v in fields), ("file", ("f", b"data")),
                  ("x-amz-meta-late", (None, "1"))]
    answer = requests.post(url, files=body_parts, timeout=30)
    assert answer.status_code == 204, answer.text
    assert s3.head_object(Bucket=bucket, Key="h")["Metadata"] == {}
    policy = json.loads(base64.b64decode(presigned["fields"]["policy"]))
    assert policy["conditions"]


def test_encryption_fields_are_refused_not_ignored(s3: Any, bucket: str) -> None:
    presigned = s3.generate_presigned_post(
        bucket, "secret", Fields={"x-amz-server-side-encryption": "AES256"},
        Conditions=[{"x-amz-server-side-encryption": "AES256"}])
    answer = post(presigned)
    assert (answer.status_code, code_of(answer)) == (501, "NotImplemented")
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="secret")
