"""Form uploads' pure parts: the streaming multipart/form-data decoder
(objstore/http/form_data.py) whatever the chunking, and the POST policy
(objstore/http/post_policy.py): signatures, conditions, and any policy document a 4xx
S3 error or a policy, never another exception."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.errors import S3Error
from objstore.http import post_policy
from objstore.http.form_data import FormDecoder, boundary_of
from objstore.http.sigv4 import SigV4Error

BOUNDARY = b"----b0undary"


def form(*parts: tuple[str, bytes, str | None], boundary: bytes = BOUNDARY) -> bytes:
    out = b""
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        out += b"--" + boundary + b"\r\nContent-Disposition: " + disposition.encode()
        out += b"\r\n\r\n" + value + b"\r\n"
    return out + b"--" + boundary + b"--\r\n"


def decode(body: bytes, chunk: int) -> tuple[FormDecoder, bytes]:
    decoder = FormDecoder(BOUNDARY)
    out = b"".join(decoder.feed(body[i:i + chunk]) for i in range(0, len(body), chunk))
    decoder.finish()
    return decoder, out


FILE = b"line one\r\n--not the boundary\r\n" + bytes(range(256)) * 4


@pytest.mark.parametrize("chunk", [1, 2, 7, 13, 64, 100000])
def test_any_chunking_gives_the_same_fields_and_file(chunk: int) -> None:
    body = form(("key", b"a/${filename}", None), ("Content-Type", b"text/plain", None),
                ("file", FILE, "C:\\docs\\report.txt"), ("late", b"ignored", None))
    decoder, content = decode(body, chunk)
    assert content == FILE and decoder.file_length == len(FILE)
    assert decoder.fields == {"key": "a/${filename}", "content-type": "text/plain"}
    assert decoder.filename == "report.txt"


@pytest.mark.parametrize("body,code", [
    (form(("key", b"k", None)), "IncorrectNumberOfFilesInPostRequest"),
    (form(("file", b"1", "a"), ("file", b"2", "b")), "IncorrectNumberOfFilesInPostRequest"),
    (form(("key", b"k", None), ("file", b"x", "f"))[:-10], "MalformedPOSTRequest"),
    (form(("big", b"x" * 30000, None), ("file", b"x", "f")),
     "MaxPostPreDataLengthExceededError"),
    (b"--" + BOUNDARY + b"\r\nno colon here\r\n\r\nx\r\n--" + BOUNDARY + b"--",
     "MalformedPOSTRequest"),
    (b"--" + BOUNDARY + b"\r\n" + b"X: y\r\n" * 2000, "MalformedPOSTRequest"),
])
def test_refusals(body: bytes, code: str) -> None:
    with pytest.raises(SigV4Error) as refused:
        decode(body, 1000)
    assert refused.value.code == code


def test_boundary_of() -> None:
    assert boundary_of('multipart/form-data; boundary="abc"') == b"abc"
    assert boundary_of("multipart/form-data; boundary=abc") == b"abc"
    assert boundary_of("multipart/form-data") is None
    assert boundary_of("application/json; boundary=abc") is None
    assert boundary_of(None) is None


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 50))
def test_any_body_is_a_form_or_a_refusal(body: bytes, chunk: int) -> None:
    try:
        decode(body, chunk)
    except SigV4Error as refused:
        assert refused.code in {"MalformedPOSTRequest", "IncorrectNumberOfFilesInPostRequest",
                                "MaxPostPreDataLengthExceededError"}


# -- the policy -----------------------------------------------------------------------
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def policy_b64(conditions: list[object], expiration: str = "2026-01-02T00:00:00.000Z") -> str:
    return base64.b64encode(json.dumps({"expiration": expiration,
                                        "conditions": conditions}).encode()).decode()


def signed_fields(policy: str, secret: str = "s3cr3t") -> dict[str, str]:
    fields = {"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-date": "20260101T000000Z",
              "x-amz-credential": "AKID/20260101/us-east-1/s3/aws4_request",
              "policy": policy, "x-amz-signature": "0" * 64}
    auth = post_policy.parse_form_auth(fields)
    assert auth is not None
    fields["x-amz-signature"] = post_policy.form_signature(auth, secret)
    return fields


def test_signature_v4_and_v2() -> None:
    fields = signed_fields(policy_b64([]))
    auth = post_policy.parse_form_auth(fields)
    assert auth is not None and auth.access_key == "AKID"
    post_policy.check_form_scope(auth, {"us-east-1"})
    post_policy.verify_form_signature(auth, "s3cr3t")
    with pytest.raises(S3Error) as wrong:
        post_policy.verify_form_signature(auth, "other")
    assert wrong.value.code == "SignatureDoesNotMatch"
    with pytest.raises(S3Error):
        post_policy.check_form_scope(auth, {"eu-west-1"})
    v2 = post_policy.FormAuth(post_policy.SIGV2, "AKID", policy_b64([]))
    v2_fields = {"awsaccesskeyid": "AKID", "policy": v2.policy_b64,
                 "signature": post_policy.form_signature(v2, "s3cr3t")}
    parsed = post_policy.parse_form_auth(v2_fields)
    assert parsed is not None
    post_policy.verify_form_signature(parsed, "s3cr3t")
    assert post_policy.parse_form_auth({"key": "k"}) is None
    with pytest.raises(S3Error) as missing:
        post_policy.parse_form_auth({"x-amz-algorithm": "AWS4-HMAC-SHA256"})
    assert missing.value.code == "InvalidArgument"


def check(conditions: list[object], fields: dict[str, str], length: int = 5) -> None:
    policy = post_policy.parse_policy(policy_b64(conditions))
    post_policy.check_policy(policy, fields, "bkt", length, NOW)


def test_conditions() -> None:
    check([{"key": "k"}, {"bucket": "bkt"}, ["starts-with", "$Content-Type", "image/"],
           ["eq", "$x-amz-meta-a", "1"], ["content-length-range", 1, 10]],
          {"key": "k", "content-type": "image/png,image/jpeg", "x-amz-meta-a": "1",
           "x-ignore-me": "1", "file": ""})
    for conditions, fields, code in [
        ([{"key": "k"}], {"key": "other"}, "AccessDenied"),
        ([{"bucket": "nope"}], {}, "AccessDenied"),
        ([["starts-with", "$key", "up/"]], {"key": "down/x"}, "AccessDenied"),
        ([["eq", "$key", "k"]], {}, "AccessDenied"),
        ([], {"key": "k"}, "AccessDenied"),  # an extra field
        ([["content-length-range", 6, 10]], {}, "EntityTooSmall"),
        ([["content-length-range", 0, 4]], {}, "EntityTooLarge"),
    ]:
        with pytest.raises(S3Error) as refused:
            check(conditions, fields)
        assert refused.value.code == code, conditions
    expired = post_policy.parse_policy(policy_b64([], "2025-12-31T00:00:00Z"))
    with pytest.raises(S3Error) as late:
        post_policy.check_policy(expired, {}, "bkt", 0, NOW)
    assert "expired" in late.value.message


@pytest.mark.parametrize("document", [
    b"not base64!", base64.b64encode(b"{"), base64.b64encode(b"[]"),
    base64.b64encode(b'{"conditions": []}'),
    base64.b64encode(b'{"expiration": "soon", "conditions": []}'),
    base64.b64encode(b'{"expiration": "2026-01-01T00:00:00Z"}'),
    base64.b64encode(b'{"expiration": "2026-01-01T00:00:00Z", "conditions": [["le", 1, 2]]}'),
    base64.b64encode(b'{"expiration": "2026-01-01T00:00:00Z", "conditions": [{"a": 1}]}'),
    base64.b64encode(b'{"expiration": "2026-01-01T00:00:00Z", '
                     b'"conditions": [["content-length-range", "1", 2]]}'),
])
def test_unreadable_policies(document: bytes) -> None:
    with pytest.raises(S3Error) as refused:
        post_policy.parse_policy(document.decode("latin-1"))
    assert refused.value.code == "InvalidPolicyDocument"


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)


@settings(max_examples=80, deadline=None)
@given(st.one_of(_JSON, st.fixed_dictionaries({
    "expiration": st.sampled_from(["2026-01-02T00:00:00Z", "x", 5]),
    "conditions": st.lists(st.one_of(
        _JSON, st.lists(st.sampled_from(["eq", "starts-with", "content-length-range", "$key",
                                         "k", 1, -1, "$bucket"]), min_size=3, max_size=3)),
        max_size=4)})),
       st.dictionaries(st.sampled_from(["key", "content-type", "x-amz-meta-a", "acl"]),
                       st.text(max_size=8), max_size=3), st.integers(0, 20))
def test_any_policy_is_a_4xx_or_a_verdict(document: object, fields: dict[str, str],
                                          length: int) -> None:
    try:
        policy = post_policy.parse_policy(base64.b64encode(json.dumps(document).encode())
                                          .decode())
        post_policy.check_policy(policy, fields, "bkt", length, NOW)
    except S3Error as refused:
        assert refused.status < 500
