"""Every SigV4 refusal path against the real daemon, with nothing stored after a refusal."""

from __future__ import annotations

import datetime
import gzip
import hashlib
import uuid
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from objstore.http import sigv4
from tests.integration.conftest import make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon


def code_of(excinfo: pytest.ExceptionInfo[ClientError]) -> str:
    return str(excinfo.value.response["Error"]["Code"])


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"auth-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def assert_not_stored(s3: Any, bucket: str, key: str) -> None:
    with pytest.raises(ClientError) as caught:
        s3.head_object(Bucket=bucket, Key=key)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_wrong_secret(daemon: Daemon, s3: Any, bucket: str) -> None:
    bad = make_client(daemon.endpoint, secret_key="wrong-secret")
    with pytest.raises(ClientError) as caught:
        bad.put_object(Bucket=bucket, Key="k", Body=b"x")  # type: ignore[attr-defined]
    assert code_of(caught) == "SignatureDoesNotMatch"
    assert_not_stored(s3, bucket, "k")


def test_unknown_key(daemon: Daemon, s3: Any, bucket: str) -> None:
    bad = make_client(daemon.endpoint, access_key="NOSUCHKEY000000000000")
    with pytest.raises(ClientError) as caught:
        bad.put_object(Bucket=bucket, Key="k", Body=b"x")  # type: ignore[attr-defined]
    assert code_of(caught) == "InvalidAccessKeyId"
    assert_not_stored(s3, bucket, "k")


def test_presigned_get_works_and_expires(daemon: Daemon, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="p", Body=b"presigned")
    http = urllib3.PoolManager()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"},
                                    ExpiresIn=60)
    assert http.request("GET", url).data == b"presigned"
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2)
    old_url = sigv4.presign_url("GET", f"{daemon.endpoint}/{bucket}/p", ROOT_ACCESS_KEY,
                                ROOT_SECRET_KEY, "us-east-1", past, 60)
    response = http.request("GET", old_url)
    assert response.status == 403 and b"<Code>AccessDenied</Code>" in response.data


def test_skewed_date(daemon: Daemon, s3: Any, bucket: str) -> None:
    skewed = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=20)
    url = f"{daemon.endpoint}/{bucket}/k"
    headers = sigv4.sign_headers("PUT", url, {}, hashlib.sha256(b"x").hexdigest(),
                                 ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1", skewed)
    response = urllib3.PoolManager().request("PUT", url, body=b"x", headers=headers)
    assert response.status == 403 and b"RequestTimeTooSkewed" in response.data
    assert_not_stored(s3, bucket, "k")


def test_wrong_payload_hash(daemon: Daemon, s3: Any, bucket: str) -> None:
    url = f"{daemon.endpoint}/{bucket}/k"
    now = datetime.datetime.now(datetime.UTC)
    headers = sigv4.sign_headers("PUT", url, {}, hashlib.sha256(b"claimed").hexdigest(),
                                 ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1", now)
    response = urllib3.PoolManager().request("PUT", url, body=b"actual", headers=headers)
    assert response.status == 400 and b"XAmzContentSHA256Mismatch" in response.data
    assert_not_stored(s3, bucket, "k")


def _signed_chunked_body(url: str, payload: bytes, tamper: bool,
                         encoding: str = "aws-chunked") -> tuple[dict[str, str], bytes]:
    """A STREAMING-AWS4-HMAC-SHA256-PAYLOAD request built by hand, chunk by chunk."""
    now = datetime.datetime.now(datetime.UTC)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {
        "x-amz-decoded-content-length": str(len(payload)),
        "content-encoding": encoding,
    }
    signed = sigv4.sign_headers("PUT", url, headers, sigv4.STREAMING_SIGNED, ROOT_ACCESS_KEY,
                                ROOT_SECRET_KEY, "us-east-1", now)
    headers.update(signed)
    seed = headers["Authorization"].rsplit("Signature=", 1)[1]
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    key = sigv4.derive_signing_key(ROOT_SECRET_KEY, amz_date[:8], "us-east-1", "s3")
    import hmac

    previous = seed
    body = b""
    chunks = [payload[i : i + 65536] for i in range(0, len(payload), 65536)] + [b""]
    for index, chunk in enumerate(chunks):
        to_sign = "\n".join([
            "AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous,
            hashlib.sha256(b"").hexdigest(), hashlib.sha256(chunk).hexdigest(),
        ])
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        previous = signature
        data = chunk
        if tamper and index == 1:
            data = b"X" + chunk[1:]
        body += f"{len(chunk):x};chunk-signature={signature}\r\n".encode() + data + b"\r\n"
    headers["Content-Length"] = str(len(body))
    return headers, body


@pytest.mark.parametrize("tamper", [False, True])
def test_streaming_chunk_signatures(daemon: Daemon, s3: Any, bucket: str, tamper: bool) -> None:
    url = f"{daemon.endpoint}/{bucket}/chunked"
    payload = bytes(range(256)) * 600
    headers, body = _signed_chunked_body(url, payload, tamper)
    response = urllib3.PoolManager().request("PUT", url, body=body, headers=headers)
    if tamper:
        assert response.status == 403 and b"SignatureDoesNotMatch" in response.data
        assert_not_stored(s3, bucket, "chunked")
    else:
        assert response.status == 200, response.data
        stored = s3.get_object(Bucket=bucket, Key="chunked")
        assert stored["Body"].read() == payload
        # aws-chunked is the transfer framing, not the object's encoding (as on AWS)
        assert "ContentEncoding" not in stored


def test_streaming_upload_keeps_the_clients_own_encoding(daemon: Daemon, s3: Any,
                                                         bucket: str) -> None:
    url = f"{daemon.endpoint}/{bucket}/gzipped"
    payload = gzip.compress(b"text " * 1000)
    headers, body = _signed_chunked_body(url, payload, False, encoding="gzip,aws-chunked")
    response = urllib3.PoolManager().request("PUT", url, body=body, headers=headers)
    assert response.status == 200, response.data
    assert s3.head_object(Bucket=bucket, Key="gzipped")["ContentEncoding"] == "gzip"


def test_anonymous_is_refused(daemon: Daemon, bucket: str) -> None:
    response = urllib3.PoolManager().request("GET", f"{daemon.endpoint}/{bucket}")
    assert response.status == 403 and b"AccessDenied" in response.data


def test_admin_info_needs_a_signature(daemon: Daemon) -> None:
    http = urllib3.PoolManager()
    assert http.request("GET", daemon.endpoint + "/admin/info").status == 403
    url = daemon.endpoint + "/admin/info"
    headers = sigv4.sign_headers("GET", url, {}, hashlib.sha256(b"").hexdigest(),
                                 ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1",
                                 datetime.datetime.now(datetime.UTC))
    info = http.request("GET", url, headers=headers)
    assert info.status == 200
    assert info.json()["metadata_backend"] == daemon.backend


