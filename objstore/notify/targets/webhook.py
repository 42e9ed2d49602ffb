"""The `webhook` target kind: an HTTP POST of the event document (application/json) to a
URL, on the reactor. A 2xx answer is a delivery; any other status, a refused or reset
connection, a TLS failure or no complete answer within the timeout (the answer's body
included) is a DeliveryError (retried by the caller).

The POST goes through Twisted's `Agent`, called directly (as the cluster client does,
cluster/http_agent.py): treq's `HTTPClient` parsed and IDNA-encoded the URL again, merged
cookies and wrapped the agent in redirect and decoding layers on every POST, and the
Agent's own endpoint factory made a new endpoint (for https a new TLS connection creator)
per request: half of a POST's CPU (bench.notify_stages). Here the endpoint is kept per
origin (`KeptEndpoints`), the URL is encoded once per target (as treq encoded it), the
headers are built once, the body is written in one call, and of the answer's body at most
MAX_ERROR_BODY bytes are kept (for the error message), the rest read and dropped so that
the connection goes back to the pool. Redirects are not followed (a 3xx is a failed
attempt).

Keys: url (http:// or https://), auth_token (sent as `Authorization: Bearer <token>`;
never logged or shown), tls_verify (default true: the server's certificate is checked
against the system roots; false accepts any certificate, for test setups only),
timeout_seconds (default: `[notifications] webhook_timeout_seconds`, which the node fills
in with `with_default_timeout`). An http(s) URL used as a configuration's ARN is an ad-hoc
webhook of this kind with only its url (`adhoc_settings`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import hyperlink
from twisted.internet import ssl
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.defer import TimeoutError as ExchangeTimeout
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.error import TimeoutError as ConnectTimeout
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import (
    URI,
    Agent,
    BrowserLikePolicyForHTTPS,
    HTTPConnectionPool,
    ResponseDone,
)
from twisted.web.error import SchemeNotSupported
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgentEndpointFactory, IPolicyForHTTPS
from zope.interface import implementer

from objstore.cluster.http_agent import BytesProducer
from objstore.notify.targets.base import DeliveryError, Event, Target, TargetConfigError

KEYS = ("kind", "url", "auth_token", "tls_verify", "timeout_seconds")
MAX_ERROR_BODY = 200


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    name: str
    url: str
    auth_token: str = ""
    tls_verify: bool = True
    timeout_seconds: float | None = None  # None: [notifications] webhook_timeout_seconds

    def __repr__(self) -> str:  # the token never reaches a log line
        return (f"WebhookSettings(name={self.name!r}, url={self.url!r}, "
                f"tls_verify={self.tls_verify!r}, timeout_seconds={self.timeout_seconds!r})")


def check_url(url: Any) -> str | None:
    """The problem with a webhook URL, None when it is usable."""
    if not isinstance(url, str) or not url:
        return "must be an http:// or https:// URL"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        return "must be an http:// or https:// URL with a valid port"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL"
    return None


class WebhookKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> WebhookSettings:
        where = f"[notifications.targets.{name}]"
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise TargetConfigError(f"{where} {unknown[0]}: unknown key of a webhook target "
                                    f"(keys: {', '.join(KEYS[1:])})")
        problem = check_url(table.get("url"))
        if problem:
            raise TargetConfigError(f"{where} url: {problem}")
        token = table.get("auth_token", "")
        if not isinstance(token, str) or any(c in token for c in "\r\n"):
            raise TargetConfigError(f"{where} auth_token: must be a string on one line")
        verify = table.get("tls_verify", True)
        if not isinstance(verify, bool):
            raise TargetConfigError(f"{where} tls_verify: must be true or false")
        timeout = table.get("timeout_seconds")
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, int | float)
                                    or not math.isfinite(timeout) or timeout <= 0):
            raise TargetConfigError(f"{where} timeout_seconds: must be a number > 0")
        return WebhookSettings(name, table["url"], token, verify,
                               None if timeout is None else float(timeout))

    def build(self, settings: WebhookSettings) -> Target:
        return WebhookTarget(settings)


def adhoc_settings(url: str, timeout_seconds: float) -> WebhookSettings:
    return WebhookSettings(name=url, url=url, timeout_seconds=timeout_seconds)


def with_default_timeout(settings: Any, timeout_seconds: float) -> Any:
    """Webhook settings without their own timeout get `[notifications]`'s."""
    if isinstance(settings, WebhookSettings) and settings.timeout_seconds is None:
        return dataclasses.replace(settings, timeout_seconds=timeout_seconds)
    return settings


class WebhookTarget:
    kind = "webhook"

    def __init__(self, settings: WebhookSettings, *, agent: Any = None,
                 clock: Any = None) -> None:
        """`agent` (an IAgent) and `clock` (an IReactorTime): the tests' (default: an
        `Agent` with its own persistent pool, and the running reactor, on first use)."""
        self.name = settings.name
        self._settings = settings
        self._agent: Any = agent  # zope interfaces are not mypy types
        self._clock: Any = clock
        self._pool: HTTPConnectionPool | None = None
        self._url_problem = ""
        try:
            self._url: bytes | None = encoded_url(settings.url)
        except ValueError as problem:  # delivery fails with it, as it did per POST
            self._url, self._url_problem = None, str(problem)
        headers = {b"Content-Type": [b"application/json"],
                   b"User-Agent": [b"objstore-notifications"]}
        if settings.auth_token:
            headers[b"Authorization"] = [f"Bearer {settings.auth_token}".encode()]
        self._headers = Headers(headers)

    def _http(self) -> tuple[Any, Any]:
        if self._agent is None or self._clock is None:
            from twisted.internet import reactor  # the running one (never installed here)

            if self._agent is None:
                self._pool = HTTPConnectionPool(reactor, persistent=True)
                self._pool.maxPersistentPerHost = 2
                policy = (BrowserLikePolicyForHTTPS() if self._settings.tls_verify
                          else AnyCertificate())
                self._agent = Agent.usingEndpointFactory(
                    reactor, KeptEndpoints(reactor, policy), pool=self._pool)
            if self._clock is None:
                self._clock = reactor
        return self._agent, self._clock

    async def deliver(self, event: Event) -> None:
        if self._url is None:
            raise DeliveryError(f"the URL cannot be sent: {self._url_problem}")
        agent, clock = self._http()
        timeout = self._settings.timeout_seconds or 10.0
        exchange = Deferred.fromCoroutine(self._exchange(agent, self._url, event.body))
        exchange.addTimeout(timeout, clock)
        try:
            code, body = await exchange
        except (CancelledError, ExchangeTimeout, ConnectTimeout):
            raise DeliveryError(f"no answer within {timeout:g} s") from None
        except Exception as error:  # connection refused, reset, TLS, DNS
            raise DeliveryError(self._scrub(f"{type(error).__name__}: {error}")) from None
        if not 200 <= code < 300:
            text = body.decode("utf-8", "replace")
            raise DeliveryError(self._scrub(f"HTTP {code}: {text}"))

    async def _exchange(self, agent: Any, url: bytes, body: bytes) -> tuple[int, bytes]:
        """The POST and its whole answer: (status, at most MAX_ERROR_BODY bytes of it)."""
        response: Any = await agent.request(b"POST", url, self._headers,
                                            BytesProducer(body))
        kept = await read_capped(response, MAX_ERROR_BODY)
        return response.code, kept

    def _scrub(self, message: str) -> str:
        token = self._settings.auth_token
        return message.replace(token, "***") if token else message

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.closeCachedConnections()


def encoded_url(url: str) -> bytes:
    """The URL as a request names it: IDNA host, percent-encoded path and query (as
    treq encoded it on every POST); an ASCII URL hyperlink cannot encode (an IPv6
    literal host) as written. ValueError for one that is neither."""
    try:
        return cast(str, hyperlink.URL.from_text(url).to_uri().to_text()).encode("ascii")
    except Exception as problem:  # hyperlink's and idna's errors (some not ValueErrors)
        if url.isascii() and url.isprintable() and " " not in url:
            return url.encode("ascii")
        raise ValueError(f"{type(problem).__name__}: {problem}") from None


class _CappedBody(Protocol):
    """Keeps the first `limit` bytes of an answer's body, reads and drops the rest; fires
    `finished` with the kept bytes once the body is complete."""

    def __init__(self, limit: int, finished: Deferred[bytes]) -> None:
        self._limit = limit
        self._finished = finished
        self._chunks: list[bytes] = []
        self._kept = 0

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted's)
        if self._kept < self._limit:
            data = data[:self._limit - self._kept]
            self._chunks.append(data)
            self._kept += len(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        if self._finished.called:  # cancelled (timed out) meanwhile
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self._finished.callback(b"".join(self._chunks))
        else:
            self._finished.errback(reason)


def read_capped(response: Any, limit: int) -> Deferred[bytes]:
    """At most `limit` bytes of `response`'s body (an IResponse), once all of it has been
    read; cancelling it drops the connection."""
    protocol: _CappedBody

    def cancel(_: Deferred[bytes]) -> None:
        if protocol.transport is not None:
            protocol.transport.stopProducing()

    finished: Deferred[bytes] = Deferred(cancel)
    protocol = _CappedBody(limit, finished)
    response.deliverBody(protocol)
    return finished


@implementer(IAgentEndpointFactory)
class KeptEndpoints:
    """The endpoints an `Agent` connects with, as its own factory makes them (TCP for
    http, TLS over TCP for https), each made once per (scheme, host, port) and kept: the
    Agent's own factory makes the endpoint, and for https a TLS connection creator, on
    every request, even one that goes over a pooled connection."""

    def __init__(self, reactor: Any, policy: Any) -> None:
        self._reactor = reactor
        self._policy = policy  # an IPolicyForHTTPS
        self._kept: dict[tuple[bytes, bytes, int], Any] = {}

    def endpointForURI(self, uri: URI) -> Any:  # noqa: N802 (Twisted's)
        key = (uri.scheme, uri.host, uri.port)
        endpoint: Any = self._kept.get(key)
        if endpoint is None:
            if uri.scheme not in (b"http", b"https"):
                raise SchemeNotSupported(f"Unsupported scheme: {uri.scheme!r}")
            endpoint = HostnameEndpoint(self._reactor, uri.host.decode("ascii"), uri.port)
            if uri.scheme == b"https":
                endpoint = wrapClientTLS(self._policy.creatorForNetloc(uri.host, uri.port),
                                         endpoint)
            self._kept[key] = endpoint
        return endpoint


@implementer(IPolicyForHTTPS)
class AnyCertificate:
    """The HTTPS policy of `tls_verify = false`: any certificate is accepted."""

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        return ssl.CertificateOptions(verify=False)


KIND = WebhookKind()

__all__ = ["KIND", "MAX_ERROR_BODY", "WebhookKind", "WebhookSettings", "WebhookTarget",
           "adhoc_settings", "check_url", "encoded_url", "read_capped",
           "with_default_timeout"]
