"""Hostile and generic clients at the door of the real daemon (raw sockets, urllib3,
botocore's plain SigV4 signer): a request is authenticated and authorized from its headers
before any byte of its body is read (no `100 Continue`, nothing spooled, the connection
closed); an oversized, trickled or idle request head is answered with S3 XML or closed on
time; an XML body can not hide a DTD in another encoding; the admin API accepts generic
SigV4 signers and names its authentication failures."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import botocore.auth
import pytest
import urllib3
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from objstore.http import sigv4
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

HEADER_TIMEOUT_SECONDS = 1
IDLE_TIMEOUT_SECONDS = 2
GIB = 1024**3
REGION = "us-east-1"


@dataclass
class LimitedDaemon(Daemon):
    """A daemon with short header and idle timeouts."""

    def write_config(self) -> None:
        super().write_config()
        text = self.config_path.read_text()
        self.config_path.write_text(text.replace(
            "[storage]\n",
            f"header_timeout_seconds = {HEADER_TIMEOUT_SECONDS}\n"
            f"idle_timeout_seconds = {IDLE_TIMEOUT_SECONDS}\n[storage]\n", 1))


@pytest.fixture(scope="module", params=BACKENDS)
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    node = LimitedDaemon(tmp_path_factory.mktemp(f"node-{request.param}"),
                         backend=request.param)
    with running_daemon(request, node) as running:
        yield running


@pytest.fixture(scope="module")
def bucket(daemon: Daemon) -> str:
    name = f"limits-{uuid.uuid4().hex[:12]}"
    make_client(daemon.endpoint).create_bucket(Bucket=name)  # type: ignore[attr-defined]
    return name


# -- raw HTTP ------------------------------------------------------------------------------


def connect(daemon: Daemon) -> socket.socket:
    return socket.create_connection(("127.0.0.1", daemon.port), timeout=10)


def read_until_closed(sock: socket.socket, deadline_seconds: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (or the deadline)."""
    sock.settimeout(0.2)
    received = b""
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the connection stayed open; received {received[:300]!r}")


def head(method: str, target: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def signed(daemon: Daemon, method: str, path: str, headers: dict[str, str], *,
           secret: str = ROOT_SECRET_KEY, access_key: str = ROOT_ACCESS_KEY,
           payload: str = sigv4.UNSIGNED_PAYLOAD) -> dict[str, str]:
    headers = {"host": f"127.0.0.1:{daemon.port}", **headers}
    headers.update(sigv4.sign_headers(method, daemon.endpoint + path, headers, payload,
                                      access_key, secret, REGION,
                                      datetime.datetime.now(datetime.UTC)))
    return headers


def refused_before_body(daemon: Daemon, method: str, target: str, headers: dict[str, str]
                        ) -> bytes:
    """Send only the head of a 1 GiB upload that asks for 100 Continue; the whole answer."""
    sent = {"content-length": str(GIB), "expect": "100-continue"}
    sent.update((name.lower(), value) for name, value in headers.items())
    with connect(daemon) as sock:
        sock.sendall(head(method, target, sent))
        answer = read_until_closed(sock)
    assert b"100 Continue" not in answer, answer[:300]
    assert b"\r\nConnection: close\r\n" in answer
    return answer


def spooled(daemon: Daemon) -> list[Path]:
    return [p for p in (daemon.data_dir / "tmp").rglob("*") if p.is_file()]


# -- finding: bodies are accepted only after authentication --------------------------------


def test_unsigned_upload_is_refused_before_its_body(daemon: Daemon, bucket: str) -> None:
    answer = refused_before_body(daemon, "PUT", f"/{bucket}/big",
                                 {"Host": f"127.0.0.1:{daemon.port}"})
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert b"<Code>AccessDenied</Code>" in answer
    assert spooled(daemon) == []


def test_badly_signed_upload_is_refused_before_its_body(daemon: Daemon, bucket: str) -> None:
    path = f"/{bucket}/big"
    headers = signed(daemon, "PUT", path, {"content-length": str(GIB)}, secret="not-the-secret")
    answer = refused_before_body(daemon, "PUT", path, headers)
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert b"<Code>SignatureDoesNotMatch</Code>" in answer
    assert spooled(daemon) == []


def test_presigned_upload_with_a_bad_signature_is_refused_before_its_body(
        daemon: Daemon, bucket: str) -> None:
    url = make_client(daemon.endpoint).generate_presigned_url(  # type: ignore[attr-defined]
        "put_object", Params={"Bucket": bucket, "Key": "big"}, ExpiresIn=300)
    parts = urlsplit(url)
    query = parts.query.replace("X-Amz-Signature=", "X-Amz-Signature=0", 1)[:-1]
    answer = refused_before_body(daemon, "PUT", f"{parts.path}?{query}",
                                 {"Host": parts.netloc})
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert b"<Code>SignatureDoesNotMatch</Code>" in answer


def test_upload_the_caller_may_not_make_is_refused_before_its_body(
        daemon: Daemon, bucket: str) -> None:
    admin = AdminClient(daemon.endpoint)
    user = admin.ok("POST", "/users", {"username": f"u-{uuid.uuid4().hex[:8]}"}, 201)
    key = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    path = f"/{bucket}/big"
    headers = signed(daemon, "PUT", path, {"content-length": str(GIB)},
                     access_key=key["access_key_id"], secret=key["secret_access_key"])
    answer = refused_before_body(daemon, "PUT", path, headers)
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert b"<Code>AccessDenied</Code>" in answer


def test_admitted_upload_is_invited_then_stored(daemon: Daemon, bucket: str) -> None:
    path = f"/{bucket}/invited"
    body = b"x" * 100_000
    headers = signed(daemon, "PUT", path, {"content-length": str(len(body)),
                                           "expect": "100-continue"})
    with connect(daemon) as sock:
        sock.sendall(head("PUT", path, headers))
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
    got = make_client(daemon.endpoint).get_object(  # type: ignore[attr-defined]
        Bucket=bucket, Key="invited")
    assert got["Body"].read() == body


def test_first_upload_of_a_new_credential_is_invited_once_admitted(daemon: Daemon,
                                                                     bucket: str) -> None:
    """The credential and its policy are not cached yet: the admission waits for the
    database, reading nothing meanwhile, then invites the body."""
    admin = AdminClient(daemon.endpoint)
    user = admin.ok("POST", "/users", {"username": f"u-{uuid.uuid4().hex[:8]}"}, 201)
    grant = admin.ok("POST", "/grants", {"name": f"g-{uuid.uuid4().hex[:8]}", "document": {
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:PutObject"],
                                                "Resource": [f"arn:aws:s3:::{bucket}/*"]}]}},
                     201)
    admin.ok("PUT", f"/users/{user['user_id']}/grants/{grant['grant_id']}", None, 204)
    key = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    path, body = f"/{bucket}/fresh", b"y" * 5000
    headers = signed(daemon, "PUT", path, {"content-length": str(len(body)),
                                           "expect": "100-continue"},
                     access_key=key["access_key_id"], secret=key["secret_access_key"])
    with connect(daemon) as sock:
        sock.sendall(head("PUT", path, headers))
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")


def test_unsigned_admin_upload_is_refused_before_its_body(daemon: Daemon) -> None:
    answer = refused_before_body(daemon, "POST", "/admin/import",
                                 {"Host": f"127.0.0.1:{daemon.port}"})
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert b"Content-Type: application/json\r\n" in answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == "AccessDenied"


def test_admin_upload_the_caller_may_not_make_is_refused_before_its_body(daemon: Daemon
                                                                         ) -> None:
    admin = AdminClient(daemon.endpoint)
    user = admin.ok("POST", "/users", {"username": f"u-{uuid.uuid4().hex[:8]}"}, 201)
    key = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    headers = signed(daemon, "POST", "/admin/import", {"content-length": str(GIB)},
                     access_key=key["access_key_id"], secret=key["secret_access_key"])
    answer = refused_before_body(daemon, "POST", "/admin/import", headers)
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == "AccessDenied"


def test_admin_upload_to_no_endpoint_is_refused_before_its_body(daemon: Daemon) -> None:
    answer = refused_before_body(daemon, "POST", "/admin/no-such-thing",
                                 {"Host": f"127.0.0.1:{daemon.port}"})
    assert answer.startswith(b"HTTP/1.1 404 ")


# -- finding: slow or oversized request heads ----------------------------------------------


def assert_xml_400(answer: bytes, code: str) -> None:
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer[:300]
    assert b"Content-Type: application/xml\r\n" in answer
    assert f"<Code>{code}</Code>".encode() in answer


def test_request_line_over_16_kib_is_answered(daemon: Daemon) -> None:
    with connect(daemon) as sock:
        sock.sendall(b"GET /b/" + b"k" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_xml_400(read_until_closed(sock), "RequestHeaderSectionTooLarge")


def test_header_block_over_16_kib_is_answered(daemon: Daemon) -> None:
    headers = {f"x-amz-meta-h{n}": "v" * 1000 for n in range(20)}
    with connect(daemon) as sock:
        sock.sendall(head("GET", "/b/k", {"Host": "x", **headers}))
        assert_xml_400(read_until_closed(sock), "RequestHeaderSectionTooLarge")


def test_trickled_headers_get_request_timeout(daemon: Daemon) -> None:
    started = time.monotonic()
    answer = b""
    with connect(daemon) as sock:
        sock.sendall(b"GET /b/k HTTP/1.1\r\n")
        sock.settimeout(0.25)
        for n in range(40):  # a header line every quarter second, for up to ten seconds
            try:
                sock.sendall(b"x-h%d: v\r\n" % n)
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if answer:
                break
    assert_xml_400(answer, "RequestTimeout")
    assert time.monotonic() - started < HEADER_TIMEOUT_SECONDS + 3


def test_idle_connection_is_closed(daemon: Daemon) -> None:
    with connect(daemon) as sock:
        sock.sendall(head("GET", "/admin/health", {"Host": "x"}))
        started = time.monotonic()
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")  # then nothing more: closed when idle
    assert time.monotonic() - started < IDLE_TIMEOUT_SECONDS + 3


# -- finding: a DTD in another encoding ----------------------------------------------------


def test_utf16_document_can_not_hide_a_dtd(daemon: Daemon, bucket: str) -> None:
    s3: Any = make_client(daemon.endpoint)
    for key in ("a", "aXb"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"kept")
    document = ('<?xml version="1.0" encoding="UTF-16"?>'
                '<!DOCTYPE Delete [<!ENTITY e "X">]>'
                '<Delete><Object><Key>a&e;b</Key></Object></Delete>').encode("utf-16")
    md5 = base64.b64encode(hashlib.md5(document).digest()).decode()
    path = f"/{bucket}?delete="
    headers = signed(daemon, "POST", path, {"content-md5": md5},
                     payload=hashlib.sha256(document).hexdigest())
    response = urllib3.PoolManager(retries=False).request(
        "POST", daemon.endpoint + path, body=document, headers=headers)
    assert response.status == 400, response.data
    assert b"<Code>MalformedXML</Code>" in response.data
    listed = s3.list_objects_v2(Bucket=bucket)
    assert {"a", "aXb"} <= {entry["Key"] for entry in listed["Contents"]}


# -- finding: generic SigV4 signers on the admin API ----------------------------------------


def generic_admin(daemon: Daemon, method: str, path: str, body: Any = None, *,
                  access_key: str = ROOT_ACCESS_KEY, secret: str = ROOT_SECRET_KEY
                  ) -> urllib3.BaseHTTPResponse:
    """A call signed by botocore's plain SigV4Auth (no x-amz-content-sha256)."""
    data = b"" if body is None else json.dumps(body).encode()
    request = AWSRequest(method, f"{daemon.endpoint}/admin{path}", data=data,
                         headers={"content-type": "application/json"} if data else {})
    botocore.auth.SigV4Auth(Credentials(access_key, secret), "s3", REGION).add_auth(request)
    prepared = request.prepare()
    assert "X-Amz-Content-SHA256" not in prepared.headers
    return urllib3.PoolManager(retries=False).request(
        method, prepared.url, body=data or None, headers=dict(prepared.headers))


def test_admin_accepts_a_generic_sigv4_signer(daemon: Daemon) -> None:
    created = generic_admin(daemon, "POST", "/users", {"username": f"g-{uuid.uuid4().hex[:8]}"})
    assert created.status == 201, created.data
    listed = generic_admin(daemon, "GET", "/users")
    assert listed.status == 200
    user_id = json.loads(created.data)["user_id"]
    assert user_id in listed.data.decode()


def admin_error(response: urllib3.BaseHTTPResponse) -> tuple[int, str]:
    assert response.headers["Content-Type"] == "application/json"
    return response.status, json.loads(response.data)["error"]


def test_admin_authentication_failures_are_named(daemon: Daemon,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert admin_error(generic_admin(daemon, "GET", "/users", secret="wrong")) == (
        403, "SignatureDoesNotMatch")
    assert admin_error(generic_admin(daemon, "GET", "/users", access_key="AKIANOBODY")) == (
        403, "InvalidAccessKeyId")
    skewed = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)

    def an_hour_ago(remove_tzinfo: bool = True) -> datetime.datetime:
        return skewed.replace(tzinfo=None) if remove_tzinfo else skewed

    monkeypatch.setattr(botocore.auth, "get_current_datetime", an_hour_ago)
    assert admin_error(generic_admin(daemon, "GET", "/users")) == (403, "RequestTimeTooSkewed")
