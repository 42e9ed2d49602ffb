"""The `webhook` target kind: an HTTP POST of the event document (application/json) to a
URL, on the reactor. A 2xx answer is a delivery; any other status, a refused or reset
connection, a TLS failure or no complete answer within the timeout (the answer's body
included) is a DeliveryError (retried by the caller).

The POST goes through the target's own HTTP/1.1 client (http1_client.py, http1_answer.py):
persistent connections to the URL's origin (at most MAX_CONNECTIONS), the request built
once per target but for its length and written with the body in one buffer, the answer
parsed for its status, its framing and at most MAX_ERROR_BODY bytes of its body (for the
error message; the rest read and dropped). Twisted's `Agent` and its `HTTP11ClientProtocol`
cost about half of a delivery's CPU (bench.notify --profile). Redirects are not followed
(a 3xx is a failed attempt); interim 1xx answers are skipped; an answer the client cannot
read, or a connection closed before the answer is complete, is a failed attempt.
TLS: the endpoint is TLS over TCP with Twisted's browser-like policy (the certificate is
checked against the system roots for the URL's host name), made once per target.

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
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.web.client import BrowserLikePolicyForHTTPS
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from objstore.notify.targets.base import DeliveryError, Event, Target, TargetConfigError
from objstore.notify.targets.http1_answer import AnswerError, request, request_head
from objstore.notify.targets.http1_client import Http1Client

KEYS = ("kind", "url", "auth_token", "tls_verify", "timeout_seconds")
MAX_ERROR_BODY = 200
MAX_CONNECTIONS = 2  # per target (deliveries are one at a time; test-webhook beside them)


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


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a webhook URL's requests go: scheme, host and port to connect to, the Host
    header and the request target (path and query)."""

    tls: bool
    host: str  # a name or an IP address (an IPv6 one without brackets)
    port: int
    host_header: str
    target: str


def origin_of(url: bytes) -> Origin:
    """The origin of an encoded URL (`encoded_url`); ValueError for one without a host."""
    parts = urlsplit(url.decode("ascii"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http:// or https:// URL with a host")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(tls, parts.hostname, port, parts.netloc.rpartition("@")[2], target)


class WebhookTarget:
    kind = "webhook"

    def __init__(self, settings: WebhookSettings, *, endpoint: Any = None,
                 clock: Any = None) -> None:
        """`endpoint` (an IStreamClientEndpoint) and `clock` (an IReactorTime): the
        tests' (default: TCP or TLS to the URL's origin, and the running reactor, made
        on first use)."""
        self.name = settings.name
        self._settings = settings
        self._endpoint: Any = endpoint
        self._clock: Any = clock
        self._client: Http1Client | None = None
        self._problem = ""
        self._origin: Origin | None = None
        self._head = b""
        token = settings.auth_token
        try:
            self._origin = origin_of(encoded_url(settings.url))
        except ValueError as problem:  # delivery fails with it, as it did per POST
            self._problem = f"the URL cannot be sent: {problem}"
        if any(c in token for c in "\r\n\0"):  # test-webhook's token is not checked
            self._problem = "the auth_token holds a line break or a NUL: it is never sent"
        if self._origin is not None and not self._problem:
            fields = [("Content-Type", "application/json"),
                      ("User-Agent", "objstore-notifications")]
            if token:
                fields.append(("Authorization", f"Bearer {token}"))
            self._head = request_head("POST", self._origin.target, self._origin.host_header,
                                      fields)

    def _http(self) -> tuple[Http1Client, Any]:
        if self._client is None or self._clock is None:
            from twisted.internet import reactor  # the running one (never installed here)

            if self._clock is None:
                self._clock = reactor
            if self._client is None:
                self._client = Http1Client(self._endpoint or self._make_endpoint(reactor),
                                           MAX_ERROR_BODY, MAX_CONNECTIONS)
        return self._client, self._clock

    def _make_endpoint(self, reactor: Any) -> Any:
        origin = self._origin
        assert origin is not None
        endpoint: Any = HostnameEndpoint(reactor, origin.host, origin.port)
        if origin.tls:
            policy = (BrowserLikePolicyForHTTPS() if self._settings.tls_verify
                      else AnyCertificate())
            endpoint = wrapClientTLS(policy.creatorForNetloc(origin.host.encode("ascii"),
                                                             origin.port), endpoint)
        return endpoint

    async def deliver(self, event: Event) -> None:
        if self._problem:
            raise DeliveryError(self._problem)
        client, clock = self._http()
        timeout = self._settings.timeout_seconds or 10.0
        exchange = Deferred.fromCoroutine(client.exchange(request(self._head, event.body)))
        timer = clock.callLater(timeout, exchange.cancel)
        try:
            answer = await exchange
        except CancelledError:
            raise DeliveryError(f"no answer within {timeout:g} s") from None
        except AnswerError as error:
            raise DeliveryError(self._scrub(str(error))) from None
        except Exception as error:  # connection refused, reset, TLS, DNS
            raise DeliveryError(self._scrub(f"{type(error).__name__}: {error}")) from None
        finally:
            if timer.active():
                timer.cancel()
        if not 200 <= answer.code < 300:
            text = answer.body.decode("utf-8", "replace")
            raise DeliveryError(self._scrub(f"HTTP {answer.code}: {text}"))

    def _scrub(self, message: str) -> str:
        token = self._settings.auth_token
        return message.replace(token, "***") if token else message

    async def close(self) -> None:
        if self._client is not None:
            self._client.close()


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


@implementer(IPolicyForHTTPS)
class AnyCertificate:
    """The HTTPS policy of `tls_verify = false`: any certificate is accepted."""

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        return ssl.CertificateOptions(verify=False)


KIND = WebhookKind()

__all__ = ["KIND", "MAX_CONNECTIONS", "MAX_ERROR_BODY", "AnyCertificate", "Origin",
           "WebhookKind", "WebhookSettings", "WebhookTarget", "adhoc_settings", "check_url",
           "encoded_url", "origin_of", "with_default_timeout"]
