"""Hostile bytes against the real daemon, over raw sockets (what no SDK would send) and
boto3: header values that are not UTF-8, numbers written in other digits or thousands of
them, keys with control characters, paths whose percent-encoding is not UTF-8. Every one
answers S3 XML with the right 4xx code (or works, as on AWS), changes nothing when
refused, reaches the audit log, and logs no traceback (the daemon fixture fails the module
on one)."""

from __future__ import annotations

import datetime
import hashlib
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree

import pytest

from objstore.http.sigv4.canonical import (
    aws_uri_path,
    canonical_query_string,
    canonical_request_bytes,
    credential_scope,
    derive_signing_key,
    format_amz_date,
    hmac_sha256,
    string_to_sign,
    trimall,
)
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
AUDIT_WAIT_SECONDS = 15.0


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def code(self) -> str:
        assert self.headers.get("content-type") == "application/xml", self
        return ElementTree.fromstring(self.body).findtext("Code") or ""


def raw_request(daemon: Daemon, method: str, target: bytes, headers: Mapping[str, bytes],
                body: bytes = b"", *, sign: bool = True) -> Reply:
    """Send exactly these bytes (signed over them, as a client that sends such bytes
    would sign them) on a new connection; read the whole answer."""
    sent = {"host": f"127.0.0.1:{daemon.port}".encode(), **headers}
    if sign:
        sent = signed(method, target, sent, body)
    head = method.encode() + b" " + target + b" HTTP/1.1\r\n"
    head += b"".join(name.encode() + b": " + value + b"\r\n" for name, value in sent.items())
    head += b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=30) as conn:
        conn.sendall(head + body)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer, "the connection was closed without an answer"
    status_line, _, rest = answer.partition(b"\r\n")
    raw_headers, _, content = rest.partition(b"\r\n\r\n")
    found = {}
    for line in raw_headers.split(b"\r\n"):
        name, _, value = line.partition(b":")
        found[name.decode().lower()] = value.strip().decode("latin-1")
    return Reply(int(status_line.split()[1]), found, content)


def signed(method: str, target: bytes, headers: dict[str, bytes], body: bytes
           ) -> dict[str, bytes]:
    amz_date = format_amz_date(datetime.datetime.now(datetime.UTC))
    headers = {**headers, "x-amz-date": amz_date.encode()}
    headers.setdefault("x-amz-content-sha256", hashlib.sha256(body).hexdigest().encode())
    path, _, query = target.partition(b"?")
    names = sorted(headers)
    canonical = canonical_request_bytes(
        method, aws_uri_path(path.decode("utf-8", "surrogateescape")).encode(),
        canonical_query_string(query.decode("utf-8", "surrogateescape")),
        [(name, trimall(headers[name])) for name in names],
        headers["x-amz-content-sha256"].decode("latin-1"))
    scope = credential_scope(amz_date[:8], "us-east-1")
    key = derive_signing_key(ROOT_SECRET_KEY, amz_date[:8], "us-east-1", "s3")
    signature = hmac_sha256(key, string_to_sign(amz_date, scope, canonical)).hex()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={ROOT_ACCESS_KEY}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}").encode()
    return headers


@pytest.fixture(scope="module")
def bucket(daemon: Daemon) -> Iterator[str]:
    name = f"hostile-{uuid.uuid4().hex[:10]}"
    s3: Any = make_client(daemon.endpoint)
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="k", Body=b"0123456789")
    yield name


def audit_entries(daemon: Daemon, bucket: str, wanted: int) -> list[dict[str, Any]]:
    admin = AdminClient(daemon.endpoint)
    deadline = time.monotonic() + AUDIT_WAIT_SECONDS
    while True:
        entries: list[dict[str, Any]] = admin.ok(
            "GET", f"/audit?bucket={bucket}&limit=1000")["entries"]
        if len(entries) >= wanted or time.monotonic() > deadline:
            return entries
        time.sleep(0.2)


# -- finding 3: the audit log records every request, whatever its header bytes ----------


def test_requests_with_headers_that_are_not_utf8_are_recorded(daemon: Daemon) -> None:
    name = f"audited-{uuid.uuid4().hex[:10]}"
    assert raw_request(daemon, "PUT", f"/{name}".encode(), {}).status == 200
    got = raw_request(daemon, "GET", f"/{name}?list-type=2".encode(),
                      {"user-agent": b"agent\xff\xfe/1.0"})
    assert got.status == 200  # a header nobody acts on never fails a request
    copy = raw_request(daemon, "PUT", f"/{name}/copy".encode(),
                       {"x-amz-copy-source": f"/{name}/k\xff".encode("latin-1")})
    assert (copy.status, copy.code()) == (400, "InvalidArgument")
    entries = audit_entries(daemon, name, 3)
    by_operation = {entry["operation"]: entry for entry in entries}
    assert by_operation["ListObjectsV2"]["user_agent"] == "agent\\xff\\xfe/1.0"
    assert by_operation["ListObjectsV2"]["status"] == 200
    assert (by_operation["CopyObject"]["status"], by_operation["CopyObject"]["error_code"]) == (
        400, "InvalidArgument")


# -- finding 4: keys with control characters --------------------------------------------


CONTROL_KEYS = ["ctl/a\x01b", "ctl/line\nbreak", "ctl/carriage\rreturn", "ctl/del\x7f",
                "ctl/\x1f\x0b"]


def test_keys_with_control_characters_behave_as_on_aws(daemon: Daemon, bucket: str) -> None:
    s3: Any = make_client(daemon.endpoint)
    for key in CONTROL_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode()
    # The SDKs list with encoding-type=url: plain XML, keys as they are.
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="ctl/")
    assert sorted(c["Key"] for c in listed["Contents"]) == sorted(CONTROL_KEYS)
    v1 = s3.list_objects(Bucket=bucket, Prefix="ctl/")
    assert len(v1["Contents"]) == len(CONTROL_KEYS)
    versions = s3.list_object_versions(Bucket=bucket, Prefix="ctl/")
    assert len(versions["Versions"]) == len(CONTROL_KEYS)
    # Without it, AWS writes what XML 1.0 can not carry as character references.
    for target in (b"?list-type=2&prefix=ctl%2F", b"?prefix=ctl%2F", b"?versions&prefix=ctl",
                   b"?uploads"):
        answer = raw_request(daemon, "GET", f"/{bucket}".encode() + target, {})
        assert answer.status == 200, answer
        if b"uploads" not in target:
            assert b"a&#x1;b" in answer.body and b"&#x1F;&#xB;" in answer.body


def test_missing_key_and_multipart_upload_with_control_characters(daemon: Daemon,
                                                                  bucket: str) -> None:
    missing = raw_request(daemon, "GET", f"/{bucket}/none%01here".encode(), {})
    assert missing.status == 404 and b"<Code>NoSuchKey</Code>" in missing.body
    assert b"<Key>none&#x1;here</Key>" in missing.body
    created = raw_request(daemon, "POST", f"/{bucket}/mpu%01key?uploads".encode(), {})
    assert created.status == 200 and b"<Key>mpu&#x1;key</Key>" in created.body
    s3: Any = make_client(daemon.endpoint)
    # botocore sends encoding-type=url for object listings only: ask for it here.
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix="mpu", EncodingType="url")
    assert [u["Key"] for u in uploads["Uploads"]] == ["mpu%01key"]
    s3.abort_multipart_upload(Bucket=bucket, Key="mpu\x01key",
                              UploadId=uploads["Uploads"][0]["UploadId"])


@pytest.mark.parametrize("key", [b"nl%0Akey", b"cr%0Dkey", b"%0A"])
def test_line_breaks_in_the_path_reach_the_api(daemon: Daemon, bucket: str, key: bytes
                                               ) -> None:
    path = f"/{bucket}/".encode() + key
    assert raw_request(daemon, "PUT", path, {}, b"data").status == 200  # was 500
    got = raw_request(daemon, "GET", path, {})
    assert (got.status, got.body) == (200, b"data")
    assert raw_request(daemon, "DELETE", path, {}).status == 204


# -- finding 7: numbers and bytes --------------------------------------------------------


SUPERSCRIPT_TWO = "%C2%B2"
HUGE = "9" * 5000


@pytest.mark.parametrize("bad", [SUPERSCRIPT_TWO, HUGE, "%D9%A3"])
@pytest.mark.parametrize(("method", "target"), [
    ("GET", "/?max-buckets={}"),
    ("GET", "/{bucket}?max-keys={}"),
    ("GET", "/{bucket}/k?partNumber={}"),
    ("GET", "/{bucket}?uploads&max-uploads={}"),
    ("PUT", "/{bucket}/k?partNumber={}&uploadId=none"),
])
def test_numbers_in_the_query(daemon: Daemon, bucket: str, method: str, target: str,
                              bad: str) -> None:
    answer = raw_request(daemon, method, target.format(bad, bucket=bucket).encode(), {})
    assert (answer.status, answer.code()) == (400, "InvalidArgument")


def test_numbers_of_an_upload(daemon: Daemon, bucket: str) -> None:
    s3: Any = make_client(daemon.endpoint)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="parts")["UploadId"]
    for query in (f"max-parts={SUPERSCRIPT_TWO}", f"part-number-marker={HUGE}"):
        answer = raw_request(daemon, "GET", f"/{bucket}/parts?uploadId={upload}&{query}"
                             .encode(), {})
        assert (answer.status, answer.code()) == (400, "InvalidArgument")
    body = ("<CompleteMultipartUpload><Part><PartNumber>²</PartNumber><ETag>e</ETag></Part>"
            "</CompleteMultipartUpload>").encode()
    answer = raw_request(daemon, "POST", f"/{bucket}/parts?uploadId={upload}".encode(), {},
                         body)
    assert (answer.status, answer.code()) == (400, "MalformedXML")
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix="parts")["Uploads"]  # unchanged
    s3.abort_multipart_upload(Bucket=bucket, Key="parts", UploadId=upload)


@pytest.mark.parametrize(("name", "value"), [
    ("x-amz-max-parts", "²".encode()), ("x-amz-part-number-marker", HUGE.encode())])
def test_numbers_in_attribute_headers(daemon: Daemon, bucket: str, name: str,
                                      value: bytes) -> None:
    answer = raw_request(daemon, "GET", f"/{bucket}/k?attributes".encode(),
                         {"x-amz-object-attributes": b"ObjectParts", name: value})
    assert (answer.status, answer.code()) == (400, "InvalidArgument")


def test_ranges_with_odd_digits(daemon: Daemon, bucket: str) -> None:
    target = f"/{bucket}/k".encode()
    unicode_digits = raw_request(daemon, "GET", target, {"range": "bytes=0-²".encode()})
    assert (unicode_digits.status, unicode_digits.body) == (200, b"0123456789")  # ignored
    past_the_end = raw_request(daemon, "GET", target, {"range": f"bytes=2-{HUGE}".encode()})
    assert (past_the_end.status, past_the_end.body) == (206, b"23456789")
    start_past = raw_request(daemon, "GET", target, {"range": f"bytes={HUGE}-".encode()})
    assert (start_past.status, start_past.code()) == (416, "InvalidRange")
    not_utf8 = raw_request(daemon, "GET", target, {"range": b"bytes=0-\xff"})
    assert (not_utf8.status, not_utf8.code()) == (400, "InvalidArgument")


def test_copy_source_ranges_with_odd_digits(daemon: Daemon, bucket: str) -> None:
    s3: Any = make_client(daemon.endpoint)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="copied")["UploadId"]
    target = f"/{bucket}/copied?partNumber=1&uploadId={upload}".encode()
    for value, code in (("bytes=0-²", "InvalidArgument"), (f"bytes=0-{HUGE}", "InvalidRange")):
        answer = raw_request(daemon, "PUT", target, {
            "x-amz-copy-source": f"/{bucket}/k".encode(),
            "x-amz-copy-source-range": value.encode()})
        assert answer.code() == code
    assert s3.list_parts(Bucket=bucket, Key="copied", UploadId=upload).get("Parts", []) == []
    s3.abort_multipart_upload(Bucket=bucket, Key="copied", UploadId=upload)


def test_metadata_that_is_not_utf8_is_refused_and_nothing_stored(daemon: Daemon,
                                                                 bucket: str) -> None:
    answer = raw_request(daemon, "PUT", f"/{bucket}/meta".encode(),
                         {"x-amz-meta-name": b"caf\xe9"}, b"data")
    assert (answer.status, answer.code()) == (400, "InvalidArgument")
    document = ElementTree.fromstring(answer.body)  # the echoed value, escaped
    assert document.findtext("ArgumentValue") == "caf\\xe9"
    missing = raw_request(daemon, "HEAD", f"/{bucket}/meta".encode(), {})
    assert missing.status == 404


@pytest.mark.parametrize("name", ["x-amz-decoded-content-length", "x-amz-content-sha256",
                                  "x-amz-trailer"])
def test_unauthenticated_body_headers_get_an_answer(daemon: Daemon, bucket: str,
                                                    name: str) -> None:
    # These dropped the connection with a traceback in the daemon's log.
    answer = raw_request(daemon, "PUT", f"/{bucket}/body".encode(), {name: b"\xff"}, b"data",
                         sign=False)
    assert (answer.status, answer.code()) == (400, "InvalidArgument")


def test_presigned_expiry_of_five_thousand_digits(daemon: Daemon, bucket: str) -> None:
    scope = quote(f"{ROOT_ACCESS_KEY}/20240101/us-east-1/s3/aws4_request", safe="")
    target = (f"/{bucket}/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={scope}"
              f"&X-Amz-Date=20240101T000000Z&X-Amz-Expires={HUGE}&X-Amz-SignedHeaders=host"
              f"&X-Amz-Signature={'a' * 64}")
    answer = raw_request(daemon, "GET", target.encode(), {}, sign=False)
    assert (answer.status, answer.code()) == (400, "AuthorizationQueryParametersError")


@pytest.mark.parametrize("path", [b"/{bucket}/k%FF", b"/{bucket}%FF/k", b"/{bucket}?prefix=%FF"])
def test_percent_encoding_that_is_not_utf8(daemon: Daemon, bucket: str, path: bytes) -> None:
    answer = raw_request(daemon, "GET", path.replace(b"{bucket}", bucket.encode()), {})
    assert (answer.status, answer.code()) == (400, "InvalidURI")  # was text/plain


# -- issue 26, section 4: JSON bodies of the admin API --------------------------------------


NESTED = b"[" * 100_000


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/users"), ("POST", "/grants"), ("POST", "/presign"), ("POST", "/archive"),
    ("POST", "/teams"), ("POST", "/credentials"), ("PUT", "/settings/region"),
    ("PUT", "/buckets/{bucket}/quota"), ("POST", "/import"),
])
@pytest.mark.parametrize("body", [NESTED, b'{"a":' * 100_000, b'{"max_bytes": 1' + b"0" * 30
                                  + b"}", b'{"username": NaN}'],
                         ids=["nested-arrays", "nested-objects", "int-past-64-bit", "nan"])
def test_hostile_json_bodies_of_the_admin_api_are_refused(
        daemon: Daemon, bucket: str, method: str, path: str, body: bytes) -> None:
    """Each was a 500 with a RecursionError (or OverflowError) traceback per request."""
    admin = AdminClient(daemon.endpoint)
    answer = admin.call(method, path.replace("{bucket}", bucket), raw=body)
    assert (answer.status, answer.error) == (400, "BadRequest"), answer.body
    assert "not valid JSON" in answer.json["message"]
    daemon.assert_no_tracebacks()


def test_a_refused_json_body_changes_nothing(daemon: Daemon, bucket: str) -> None:
    admin = AdminClient(daemon.endpoint)
    users = admin.ok("GET", "/users")
    answer = admin.call("POST", "/users", raw=b'{"username": "deep", "x": ' + NESTED + b"}")
    assert (answer.status, answer.error) == (400, "BadRequest")
    assert "nested deeper than" in answer.json["message"]
    assert admin.ok("GET", "/users") == users
    quota = admin.call("PUT", f"/buckets/{bucket}/quota", raw=b'{"max_bytes": %d}' % 2 ** 63)
    assert (quota.status, quota.error) == (400, "BadRequest")
    assert "signed 64-bit" in quota.json["message"]
    # The same endpoints still take a sane body.
    created = admin.ok("POST", "/users", {"username": f"sane-{uuid.uuid4().hex[:8]}"},
                       status=201)
    assert created["username"].startswith("sane-")
    daemon.assert_no_tracebacks()
