"""The `objstore` command's client of the admin API: where to connect and with which keys,
and SigV4-signed requests over the standard library's http.client.

Connection settings come, for each value separately, from the first of: command-line
flags (--endpoint, --access-key, --secret-key, --region), the environment
(OBJSTORE_ENDPOINT, OBJSTORE_ACCESS_KEY or AWS_ACCESS_KEY_ID, OBJSTORE_SECRET_KEY or
AWS_SECRET_ACCESS_KEY, OBJSTORE_REGION), and a profile of the profile file
(`$XDG_CONFIG_HOME/objstore/profile.toml`, by default `~/.config/objstore/profile.toml`):

    [profile.default]
    endpoint = "https://objstore.example.net:9000"
    access_key = "..."
    secret_key = "..."
    region = "us-east-1"          # optional, the default
    ca_bundle = "/etc/ssl/ca.pem" # optional: verify TLS against this CA

Without an endpoint from any of them the command talks to http://127.0.0.1:9000 (the
daemon's default listener). The profile is --profile, else OBJSTORE_PROFILE, else
`default`. Requests are signed exactly
like S3 requests (service `s3`). This module imports no Twisted, and never prints, logs or
puts a secret key in an exception.
"""

from __future__ import annotations

import datetime
import hashlib
import http.client
import json
import ssl
import stat
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode, urlsplit

from objstore.http import sigv4
from objstore.json_input import parse_json

DEFAULT_REGION = "us-east-1"
DEFAULT_PROFILE = "default"
TIMEOUT_SECONDS = 60.0
STREAM_CHUNK_BYTES = 256 * 1024
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

# setting -> environment variables, first found wins
ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "endpoint": ("OBJSTORE_ENDPOINT",),
    "access_key": ("OBJSTORE_ACCESS_KEY", "AWS_ACCESS_KEY_ID"),
    "secret_key": ("OBJSTORE_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"),
    "region": ("OBJSTORE_REGION",),
    "ca_bundle": ("OBJSTORE_CA_BUNDLE",),
}


class UsageProblem(Exception):
    """Missing or contradictory connection settings (exit status 2)."""


class AdminApiError(Exception):
    """The server answered with an error: its JSON {error, message} (exit status 1)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class ConnectionProblem(Exception):
    """The server could not be reached or the connection broke (exit status 1)."""


@dataclass(frozen=True)
class ConnectionSettings:
    endpoint: str  # scheme://host[:port]
    access_key: str
    secret_key: str
    region: str = DEFAULT_REGION
    ca_bundle: str | None = None

    def __repr__(self) -> str:  # never show the secret
        return f"ConnectionSettings({self.endpoint!r}, {self.access_key!r}, region={self.region!r})"


def profile_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "objstore" / "profile.toml"


def load_profile(path: Path, name: str, *, required: bool,
                 warn: Callable[[str], None]) -> dict[str, str]:
    """The [profile.NAME] table of the profile file ({} when there is none and none was
    asked for by name)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise UsageProblem(f"profile {name!r} asked for, but {path} does not exist") from None
        return {}
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror}") from None
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(f"{path} holds secret keys and is readable by others; chmod 600 it")
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"{path}: {exc}") from None
    profile = document.get("profile", {}).get(name)
    if profile is None:
        if required:
            raise UsageProblem(f"{path} has no [profile.{name}] section")
        return {}
    if not isinstance(profile, dict) or not all(isinstance(v, str) for v in profile.values()):
        raise UsageProblem(f"{path}: [profile.{name}] must hold string values")
    return dict(profile)


DEFAULT_ENDPOINT = "http://127.0.0.1:9000"


def resolve_settings(
    flags: Mapping[str, str | None],
    environ: Mapping[str, str],
    *,
    profile: str | None = None,
    warn: Callable[[str], None] = lambda _message: None,
) -> ConnectionSettings:
    """The connection settings from flags, then environment, then the profile file."""
    name = profile or environ.get("OBJSTORE_PROFILE") or DEFAULT_PROFILE
    required = bool(profile or environ.get("OBJSTORE_PROFILE"))
    from_file = load_profile(profile_path(environ), name, required=required, warn=warn)
    values: dict[str, str] = {}
    for setting, variables in ENVIRONMENT.items():
        found = flags.get(setting) or next(
            (environ[v] for v in variables if environ.get(v)), None) or from_file.get(setting)
        if found:
            values[setting] = found
    values.setdefault("endpoint", DEFAULT_ENDPOINT)
    missing = [s for s in ("access_key", "secret_key") if s not in values]
    if missing:
        raise UsageProblem(
            f"no {', '.join(missing)}: give --access-key/--secret-key, set "
            "OBJSTORE_ACCESS_KEY/OBJSTORE_SECRET_KEY, or write a profile in "
            f"{profile_path(environ)}")
    return ConnectionSettings(
        endpoint=base_url(values["endpoint"]), access_key=values["access_key"],
        secret_key=values["secret_key"], region=values.get("region", DEFAULT_REGION),
        ca_bundle=values.get("ca_bundle"),
    )


def base_url(endpoint: str) -> str:
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageProblem(f"the endpoint must be an http:// or https:// URL, not {endpoint!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UsageProblem("the endpoint must be scheme://host[:port] without a path")
    return f"{parts.scheme}://{parts.netloc}"


def segment(value: str) -> str:
    """One path segment, percent-encoded (ids, names, access keys)."""
    return quote(value, safe="")


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return parse_json(self.body) if self.body else None


class AdminClient:
    def __init__(self, settings: ConnectionSettings, *, timeout: float = TIMEOUT_SECONDS
                 ) -> None:
        self.settings = settings
        self._timeout = timeout
        parts = urlsplit(settings.endpoint)
        self._secure = parts.scheme == "https"
        self._netloc = parts.netloc
        self._host = parts.hostname or ""
        self._port = parts.port

    # -- requests ----------------------------------------------------------------------
    def call(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
             body: Any = None, raw: bytes | None = None,
             sent: Callable[[int], None] | None = None) -> Any:
        """The decoded JSON answer (None for an empty one); AdminApiError for >= 400.
        `sent(n)` is called per chunk of the request body on the wire."""
        reply = self.request(method, path, query=query, body=body, raw=raw, sent=sent)
        return reply.json()

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                body: Any = None, raw: bytes | None = None,
                sent: Callable[[int], None] | None = None) -> Reply:
        connection, response = self._send(method, path, query, body, raw, sent)
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ConnectionProblem(f"reading the answer failed: {exc}") from None
        finally:
            connection.close()
        reply = Reply(response.status, dict(response.getheaders()), data)
        if reply.status >= 400:
            raise api_error(reply.status, response.reason, data)
        return reply

    def download(self, method: str, path: str, body: Any, sink: BinaryIO,
                 progress: Callable[[int], None], *, query: Mapping[str, Any] | None = None,
                 size: Callable[[int | None], None] | None = None) -> Mapping[str, str]:
        """Stream the answer into `sink`, calling `size(Content-Length or None)` once
        before the body and `progress(n)` per chunk; the headers."""
        connection, response = self._send(method, path, query, body, None)
        try:
            if response.status >= 400:
                raise api_error(response.status, response.reason, response.read())
            if size is not None:
                length = response.getheader("content-length")
                size(int(length) if length and length.isdigit() else None)
            while chunk := response.read(STREAM_CHUNK_BYTES):
                sink.write(chunk)
                progress(len(chunk))
            return dict(response.getheaders())
        except (OSError, http.client.HTTPException) as exc:
            raise ConnectionProblem(f"the download broke off: {exc!r}") from None
        finally:
            connection.close()

    # -- plumbing ----------------------------------------------------------------------
    def _send(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
              raw: bytes | None, sent: Callable[[int], None] | None = None
              ) -> tuple[http.client.HTTPConnection, Any]:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        target = "/admin" + path
        pairs = {k: str(v) for k, v in (query or {}).items() if v is not None}
        if pairs:
            target += "?" + urlencode(pairs, quote_via=quote)
        headers = self._signed_headers(method, target, data)
        payload: bytes | Iterator[bytes] | None = data or None
        if data and sent is not None:
            headers["content-length"] = str(len(data))
            payload = counted_chunks(data, sent)
        connection = self._connection()
        try:
            connection.request(method, target, body=payload, headers=headers)
            return connection, connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise ConnectionProblem(
                f"cannot reach {self.settings.endpoint}: {describe(exc)}") from None

    def _signed_headers(self, method: str, target: str, data: bytes) -> dict[str, str]:
        headers = {"host": self._netloc, "user-agent": "objstore-cli"}
        if data:
            headers["content-type"] = "application/json"
        payload = hashlib.sha256(data).hexdigest() if data else _EMPTY_SHA256
        settings = self.settings
        headers.update(sigv4.sign_headers(
            method, settings.endpoint + target, headers, payload, settings.access_key,
            settings.secret_key, settings.region, datetime.datetime.now(datetime.UTC)))
        return headers

    def _connection(self) -> http.client.HTTPConnection:
        if not self._secure:
            return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        context = ssl.create_default_context(cafile=self.settings.ca_bundle)
        return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout,
                                           context=context)


def counted_chunks(data: bytes, sent: Callable[[int], None]) -> Iterator[bytes]:
    """`data` in STREAM_CHUNK_BYTES pieces, calling `sent(n)` as each is handed over."""
    for start in range(0, len(data), STREAM_CHUNK_BYTES):
        chunk = data[start:start + STREAM_CHUNK_BYTES]
        yield chunk
        sent(len(chunk))


def api_error(status: int, reason: str, data: bytes) -> AdminApiError:
    """The admin JSON error of an answer, or a stand-in when it is something else (a
    proxy's page, an S3 XML error)."""
    try:
        document = parse_json(data)
        return AdminApiError(status, str(document["error"]), str(document["message"]))
    except (ValueError, KeyError, TypeError):
        text = " ".join(data.decode("utf-8", "replace").split())[:200]
        return AdminApiError(status, f"HTTP{status}", f"{reason} {text}".strip())


def describe(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError):
        return f"TLS: {error.reason or error}"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
