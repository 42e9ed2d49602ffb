"""The `webhook` target kind: an HTTP POST of the event document (application/json) to a
URL, through treq on the reactor. A 2xx answer is a delivery; any other status, a refused
or reset connection, a TLS failure or no answer within the timeout is a DeliveryError
(retried by the caller).

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

import treq
from treq.client import HTTPClient
from twisted.internet import ssl
from twisted.internet.defer import CancelledError
from twisted.internet.error import TimeoutError as ConnectTimeout
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IAgent, IPolicyForHTTPS
from zope.interface import implementer

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

    def __init__(self, settings: WebhookSettings) -> None:
        self.name = settings.name
        self._settings = settings
        self._client: Any = None
        self._pool: Any = None

    def _http(self) -> Any:
        if self._client is None:
            from twisted.internet import reactor  # the running one (never installed here)

            self._pool = HTTPConnectionPool(reactor, persistent=True)
            self._pool.maxPersistentPerHost = 2
            if self._settings.tls_verify:
                agent = Agent(reactor, pool=self._pool)
            else:
                agent = Agent(reactor, contextFactory=AnyCertificate(), pool=self._pool)
            self._client = HTTPClient(cast(IAgent, agent))
        return self._client

    async def deliver(self, event: Event) -> None:
        headers = {b"Content-Type": [b"application/json"],
                   b"User-Agent": [b"objstore-notifications"]}
        if self._settings.auth_token:
            headers[b"Authorization"] = [f"Bearer {self._settings.auth_token}".encode()]
        timeout = self._settings.timeout_seconds or 10.0
        try:
            response = await self._http().post(self._settings.url, data=event.body,
                                               headers=headers, timeout=timeout)
            body = await treq.content(response)
        except (CancelledError, ConnectTimeout):
            raise DeliveryError(f"no answer within {timeout:g} s") from None
        except Exception as error:  # connection refused, reset, TLS, DNS
            raise DeliveryError(self._scrub(f"{type(error).__name__}: {error}")) from None
        if not 200 <= response.code < 300:
            text = body[:MAX_ERROR_BODY].decode("utf-8", "replace")
            raise DeliveryError(self._scrub(f"HTTP {response.code}: {text}"))

    def _scrub(self, message: str) -> str:
        token = self._settings.auth_token
        return message.replace(token, "***") if token else message

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.closeCachedConnections()


@implementer(IPolicyForHTTPS)
class AnyCertificate:
    """The HTTPS policy of `tls_verify = false`: any certificate is accepted."""

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        return ssl.CertificateOptions(verify=False)


KIND = WebhookKind()

__all__ = ["KIND", "WebhookKind", "WebhookSettings", "WebhookTarget", "adhoc_settings",
           "check_url", "with_default_timeout"]
