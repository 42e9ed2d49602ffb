"""Signing requests and presigning URLs for our own tools (the admin CLI, the presign
endpoint, benchmarks and tests), computed the way `verify` checks them.

Pure; never I/O, Twisted or logging.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

from objstore.http.sigv4.canonical import (
    ALGORITHM,
    MAX_PRESIGN_EXPIRES,
    SERVICE,
    UNSIGNED_PAYLOAD,
    aws_uri_path,
    canonical_query_string,
    canonical_request_bytes,
    credential_scope,
    derive_signing_key,
    format_amz_date,
    hmac_sha256,
    string_to_sign,
    trimall,
    uri_encode,
)

# Headers our signer never signs: hop-by-hop or rewritten by proxies and HTTP libraries.
_UNSIGNABLE_HEADERS = frozenset(
    {"authorization", "connection", "expect", "keep-alive", "proxy-authorization", "te",
     "trailer", "transfer-encoding", "upgrade", "user-agent", "x-amzn-trace-id"}
)


def _host_from_url(url: str) -> str:
    # What HTTP clients send as Host: lower-case name, port only when not the default.
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(parts.scheme)
    if parts.port is not None and parts.port != default:
        host = f"{host}:{parts.port}"
    return host


def _sign(
    key: bytes, amz_date: str, scope: str, method: str, url: str,
    headers: Mapping[str, str], payload_hash: str, *, presigned: bool,
) -> tuple[str, str]:
    """(signature, signed-headers list) of a request, the way `verify` checks it."""
    parts = urlsplit(url)
    names = sorted(headers)
    canonical = canonical_request_bytes(
        method.upper(),
        aws_uri_path(parts.path).encode("ascii"),
        canonical_query_string(parts.query, exclude="X-Amz-Signature" if presigned else None),
        [(name, trimall(headers[name].encode("utf-8"))) for name in names],
        payload_hash,
    )
    return hmac_sha256(key, string_to_sign(amz_date, scope, canonical)).hex(), ";".join(names)


def sign_headers(
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload_sha256: str,
    access_key: str,
    secret_key: str,
    region: str,
    now: datetime,
    service: str = SERVICE,
) -> dict[str, str]:
    """The headers to add to sign a request: Authorization, x-amz-date, x-amz-content-sha256
    (and host when ``headers`` has none). ``url`` must be percent-encoded as it will be sent;
    every header given is signed except hop-by-hop ones and User-Agent. Non-ASCII header
    values must be sent as UTF-8."""
    amz_date = format_amz_date(now)
    scope_date = amz_date[:8]
    lower = {name.lower(): value for name, value in headers.items()}
    added: dict[str, str] = {}
    if "host" not in lower:
        added["host"] = _host_from_url(url)
    added["x-amz-date"] = amz_date
    added["x-amz-content-sha256"] = payload_sha256
    to_sign = {
        name: value
        for name, value in {**lower, **added}.items()
        if name not in _UNSIGNABLE_HEADERS
    }
    key = derive_signing_key(secret_key, scope_date, region, service)
    scope = credential_scope(scope_date, region, service)
    signature, signed = _sign(
        key, amz_date, scope, method, url, to_sign, payload_sha256, presigned=False
    )
    added["Authorization"] = (
        f"{ALGORITHM} Credential={access_key}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature}"
    )
    return added


def presign_url(
    method: str,
    url: str,
    access_key: str,
    secret_key: str,
    region: str,
    now: datetime,
    expires_seconds: int,
    service: str = SERVICE,
) -> str:
    """A presigned URL (only the host header signed, payload UNSIGNED-PAYLOAD) valid for
    ``expires_seconds`` (1 to 604800) from ``now``."""
    if not 1 <= expires_seconds <= MAX_PRESIGN_EXPIRES:
        raise ValueError(f"expires_seconds must be within 1..{MAX_PRESIGN_EXPIRES}")
    amz_date = format_amz_date(now)
    scope_date = amz_date[:8]
    scope = credential_scope(scope_date, region, service)
    auth_params = (
        ("X-Amz-Algorithm", ALGORITHM),
        ("X-Amz-Credential", f"{access_key}/{scope}"),
        ("X-Amz-Date", amz_date),
        ("X-Amz-Expires", str(expires_seconds)),
        ("X-Amz-SignedHeaders", "host"),
    )
    parts = urlsplit(url)
    encoded = "&".join(f"{name}={uri_encode(value)}" for name, value in auth_params)
    query = f"{parts.query}&{encoded}" if parts.query else encoded
    unsigned_url = urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    key = derive_signing_key(secret_key, scope_date, region, service)
    host = {"host": _host_from_url(url)}
    signature, _ = _sign(
        key, amz_date, scope, method, unsigned_url, host, UNSIGNED_PAYLOAD, presigned=True
    )
    return urlunsplit(
        (parts.scheme, parts.netloc, parts.path, f"{query}&X-Amz-Signature={signature}",
         parts.fragment)
    )
