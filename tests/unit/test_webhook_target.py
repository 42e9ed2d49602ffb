"""The webhook target without a reactor or a socket: the POST it makes through an agent
(method, URL encoded once, headers, body in one producer), what an answer means (2xx,
another status with the start of its body, a refused connection), the timeout over the
whole exchange on an injected clock (a missing answer, a body that never ends), the capped
body reader, the URL encoding and the endpoints kept per (scheme, host, port)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.web.client import URI, ResponseDone
from twisted.web.error import SchemeNotSupported
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers

from objstore.notify.targets.base import DeliveryError, Event
from objstore.notify.targets.webhook import (
    MAX_ERROR_BODY,
    AnyCertificate,
    KeptEndpoints,
    WebhookSettings,
    WebhookTarget,
    encoded_url,
    read_capped,
)

EVENT = Event(body=b'{"Records":[]}', event_name="s3:ObjectCreated:Put", bucket="b", key="k",
              event_time="", deleted=False)


class Transport:
    def __init__(self) -> None:
        self.stopped = False

    def stopProducing(self) -> None:  # noqa: N802
        self.stopped = True


class Response:
    """An IResponse whose body the test feeds (`feed`, `end`)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.transport = Transport()
        self.protocol: Any = None

    def deliverBody(self, protocol: Any) -> None:  # noqa: N802
        self.protocol = protocol
        protocol.makeConnection(self.transport)

    def feed(self, *chunks: bytes) -> None:
        for chunk in chunks:
            self.protocol.dataReceived(chunk)

    def end(self, reason: type[Exception] = ResponseDone) -> None:
        self.protocol.connectionLost(Failure(reason()))


class Agent:
    """Records each request; answers with the Deferred the test holds."""

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, bytes, Headers, bytes, int]] = []
        self.answers: list[defer.Deferred[Any]] = []
        self.cancelled = 0

    def request(self, method: bytes, uri: bytes, headers: Headers, producer: Any
                ) -> defer.Deferred[Any]:
        written: list[bytes] = []

        class Consumer:
            def write(self, data: bytes) -> None:
                written.append(data)

        producer.startProducing(Consumer())
        self.requests.append((method, uri, headers, b"".join(written), producer.length))

        def cancel(_: defer.Deferred[Any]) -> None:
            self.cancelled += 1

        answer: defer.Deferred[Any] = defer.Deferred(cancel)
        self.answers.append(answer)
        return answer


def target(url: str = "http://h.example/hook", token: str = "", timeout: float = 5.0
           ) -> tuple[WebhookTarget, Agent, Clock]:
    agent, clock = Agent(), Clock()
    settings = WebhookSettings(name="hooks", url=url, auth_token=token,
                               timeout_seconds=timeout)
    return WebhookTarget(settings, agent=agent, clock=clock), agent, clock


def start(hook: WebhookTarget) -> defer.Deferred[None]:
    return defer.Deferred.fromCoroutine(hook.deliver(EVENT))


def test_a_2xx_answer_is_a_delivery_of_one_post() -> None:
    hook, agent, _ = target(token="s3cr3t")
    outcome = start(hook)
    ((method, uri, headers, body, length),) = agent.requests
    assert (method, uri, body, length) == (b"POST", b"http://h.example/hook", EVENT.body,
                                           len(EVENT.body))
    assert headers.getRawHeaders(b"content-type") == [b"application/json"]
    assert headers.getRawHeaders(b"authorization") == [b"Bearer s3cr3t"]
    response = Response(204)
    agent.answers[0].callback(response)
    assert not outcome.called  # the answer's body is read to its end first
    response.feed(b"x" * 10_000)
    response.end()
    assert outcome.called and outcome.result is None


def test_another_status_is_an_error_with_the_start_of_the_body_token_hidden() -> None:
    hook, agent, _ = target(token="s3cr3t")
    outcome = start(hook)
    response = Response(500)
    agent.answers[0].callback(response)
    response.feed(b"no s3cr3t here ", b"y" * 1000)
    response.end(PotentialDataLoss)  # a body ended by the close: still complete
    failure = outcome.result
    outcome.addErrback(lambda _: None)
    assert isinstance(failure.value, DeliveryError)
    message = str(failure.value)
    assert message.startswith("HTTP 500: no *** here y") and "s3cr3t" not in message
    assert len(message) == len("HTTP 500: ") + MAX_ERROR_BODY - len("s3cr3t") + 3


def test_a_refused_connection_is_a_delivery_error() -> None:
    hook, agent, _ = target()
    outcome = start(hook)
    agent.answers[0].errback(ConnectionRefusedError())
    failure = outcome.result
    outcome.addErrback(lambda _: None)
    assert isinstance(failure.value, DeliveryError)
    assert "ConnectionRefusedError" in str(failure.value)


def test_no_answer_within_the_timeout_cancels_the_request() -> None:
    hook, agent, clock = target(timeout=2.5)
    outcome = start(hook)
    clock.advance(2.4)
    assert not outcome.called
    clock.advance(0.1)
    failure = outcome.result
    outcome.addErrback(lambda _: None)
    assert agent.cancelled == 1
    assert isinstance(failure.value, DeliveryError)
    assert str(failure.value) == "no answer within 2.5 s"


def test_a_body_that_never_ends_times_out_and_drops_the_connection() -> None:
    hook, agent, clock = target(timeout=3.0)
    outcome = start(hook)
    response = Response(200)
    agent.answers[0].callback(response)
    response.feed(b"partial")
    clock.advance(3.0)
    failure = outcome.result
    outcome.addErrback(lambda _: None)
    assert response.transport.stopped
    assert str(failure.value) == "no answer within 3 s"
    response.end(ConnectionRefusedError)  # the close that follows changes nothing


def test_a_url_that_cannot_be_encoded_fails_each_delivery_not_the_target() -> None:
    hook, agent, _ = target(url="http://ü..b/x")
    outcome = start(hook)
    failure = outcome.result
    outcome.addErrback(lambda _: None)
    assert isinstance(failure.value, DeliveryError) and "cannot be sent" in str(failure.value)
    assert agent.requests == []


@pytest.mark.parametrize("url, encoded", [
    ("http://h.example:8080/a b?q=ä", b"http://h.example:8080/a%20b?q=%C3%A4"),
    ("https://héllo.example/ü", b"https://xn--hllo-bpa.example/%C3%BC"),
    ("http://[::1]:9000/hook", b"http://[::1]:9000/hook"),  # as written
])
def test_encoded_url(url: str, encoded: bytes) -> None:
    assert encoded_url(url) == encoded


def test_read_capped_keeps_the_start_and_fails_on_a_broken_body() -> None:
    response = Response(200)
    kept = read_capped(response, 5)
    response.feed(b"abc", b"defgh", b"ijk")
    response.end()
    assert kept.result == b"abcde"
    broken = Response(200)
    lost = read_capped(broken, 5)
    broken.end(ConnectionRefusedError)
    failure = lost.result
    lost.addErrback(lambda _: None)
    assert failure.check(ConnectionRefusedError)


def test_endpoints_are_made_once_per_origin() -> None:
    endpoints = KeptEndpoints(MemoryReactorClock(), AnyCertificate())
    plain = endpoints.endpointForURI(URI.fromBytes(b"http://h.example:81/a"))
    assert isinstance(plain, HostnameEndpoint)
    assert endpoints.endpointForURI(URI.fromBytes(b"http://h.example:81/b")) is plain
    secure = endpoints.endpointForURI(URI.fromBytes(b"https://h.example/a"))
    assert secure is not plain and not isinstance(secure, HostnameEndpoint)  # TLS-wrapped
    assert endpoints.endpointForURI(URI.fromBytes(b"https://h.example/c")) is secure
    with pytest.raises(SchemeNotSupported):
        endpoints.endpointForURI(URI.fromBytes(b"ftp://h.example/"))
