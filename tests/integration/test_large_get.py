"""GET of large plain objects end to end: on a plain-TCP listener the body is sent with
sendfile (http/sendfile.py), over TLS through Python reads (http/producers.py). Whole,
ranged, multipart (several blobs) and part-number GETs with boto3, curl and a raw
HTTP/1.1 connection; a keep-alive request after a large body; a client that leaves in
the middle of a body leaves no descriptor open and nothing in the log; the access log
counts the bytes sent."""

from __future__ import annotations

import datetime
import hashlib
import http.client
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.conftest import make_client, running_daemon
from tests.integration.daemon import Daemon

BUCKET = "large-get"
MIB = 1024 * 1024
WAIT_SECONDS = 20.0
PLAIN = os.urandom(6 * MIB + 12345)  # streamed: past the small-object size (256 KiB)
PARTS = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(MIB + 7)]
MULTIPART = b"".join(PARTS)


def access_log_config(workdir: Path) -> str:
    return (f'[logging]\naccess_log = "{workdir / "access.log"}"\n'
            'access_log_format = "json"\n')


def make_certificate(directory: Path) -> Path:
    """A self-signed certificate for 127.0.0.1 (the daemon's endpoint) in `directory`:
    cert.pem (also the CA to verify with) and key.pem."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            False)
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return directory / "cert.pem"


def seed(s3: Any) -> None:
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="plain", Body=PLAIN)
    s3.put_object(Bucket=BUCKET, Key="small", Body=b"small body")
    put_multipart(s3, "multi", PARTS)


def put_multipart(s3: Any, key: str, parts: list[bytes]) -> None:
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    etags = [s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=n,
                            Body=part)["ETag"] for n, part in enumerate(parts, start=1)]
    s3.complete_multipart_upload(
        Bucket=BUCKET, Key=key, UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag}
                                   for n, etag in enumerate(etags, start=1)]})


@pytest.fixture(scope="module")
def plain(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[Daemon, Any]]:
    workdir = tmp_path_factory.mktemp("large-get")
    node = Daemon(workdir, backend="sqlite", workers=1,
                  extra_config=access_log_config(workdir))
    with running_daemon(request, node):
        s3 = make_client(node.endpoint)
        seed(s3)
        yield node, s3
        node.assert_no_tracebacks()


@pytest.fixture(scope="module")
def tls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[Daemon, Any]]:
    workdir = tmp_path_factory.mktemp("large-get-tls")
    cert = make_certificate(workdir)
    node = Daemon(workdir, backend="sqlite", workers=1, tls_ca=cert, extra_config=(
        f'[server.tls]\ncert_file = "{cert}"\nkey_file = "{workdir / "key.pem"}"\n'))
    with running_daemon(request, node):
        s3 = make_client(node.endpoint)
        s3._endpoint.http_session._verify = str(cert)
        seed(s3)
        yield node, s3
        node.assert_no_tracebacks()


def body_of(s3: Any, key: str, **kwargs: Any) -> bytes:
    data: bytes = s3.get_object(Bucket=BUCKET, Key=key, **kwargs)["Body"].read()
    return data


def check_reads(s3: Any) -> None:
    assert body_of(s3, "plain") == PLAIN
    assert body_of(s3, "plain", Range="bytes=0-0") == PLAIN[:1]
    assert body_of(s3, "plain", Range="bytes=1000-3000999") == PLAIN[1000:3001000]
    assert body_of(s3, "plain", Range="bytes=-300000") == PLAIN[-300000:]
    assert body_of(s3, "plain", Range=f"bytes={len(PLAIN) - 400000}-") == PLAIN[-400000:]
    assert body_of(s3, "multi") == MULTIPART
    boundary = len(PARTS[0])  # a range over two parts (two blobs)
    assert (body_of(s3, "multi", Range=f"bytes={boundary - 500000}-{boundary + 499999}")
            == MULTIPART[boundary - 500000:boundary + 500000])
    assert body_of(s3, "multi", Range=f"bytes=100-{len(MULTIPART) - 2}") == MULTIPART[100:-1]
    assert body_of(s3, "multi", PartNumber=2) == PARTS[1]


def test_boto3_reads_whole_ranged_and_multipart(plain: tuple[Daemon, Any]) -> None:
    check_reads(plain[1])


def test_boto3_reads_over_tls(tls: tuple[Daemon, Any]) -> None:
    check_reads(tls[1])


def curl(url: str, *args: str, ca: Path | None = None) -> bytes:
    command = ["curl", "-sS", "--fail", "--max-time", "60", *args]
    if ca is not None:
        command += ["--cacert", str(ca)]
    return subprocess.run(command + [url], capture_output=True, check=True).stdout


@pytest.mark.parametrize("side", ["plain", "tls"])
def test_curl_reads_whole_and_ranged(side: str, request: pytest.FixtureRequest) -> None:
    node, s3 = request.getfixturevalue(side)
    for key, data in (("plain", PLAIN), ("multi", MULTIPART)):
        url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key})
        assert hashlib.md5(curl(url, ca=node.tls_ca)).digest() == hashlib.md5(data).digest()
        assert curl(url, "-r", "5000-5300000", ca=node.tls_ca) == data[5000:5300001]


def raw_get(node: Daemon, key: str, headers: dict[str, str] | None = None,
            connection: http.client.HTTPConnection | None = None
            ) -> tuple[http.client.HTTPResponse, bytes]:
    """A presigned GET on `connection` (kept open for the next request)."""
    s3 = make_client(node.endpoint)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key})
    path = url.split(str(node.port), 1)[1]
    assert connection is not None
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    return response, response.read()


def test_keep_alive_after_a_large_body(plain: tuple[Daemon, Any]) -> None:
    node = plain[0]
    connection = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    try:
        response, body = raw_get(node, "plain", connection=connection)
        assert response.status == 200 and body == PLAIN
        sock = connection.sock
        assert sock is not None  # the server kept the connection open
        response, body = raw_get(node, "small", connection=connection)
        assert response.status == 200 and body == b"small body"
        response, body = raw_get(node, "multi", {"Range": "bytes=4000000-7000000"},
                                 connection=connection)
        assert response.status == 206 and body == MULTIPART[4000000:7000001]
        response, body = raw_get(node, "plain", connection=connection)
        assert response.status == 200 and body == PLAIN
        assert connection.sock is sock  # one connection for all four
    finally:
        connection.close()


def access_line(node: Daemon, request_id: str) -> dict[str, Any]:
    path = node.workdir / "access.log"
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if entry["request_id"] == request_id:
                    return entry  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"no access log line for request {request_id}")


def test_access_log_counts_the_bytes_sent(plain: tuple[Daemon, Any]) -> None:
    node = plain[0]
    connection = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    try:
        response, body = raw_get(node, "plain", connection=connection)
        assert access_line(node, response.headers["x-amz-request-id"])["bytes_out"] == len(PLAIN)
        response, body = raw_get(node, "multi", {"Range": "bytes=10-5242889"},
                                 connection=connection)
        assert len(body) == 5242880
        assert access_line(node, response.headers["x-amz-request-id"])["bytes_out"] == 5242880
    finally:
        connection.close()


def open_descriptors(node: Daemon) -> int:
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in node.pids())


def blob_descriptors(node: Daemon) -> int:
    """Descriptors of the daemon open on files under its blob directory."""
    count = 0
    for pid in node.pids():
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(node.data_dir)) and "/blobs/" in target:
                count += 1
    return count


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
@pytest.mark.parametrize("key", ["plain", "multi"])
def test_a_client_leaving_mid_body_leaves_nothing_behind(
        plain: tuple[Daemon, Any], key: str, reset: bool) -> None:
    node, s3 = plain
    big_key = f"big-{uuid.uuid4().hex}"  # larger than the socket buffers can hold
    if key == "plain":
        s3.put_object(Bucket=BUCKET, Key=big_key, Body=os.urandom(48 * MIB))
    else:
        put_multipart(s3, big_key, [os.urandom(16 * MIB) for _ in range(3)])
    logged = node.log_size()
    before = open_descriptors(node)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": big_key})
    path = url.split(str(node.port), 1)[1]
    client = socket.create_connection(("127.0.0.1", node.port), timeout=30)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n\r\n".encode())
    received = 0
    while received < 2 * MIB:
        chunk = client.recv(256 * 1024)
        assert chunk
        received += len(chunk)
    if reset:  # RST instead of FIN
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()
    deadline = time.monotonic() + WAIT_SECONDS
    while blob_descriptors(node) or open_descriptors(node) > before:
        assert time.monotonic() < deadline, (
            f"{open_descriptors(node)} descriptors open, {before} before; "
            f"{blob_descriptors(node)} on blobs")
        time.sleep(0.05)
    assert body_of(s3, "plain") == PLAIN  # the daemon still answers
    node.assert_no_tracebacks(since=logged)
    s3.delete_object(Bucket=BUCKET, Key=big_key)


def blob_files(node: Daemon) -> list[Path]:
    return [path for path in (node.data_dir / "blobs").rglob("*")
            if path.is_file() and not path.name.endswith(".json")]


def resident_bytes(paths: list[Path]) -> int:
    """Bytes of the files in the page cache, by util-linux's fincore (mincore: asking
    does not read anything in, where a read probe would start a read-ahead). A file gone
    meanwhile (an earlier test's delete removes its files after the answer) counts 0."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                          *map(str, paths)], capture_output=True, text=True, check=False)
    return sum(int(line) for line in out.stdout.split())


def evict(paths: list[Path]) -> bool:
    """Drop the files' pages from the page cache (clean once written durably); whether
    the kernel let them all go. Asked again for a while: a read-ahead the daemon started
    may still bring pages back in."""
    deadline = time.monotonic() + 5.0
    while True:
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        if resident_bytes(paths) == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def test_objects_out_of_the_page_cache_are_sent_whole_and_right(
        plain: tuple[Daemon, Any]) -> None:
    """http/sendfile.py asks whether each piece is in the page cache before sendfile(2)
    and has the IO pool read it in when not (which thread reads is unit-tested in
    test_sendfile.py: the kernel's own read-ahead makes per-thread disk counters no
    measure of it here): GETs of objects evicted from the cache give the same bytes,
    whole, ranged and across parts, and clients leaving during the warm-up leave no
    descriptor behind."""
    node, s3 = plain
    logged = node.log_size()
    if not evict(blob_files(node)):
        pytest.skip("the kernel kept the blob files in the page cache")
    check_reads(s3)
    assert evict(blob_files(node))  # a small object out of the cache: read on the IO pool
    assert body_of(s3, "small") == b"small body"
    assert body_of(s3, "small", Range="bytes=2-4") == b"all"
    cold = os.urandom(24 * MIB)
    s3.put_object(Bucket=BUCKET, Key="cold", Body=cold)
    before = open_descriptors(node)
    for _ in range(3):
        assert evict(blob_files(node))
        url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "cold"})
        client = socket.create_connection(("127.0.0.1", node.port), timeout=30)
        client.sendall(f"GET {url.split(str(node.port), 1)[1]} HTTP/1.1\r\n"
                       f"Host: 127.0.0.1:{node.port}\r\n\r\n".encode())
        assert client.recv(1024).startswith(b"HTTP/1.1 200")
        client.close()  # while the first window may still be warming
    deadline = time.monotonic() + WAIT_SECONDS
    while blob_descriptors(node) or open_descriptors(node) > before:
        assert time.monotonic() < deadline, f"{blob_descriptors(node)} open on blobs"
        time.sleep(0.05)
    assert evict(blob_files(node))
    assert hashlib.sha256(body_of(s3, "cold")).digest() == hashlib.sha256(cold).digest()
    node.assert_no_tracebacks(since=logged)
    s3.delete_object(Bucket=BUCKET, Key="cold")


def test_tls_client_leaving_mid_body(tls: tuple[Daemon, Any]) -> None:
    node, s3 = tls
    s3.put_object(Bucket=BUCKET, Key="tls-big", Body=os.urandom(32 * MIB))
    logged = node.log_size()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "tls-big"})
    path = url.split(str(node.port), 1)[1]
    context = ssl.create_default_context(cafile=str(node.tls_ca))
    raw = socket.create_connection(("127.0.0.1", node.port), timeout=30)
    client = context.wrap_socket(raw, server_hostname="127.0.0.1")
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\n\r\n".encode())
    assert client.recv(65536)
    client.close()
    deadline = time.monotonic() + WAIT_SECONDS
    while blob_descriptors(node):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert body_of(s3, "plain") == PLAIN
    node.assert_no_tracebacks(since=logged)


def read_answer(client: socket.socket, method: str) -> tuple[bytes, bytes]:
    """One answer's head and body (by its Content-Length; none for HEAD)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        assert chunk, f"closed before the head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0 if method == "HEAD" else int(
        [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
         ][0].split(b":")[1])
    while len(body) < length:
        chunk = client.recv(65536)
        assert chunk
        body += chunk
    return head, body


def test_http_1_0_keep_alive_serves_several_requests_on_one_connection(
        plain: tuple[Daemon, Any]) -> None:
    """ab -k and other HTTP/1.0 clients: `Connection: keep-alive` keeps the connection
    when the answer has a length (twisted.web alone closed every HTTP/1.0 connection)."""
    node, s3 = plain
    client = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    try:
        for method, operation, keep in (("HEAD", "head_object", True),
                                        ("GET", "get_object", True),
                                        ("GET", "get_object", False)):
            url = s3.generate_presigned_url(operation, Params={"Bucket": BUCKET,
                                                               "Key": "small"})
            path = url.split(str(node.port), 1)[1]
            client.sendall(f"{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{node.port}\r\n"
                           f"{'Connection: keep-alive' if keep else 'X-Other: 1'}\r\n\r\n"
                           .encode())
            head, body = read_answer(client, method)
            assert head.startswith(b"HTTP/1.0 200 ")
            assert (b"\r\nConnection: Keep-Alive" in head) is keep
            assert body == (b"" if method == "HEAD" else b"small body")
        assert client.recv(1) == b""  # the request without keep-alive: closed after it
    finally:
        client.close()
