"""The webhook target's HTTP/1.1 client against real receivers on real sockets (a scripted
HTTP server on a thread of the test, the test's own TLS certificate): kept connections
(one for many deliveries, the auth header on each), chunked answers, `Connection: close`,
1xx skipped, a half answer, a server closing a kept connection, no answer within the
timeout, a refused connection, TLS verified and not. The same rules without sockets:
tests/unit/test_webhook_target.py and tests/unit/test_http1_answer.py.

The target is driven directly (no daemon) under pytest-twisted, as the notification queue
drives it: one delivery at a time."""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_twisted

from objstore.notify.targets.base import DeliveryError
from objstore.notify.targets.webhook import WebhookSettings, WebhookTarget
from tests.integration.notify_brokers import closed_port, make_event, poll
from tests.integration.test_lifecycle_of_the_process import make_certificate

pytestmark = pytest.mark.timeout(60)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
TOKEN = "tok-4711"


@dataclass
class Script:
    """What the server answers, request by request (then OK), and what it saw."""

    answers: list[tuple[bytes, bool]] = field(default_factory=list)  # (bytes, close after)
    bodies: list[bytes] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> tuple[bytes, bool]:
        with self.lock:
            return self.answers.pop(0) if self.answers else (OK, False)


def read_request(stream: socket.socket, buffer: bytearray) -> tuple[dict[str, str], bytes] | None:
    while b"\r\n\r\n" not in buffer:
        data = stream.recv(65536)
        if not data:
            return None
        buffer += data
    end = buffer.index(b"\r\n\r\n")
    lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    del buffer[:end + 4]
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(buffer) < length:
        data = stream.recv(65536)
        if not data:
            return None
        buffer += data
    body = bytes(buffer[:length])
    del buffer[:length]
    return headers, body


def serve(script: Script, context: ssl.SSLContext | None = None
          ) -> tuple[int, socketserver.ThreadingTCPServer]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            stream = self.request
            if context is not None:
                try:
                    stream = context.wrap_socket(stream, server_side=True)
                except (ssl.SSLError, OSError):
                    return
            with script.lock:
                script.connections += 1
            buffer = bytearray()
            while True:
                got = read_request(stream, buffer)
                if got is None:
                    return
                headers, body = got
                with script.lock:
                    script.bodies.append(body)
                    script.auth.append(headers.get("authorization", ""))
                answer, close = script.next()
                if answer:
                    stream.sendall(answer)
                if close:
                    stream.close()
                    return

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], server


@pytest.fixture
def receiver() -> Iterator[tuple[Script, int]]:
    script = Script()
    port, server = serve(script)
    yield script, port
    server.shutdown()
    server.server_close()


def hook(port: int, timeout: float = 5.0, scheme: str = "http", verify: bool = True,
         host: str = "127.0.0.1") -> WebhookTarget:
    return WebhookTarget(WebhookSettings(name="h", url=f"{scheme}://{host}:{port}/hook?x=1",
                                         auth_token=TOKEN, tls_verify=verify,
                                         timeout_seconds=timeout))


@pytest_twisted.ensureDeferred
async def test_many_deliveries_over_one_kept_connection(receiver: tuple[Script, int]) -> None:
    script, port = receiver
    target = hook(port)
    try:
        for n in range(1, 6):
            await target.deliver(make_event(n))
    finally:
        await target.close()
    assert script.connections == 1
    assert [b'"sequencer":%d' % n in body for n, body in enumerate(script.bodies, 1)] \
        == [True] * 5
    assert script.auth == [f"Bearer {TOKEN}"] * 5


@pytest_twisted.ensureDeferred
async def test_answers_of_every_framing(receiver: tuple[Script, int]) -> None:
    script, port = receiver
    script.answers = [
        (b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbad!\r\n0\r\n\r\n",
         False),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n0\r\n"
         b"X-T: 1\r\n\r\n", False),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", True),
        (b"HTTP/1.0 201 Created\r\n\r\nup to the close", True),
        (b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy", False),
    ]
    target = hook(port)
    try:
        with pytest.raises(DeliveryError, match="^HTTP 500: bad!$"):
            await target.deliver(make_event(1))
        for n in range(2, 6):
            await target.deliver(make_event(n))
        with pytest.raises(DeliveryError, match="^HTTP 503: busy$"):
            await target.deliver(make_event(6))
    finally:
        await target.close()
    assert len(script.bodies) == 6
    assert script.connections == 3  # the first four over one; each close makes a new one


@pytest_twisted.ensureDeferred
async def test_a_half_answer_fails_and_the_next_delivery_goes_on(
        receiver: tuple[Script, int]) -> None:
    script, port = receiver
    script.answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", True),
                      (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", False)]
    target = hook(port)
    try:
        with pytest.raises(DeliveryError, match="closed in the middle of the answer"):
            await target.deliver(make_event(1))
        with pytest.raises(DeliveryError, match="not a length"):
            await target.deliver(make_event(2))
        await target.deliver(make_event(3))
    finally:
        await target.close()
    assert script.connections == 3


@pytest_twisted.ensureDeferred
async def test_a_kept_connection_the_server_closed_is_replaced(
        receiver: tuple[Script, int]) -> None:
    """The server answers as if it kept the connection, then closes it (its idle timeout):
    once the close is seen the idle connection is gone and the next delivery makes a new
    one; a delivery right after the answer goes over a new one too, whether the close was
    seen before its write or not (then the request is written again, once)."""
    script, port = receiver
    script.answers = [(OK, True), (OK, True)]
    target = hook(port)
    try:
        await target.deliver(make_event(1))
        assert await poll(lambda: target._client.open_connections,  # type: ignore[union-attr]
                          lambda n: n == 0) == 0
        await target.deliver(make_event(2))
        await target.deliver(make_event(3))
    finally:
        await target.close()
    assert script.connections == 3 and len(script.bodies) == 3


@pytest_twisted.ensureDeferred
async def test_no_answer_within_the_timeout(receiver: tuple[Script, int]) -> None:
    script, port = receiver
    script.answers = [(b"", False)]  # read, never answered
    target = hook(port, timeout=0.5)
    started = time.monotonic()
    try:
        with pytest.raises(DeliveryError, match=r"^no answer within 0.5 s$"):
            await target.deliver(make_event(1))
        assert time.monotonic() - started < 3.0
        await target.deliver(make_event(2))
    finally:
        await target.close()
    assert script.connections == 2


@pytest_twisted.ensureDeferred
async def test_a_refused_connection() -> None:
    target = hook(closed_port())
    try:
        with pytest.raises(DeliveryError, match="ConnectionRefusedError"):
            await target.deliver(make_event(1))
    finally:
        await target.close()


@pytest_twisted.ensureDeferred
async def test_tls_verified_and_not(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)  # self-signed for localhost: no root knows it
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    script = Script()
    port, server = serve(script, context)
    checked = hook(port, scheme="https", host="localhost")
    trusting = hook(port, scheme="https", host="localhost", verify=False)
    try:
        with pytest.raises(DeliveryError) as refused:
            await checked.deliver(make_event(1))
        assert TOKEN not in str(refused.value)
        await trusting.deliver(make_event(2))
        await trusting.deliver(make_event(3))
    finally:
        await checked.close()
        await trusting.close()
        server.shutdown()
        server.server_close()
    assert len(script.bodies) == 2 and script.auth == [f"Bearer {TOKEN}"] * 2
