"""The webhook target and its HTTP/1.1 client without a reactor or a socket (connections
are in-memory transports the test answers on, the clock is injected): the bytes of one
POST, what an answer means (2xx, another status with the start of its body and no token,
a refused connection, a half or broken answer), the timeout over the whole exchange
(connecting, waiting for a connection, a missing answer, a body that never ends), kept
connections (reused, replaced after `Connection: close`, a reused one closed by the
server written again once), the bound on connections, close, the URL encoding and the
origin. The same target against real receivers: tests/integration/test_webhook_client.py."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.error import ConnectionDone, ConnectionLost, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from objstore.notify.targets.base import DeliveryError, Event
from objstore.notify.targets.webhook import (
    MAX_CONNECTIONS,
    MAX_ERROR_BODY,
    Origin,
    WebhookSettings,
    WebhookTarget,
    encoded_url,
    origin_of,
)

EVENT = Event(body=b'{"Records":[]}', event_name="s3:ObjectCreated:Put", bucket="b", key="k",
              event_time="", deleted=False)
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class Server:
    """The far end of one in-memory connection."""

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.transport = StringTransport()
        protocol.makeConnection(self.transport)

    def received(self) -> bytes:
        data = self.transport.value()
        self.transport.clear()
        return data

    def answer(self, *pieces: bytes) -> None:
        for piece in pieces:
            self.protocol.dataReceived(piece)

    def close(self, reason: type[Exception] = ConnectionDone) -> None:
        self.protocol.connectionLost(Failure(reason()))

    @property
    def dropped(self) -> bool:
        return bool(self.transport.disconnecting)


class Endpoint:
    """Connection attempts the test accepts (`accept`) or refuses; `auto`: accepted at
    once."""

    def __init__(self, auto: bool = True) -> None:
        self.auto = auto
        self.attempts: list[tuple[defer.Deferred[Any], Any]] = []
        self.servers: list[Server] = []
        self.cancelled = 0

    def connect(self, factory: Any) -> defer.Deferred[Any]:
        def cancel(_: defer.Deferred[Any]) -> None:
            self.cancelled += 1

        attempt: defer.Deferred[Any] = defer.Deferred(cancel)
        self.attempts.append((attempt, factory))
        if self.auto:
            self.accept()
        return attempt

    def accept(self) -> Server:
        attempt, factory = next((a, f) for a, f in self.attempts if not a.called)
        server = Server(factory.buildProtocol(None))
        self.servers.append(server)
        attempt.callback(server.protocol)
        return server


def target(url: str = "http://h.example/hook", token: str = "", timeout: float = 5.0,
           auto: bool = True) -> tuple[WebhookTarget, Endpoint, Clock]:
    endpoint, clock = Endpoint(auto), Clock()
    settings = WebhookSettings(name="hooks", url=url, auth_token=token,
                               timeout_seconds=timeout)
    return WebhookTarget(settings, endpoint=endpoint, clock=clock), endpoint, clock


def start(hook: WebhookTarget) -> defer.Deferred[None]:
    return defer.Deferred.fromCoroutine(hook.deliver(EVENT))


def failed(outcome: defer.Deferred[None]) -> str:
    failure = outcome.result
    outcome.addErrback(lambda _: None)
    assert isinstance(failure, Failure) and isinstance(failure.value, DeliveryError)
    return str(failure.value)


def test_a_2xx_answer_is_a_delivery_of_one_post() -> None:
    hook, endpoint, clock = target(url="http://h.example:8080/a b?q=ä", token="s3cr3t")
    outcome = start(hook)
    (server,) = endpoint.servers
    assert server.received() == (
        b"POST /a%20b?q=%C3%A4 HTTP/1.1\r\nHost: h.example:8080\r\n"
        b"Content-Type: application/json\r\nUser-Agent: objstore-notifications\r\n"
        b"Authorization: Bearer s3cr3t\r\nContent-Length: 14\r\n\r\n" + EVENT.body)
    server.answer(b"HTTP/1.1 204 No Content\r\n", b"Server: x\r\n")
    assert not outcome.called
    server.answer(b"\r\n")
    assert outcome.called and outcome.result is None
    assert clock.getDelayedCalls() == []  # the timeout is gone with the exchange


def test_another_status_is_an_error_with_the_start_of_the_body_token_hidden() -> None:
    hook, endpoint, _ = target(token="s3cr3t")
    outcome = start(hook)
    body = b"no s3cr3t here " + b"y" * 1000
    endpoint.servers[0].answer(b"HTTP/1.1 500 E\r\nContent-Length: %d\r\n\r\n" % len(body),
                               body)
    message = failed(outcome)
    assert message.startswith("HTTP 500: no *** here y") and "s3cr3t" not in message
    assert len(message) == len("HTTP 500: ") + MAX_ERROR_BODY - len("s3cr3t") + 3


def test_a_redirect_is_not_followed() -> None:
    hook, endpoint, _ = target()
    outcome = start(hook)
    endpoint.servers[0].answer(b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere/\r\n"
                               b"Content-Length: 0\r\n\r\n")
    assert failed(outcome) == "HTTP 302: " and len(endpoint.attempts) == 1


def test_a_refused_connection_is_a_delivery_error() -> None:
    hook, endpoint, _ = target(auto=False)
    outcome = start(hook)
    endpoint.attempts[0][0].errback(ConnectionRefusedError())
    assert "ConnectionRefusedError" in failed(outcome)


def test_the_timeout_covers_the_connect() -> None:
    hook, endpoint, clock = target(timeout=2.0, auto=False)
    outcome = start(hook)
    clock.advance(2.0)
    assert failed(outcome) == "no answer within 2 s" and endpoint.cancelled == 1


def test_no_answer_within_the_timeout_drops_the_connection() -> None:
    hook, endpoint, clock = target(timeout=2.5)
    outcome = start(hook)
    clock.advance(2.4)
    assert not outcome.called
    clock.advance(0.1)
    assert failed(outcome) == "no answer within 2.5 s"
    assert endpoint.servers[0].dropped
    endpoint.servers[0].close(ConnectionLost)  # the close that follows changes nothing


def test_a_body_that_never_ends_times_out_and_drops_the_connection() -> None:
    hook, endpoint, clock = target(timeout=3.0)
    outcome = start(hook)
    server = endpoint.servers[0]
    server.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
    clock.advance(3.0)
    assert failed(outcome) == "no answer within 3 s" and server.dropped


def test_the_connection_is_kept_until_the_server_says_close() -> None:
    hook, endpoint, _ = target()
    first = start(hook)
    endpoint.servers[0].answer(OK)
    second = start(hook)
    assert len(endpoint.servers) == 1 and endpoint.servers[0].received().count(b"POST") == 2
    endpoint.servers[0].answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
                               b"Content-Length: 0\r\n\r\n")
    assert first.result is None and second.result is None
    assert endpoint.servers[0].dropped
    third = start(hook)
    assert len(endpoint.servers) == 2
    endpoint.servers[1].answer(b"HTTP/1.0 200 OK\r\n\r\n")  # up to the close
    assert not third.called
    endpoint.servers[1].close()
    assert third.result is None


def test_a_reused_connection_closed_before_the_answer_is_written_again_once() -> None:
    hook, endpoint, _ = target()
    start(hook)
    endpoint.servers[0].answer(OK)
    outcome = start(hook)
    endpoint.servers[0].close()  # the server's idle timeout raced the request
    assert len(endpoint.servers) == 2
    assert endpoint.servers[1].received().endswith(EVENT.body)
    endpoint.servers[1].close()  # a new connection is not tried again
    assert "closed before an answer" in failed(outcome)
    assert len(endpoint.servers) == 2


def test_a_half_answer_then_a_close_is_a_delivery_error() -> None:
    hook, endpoint, _ = target()
    outcome = start(hook)
    endpoint.servers[0].answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    endpoint.servers[0].close()
    assert "closed in the middle of the answer" in failed(outcome)
    assert len(endpoint.servers) == 1


def test_a_garbage_answer_is_a_delivery_error_and_drops_the_connection() -> None:
    hook, endpoint, _ = target()
    outcome = start(hook)
    endpoint.servers[0].answer(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    assert "not an HTTP/1 status line" in failed(outcome)
    assert endpoint.servers[0].dropped
    start(hook)
    assert len(endpoint.servers) == 2


def test_an_answer_nobody_asked_for_drops_an_idle_connection() -> None:
    hook, endpoint, _ = target()
    start(hook)
    endpoint.servers[0].answer(OK)
    endpoint.servers[0].answer(b"HTTP/1.1 408 Timeout\r\n\r\n")
    assert endpoint.servers[0].dropped
    start(hook)
    assert len(endpoint.servers) == 2


def test_connections_are_bounded_and_waiting_is_under_the_timeout() -> None:
    hook, endpoint, clock = target(timeout=5.0)
    outcomes = [start(hook) for _ in range(MAX_CONNECTIONS + 2)]
    assert len(endpoint.servers) == MAX_CONNECTIONS
    endpoint.servers[0].answer(OK)  # the first waiting delivery takes this connection
    assert outcomes[0].result is None
    assert endpoint.servers[0].received().count(b"POST") == 2
    clock.advance(5.0)  # the second one's drop makes room for the last, which times out
    assert all(failed(o) == "no answer within 5 s" for o in outcomes[1:])
    assert len(endpoint.servers) == MAX_CONNECTIONS + 1
    assert all(server.dropped for server in endpoint.servers)
    after = start(hook)  # the dropped connections made room
    endpoint.servers[-1].answer(OK)
    assert after.result is None


def test_close_drops_the_connections_and_fails_the_waiting() -> None:
    hook, endpoint, _ = target()
    busy = [start(hook) for _ in range(MAX_CONNECTIONS + 1)]
    defer.Deferred.fromCoroutine(hook.close())
    assert all(server.dropped for server in endpoint.servers)
    assert "closed" in failed(busy[-1])
    for server in endpoint.servers:
        server.close(ConnectionLost)
    assert all("closed" in failed(o) for o in busy[:-1])


def test_a_url_that_cannot_be_encoded_fails_each_delivery_not_the_target() -> None:
    hook, endpoint, _ = target(url="http://ü..b/x")
    assert "cannot be sent" in failed(start(hook))
    assert endpoint.attempts == []


def test_a_token_on_two_lines_is_never_sent() -> None:
    hook, endpoint, _ = target(token="a\r\nX-Injected: 1")
    assert "line break" in failed(start(hook))
    assert endpoint.attempts == []


@pytest.mark.parametrize("url, encoded", [
    ("http://h.example:8080/a b?q=ä", b"http://h.example:8080/a%20b?q=%C3%A4"),
    ("https://héllo.example/ü", b"https://xn--hllo-bpa.example/%C3%BC"),
    ("http://[::1]:9000/hook", b"http://[::1]:9000/hook"),  # as written
])
def test_encoded_url(url: str, encoded: bytes) -> None:
    assert encoded_url(url) == encoded


@pytest.mark.parametrize("url, origin", [
    (b"http://h.example", Origin(False, "h.example", 80, "h.example", "/")),
    (b"https://H.example/a?b=c#frag", Origin(True, "h.example", 443, "H.example", "/a?b=c")),
    (b"http://[::1]:9000/hook", Origin(False, "::1", 9000, "[::1]:9000", "/hook")),
    (b"http://u:p@h:81/x", Origin(False, "h", 81, "h:81", "/x")),
])
def test_origin_of(url: bytes, origin: Origin) -> None:
    assert origin_of(url) == origin


def test_the_endpoint_is_tls_for_https_only() -> None:
    plain = WebhookTarget(WebhookSettings(name="p", url="http://h.example:81/a"))
    assert isinstance(plain._make_endpoint(MemoryReactorClock()), HostnameEndpoint)
    for verify in (True, False):
        secure = WebhookTarget(WebhookSettings(name="s", url="https://h.example/a",
                                               tls_verify=verify))
        assert not isinstance(secure._make_endpoint(MemoryReactorClock()), HostnameEndpoint)


def test_a_failed_connect_lets_a_waiting_delivery_try() -> None:
    hook, endpoint, _ = target(auto=False)
    outcomes = [start(hook) for _ in range(MAX_CONNECTIONS + 1)]
    assert len(endpoint.attempts) == MAX_CONNECTIONS
    endpoint.attempts[0][0].errback(ConnectionRefusedError())
    assert "ConnectionRefusedError" in failed(outcomes[0])
    assert len(endpoint.attempts) == MAX_CONNECTIONS + 1  # the waiting one connects now
    for _ in range(MAX_CONNECTIONS):
        endpoint.accept().answer(OK)
    assert all(outcome.result is None for outcome in outcomes[1:])


def test_the_bound_holds_when_a_retry_needs_a_fresh_connection() -> None:
    """Both kept connections busy and a delivery waiting; the server closes one before
    answering: its room goes to the waiting delivery, and the retry (never on a kept
    connection) waits, then takes the room of the next connection let go, ahead of a
    delivery that came after it; never more than MAX_CONNECTIONS at once."""
    hook, endpoint, _ = target()
    first, second = start(hook), start(hook)
    for server in endpoint.servers:
        server.answer(OK)
    assert first.result is None and second.result is None
    a, b = endpoint.servers
    retried, other = start(hook), start(hook)  # b (the last kept), then a
    waiting = start(hook)
    b.close()  # before its answer
    late = start(hook)
    assert hook._client is not None and hook._client.open_connections == MAX_CONNECTIONS
    c = endpoint.servers[2]  # the waiting delivery's
    c.answer(OK)  # let go: the retry closes it and connects afresh
    assert waiting.result is None and c.dropped
    assert hook._client.open_connections == MAX_CONNECTIONS and len(endpoint.servers) == 4
    d = endpoint.servers[3]
    assert d.received().endswith(EVENT.body) and not retried.called and not late.called
    d.answer(OK)  # the retry's answer; `late` goes next on d
    assert retried.result is None
    assert d.received().endswith(EVENT.body)
    d.answer(OK)
    a.answer(OK)
    assert late.result is None and other.result is None
    assert len(endpoint.servers) == 4
