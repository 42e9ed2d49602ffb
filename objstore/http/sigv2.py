"""AWS Signature Version 2 for S3 (HMAC-SHA1, "HmacV1"), what awscli 1.x's `s3 presign`
and older SDKs and tools still produce: the ``Authorization: AWS AKID:signature`` header
and presigned URLs (``AWSAccessKeyId``, ``Signature``, ``Expires``).

`parse_auth_v2` reads what a request claims without any secret; `verify_v2` checks it
against the secret key: the clock (Date / x-amz-date within 15 minutes) or the presigned
expiry, then the signature of the string to sign computed as AWS documents it (verb,
Content-MD5, Content-Type, Date or Expires, the canonicalised x-amz-* headers, the resource
with its signed sub-resources), compared in constant time.

SigV2 signs no body hash and no Host: what it covers is the request line's resource, the
sub-resources listed in `SIGNED_SUBRESOURCES` and the headers above. Every x-amz-* header
present is part of the string to sign by construction, so none can be added by whoever
replays the request.

Pure functions only; never I/O, Twisted or logging, and never a secret in a message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import unquote

from objstore.http.sigv4.canonical import (
    MAX_CLOCK_SKEW,
    RequestView,
    SigV4Error,
    as_utc,
    aws_uri_path,
    parse_amz_date,
    wire,
)

SCHEME = "AWS"
# The query parameters that are part of the resource a SigV2 signature covers: botocore's
# HmacV1Auth.QSAOfInterest together with MinIO's list (encryption, legal-hold, retention),
# so that both kinds of client verify. Other parameters are not signed in SigV2.
SIGNED_SUBRESOURCES = frozenset({
    "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete", "encryption",
    "inventory", "legal-hold", "lifecycle", "location", "logging", "metrics", "notification",
    "object-lock", "partNumber", "policy", "replication", "requestPayment",
    "response-cache-control", "response-content-disposition", "response-content-encoding",
    "response-content-language", "response-content-type", "response-expires", "restore",
    "retention", "select", "select-type", "storageClass", "tagging", "torrent", "uploadId",
    "uploads", "versionId", "versioning", "versions", "website",
})
_PRESIGN_PARAMS = ("AWSAccessKeyId", "Signature", "Expires")
_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your key and signing method."
)


@dataclass(frozen=True)
class AuthV2:
    """What a SigV2 request claims, parsed without any secret."""

    access_key: str
    signature: bytes  # the decoded HMAC-SHA1 (20 bytes)
    presigned: bool
    # Header auth: when the request was made (Date or x-amz-date). Presigned: None.
    request_time: datetime | None
    # Presigned: the Expires parameter as sent (the string to sign's date line) and read.
    expires_text: str | None
    expires_at: datetime | None


def is_v2(req: RequestView) -> bool:
    """Whether the request claims SigV2 (the header scheme "AWS" or the query's
    AWSAccessKeyId / Signature without SigV4's X-Amz-Algorithm)."""
    authorization = req.headers.get("authorization")
    if authorization is not None:
        return authorization.strip().partition(" ")[0] == SCHEME
    names = {key for key, _ in _raw_pairs(req.raw_query)}
    return ("AWSAccessKeyId" in names or "Signature" in names) and not (
        names & {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"})


def parse_auth_v2(req: RequestView) -> AuthV2:
    """The SigV2 claims of a request that `is_v2`; SigV4Error for a malformed one."""
    authorization = req.headers.get("authorization")
    if authorization is not None:
        names = {key for key, _ in _raw_pairs(req.raw_query)}
        if names & {"AWSAccessKeyId", "Signature", "X-Amz-Signature", "X-Amz-Algorithm"}:
            raise SigV4Error("InvalidArgument", "Only one auth mechanism allowed; only the "
                             "X-Amz-Algorithm query parameter, Signature query string "
                             "parameter or the Authorization header should be specified")
        return _parse_header(authorization, req.headers)
    return _parse_query(req.raw_query)


def _parse_header(authorization: str, headers: Mapping[str, str]) -> AuthV2:
    _, _, credential = authorization.strip().partition(" ")
    access_key, sep, signature = credential.strip().rpartition(":")
    if not sep or not access_key or not signature:
        raise SigV4Error("InvalidArgument", "AWS authorization header is invalid.  "
                                            "Expected AwsAccessKeyId:signature")
    return AuthV2(_access_key(access_key), _signature(signature), False,
                  _request_time(headers), None, None)


def _parse_query(raw_query: str) -> AuthV2:
    params: dict[str, list[str]] = {}
    for key, value in _raw_pairs(raw_query):
        if key in _PRESIGN_PARAMS:
            params.setdefault(key, []).append(unquote(value))
    if any(len(params.get(name, ())) != 1 for name in _PRESIGN_PARAMS):
        raise SigV4Error("AccessDenied", "Query-string authentication requires the Signature, "
                                         "Expires and AWSAccessKeyId parameters")
    expires_text = params["Expires"][0]
    if not (expires_text.isascii() and expires_text.isdigit()) or len(expires_text) > 12:
        raise SigV4Error("AccessDenied", "Invalid date (should be seconds since epoch): "
                                         f"{expires_text[:32]}")
    expires_at = datetime.fromtimestamp(int(expires_text), UTC)
    return AuthV2(_access_key(params["AWSAccessKeyId"][0]), _signature(params["Signature"][0]),
                  True, None, expires_text, expires_at)


def _access_key(value: str) -> str:
    if not (value.isascii() and value.isprintable()) or " " in value:
        raise SigV4Error("InvalidAccessKeyId", "The AWS access key Id you provided does not "
                                               "exist in our records.")
    return value


def _signature(value: str) -> bytes:
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) != hashlib.sha1().digest_size:
        raise SigV4Error("SignatureDoesNotMatch", _SIGNATURE_MISMATCH)
    return decoded


def _request_time(headers: Mapping[str, str]) -> datetime:
    refused = SigV4Error("AccessDenied", "AWS authentication requires a valid Date or "
                                         "x-amz-date header")
    text = headers.get("x-amz-date", headers.get("date"))
    if text is None:
        raise refused
    moment = parse_amz_date(text.strip())
    if moment is not None:
        return moment
    try:
        return as_utc(parsedate_to_datetime(text.strip()))
    except (TypeError, ValueError, IndexError):
        raise refused from None


def check_time_v2(auth: AuthV2, now: datetime) -> None:
    """The replay window of a header-signed request, the expiry of a presigned one."""
    now = as_utc(now)
    if auth.presigned:
        assert auth.expires_at is not None
        if now > auth.expires_at:
            raise SigV4Error("AccessDenied", "Request has expired")
        return
    assert auth.request_time is not None
    if abs(now - auth.request_time) > MAX_CLOCK_SKEW:
        raise SigV4Error("RequestTimeTooSkewed", "The difference between the request time "
                                                 "and the current time is too large.")


def verify_v2(auth: AuthV2, req: RequestView, secret_key: str, now: datetime,
              vhost_bucket: str | None = None) -> None:
    """Check every claim of `auth` about `req`; SigV4Error (its codes are S3's) if one
    fails. `vhost_bucket`: the bucket a virtual-host request named in its Host."""
    check_time_v2(auth, now)
    verify_signature_v2(auth, req, secret_key, vhost_bucket)


def verify_signature_v2(auth: AuthV2, req: RequestView, secret_key: str,
                        vhost_bucket: str | None = None) -> None:
    key = secret_key.encode("utf-8")
    for candidate in strings_to_sign(auth, req, vhost_bucket):
        expected = hmac.new(key, candidate, hashlib.sha1).digest()
        if hmac.compare_digest(expected, auth.signature):
            return
    raise SigV4Error("SignatureDoesNotMatch", _SIGNATURE_MISMATCH)


def sign_v2(string_to_sign: bytes, secret_key: str) -> str:
    """The base64 signature of a string to sign (for tests and our own tools)."""
    digest = hmac.new(secret_key.encode("utf-8"), string_to_sign, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def strings_to_sign(auth: AuthV2, req: RequestView, vhost_bucket: str | None = None
                    ) -> Iterator[bytes]:
    """The strings to sign the request may have been signed as: the resource as sent and
    as AWS encodes it (both decode to the same key), and, for a header-signed request with
    x-amz-date, the date line empty (AWS's rule) or holding the Date header (what some
    clients sign). None of the alternatives lets a signature cover another request."""
    amz_headers = canonical_amz_headers(req, presigned=auth.presigned)
    resources = canonical_resources(req, vhost_bucket)
    for date_line in _date_lines(auth, req.headers):
        lines = [
            req.method.upper(),
            _standard_header(req, "content-md5", auth.presigned),
            _standard_header(req, "content-type", auth.presigned),
            date_line,
        ]
        head = wire("\n".join(lines) + "\n") + amz_headers
        for resource in resources:
            yield head + resource


def _date_lines(auth: AuthV2, headers: Mapping[str, str]) -> list[str]:
    if auth.presigned:
        assert auth.expires_text is not None
        return [auth.expires_text]
    date = headers.get("date", "").strip()
    if "x-amz-date" in headers:
        return [""] if not date else ["", date]
    return [date]


def _standard_header(req: RequestView, name: str, presigned: bool) -> str:
    value = req.headers.get(name)
    if value is None and presigned:  # botocore moves them into the query when presigning
        value = _query_value(req.raw_query, name)
    return (value or "").strip()


def _query_value(raw_query: str, name: str) -> str | None:
    for key, value in _raw_pairs(raw_query):
        if key.lower() == name:
            return unquote(value)
    return None


def canonical_amz_headers(req: RequestView, *, presigned: bool) -> bytes:
    """The x-amz-* headers, lower-case names sorted, each "name:value" on its own line
    (the request view has joined repeated values with ","); a presigned URL's x-amz-*
    query parameters count as headers, as botocore signs them."""
    found: dict[str, list[str]] = {}
    for name, value in req.headers.items():
        if name.startswith("x-amz-"):
            found.setdefault(name, []).append(value.strip())
    if presigned:
        for key, value in _raw_pairs(req.raw_query):
            lowered = unquote(key).lower()
            if lowered.startswith("x-amz-") and lowered not in found:
                found[lowered] = [unquote(value).strip()]
    return b"".join(wire(f"{name}:{','.join(found[name])}\n") for name in sorted(found))


def canonical_resources(req: RequestView, vhost_bucket: str | None = None) -> list[bytes]:
    """The resource line: "/bucket/key" (with a virtual-host request's bucket first), then
    the signed sub-resources sorted by name, their values decoded."""
    raw_path = req.raw_path or "/"
    prefix = "/" + vhost_bucket if vhost_bucket else ""
    paths: list[bytes] = []
    for path in (prefix + raw_path, prefix + aws_uri_path(raw_path)):
        # A bucket's resource ends in "/" (botocore signs "/bucket/" for "PUT /bucket").
        bucket_only = path.count("/") == 1 and len(path) > 1
        for candidate in (path, path + "/") if bucket_only else (path,):
            if wire(candidate) not in paths:
                paths.append(wire(candidate))
    signed = []
    for part in req.raw_query.split("&"):
        key, sep, value = part.partition("=")
        if unquote(key) in SIGNED_SUBRESOURCES:
            # "?acl" and "?acl=" sign differently ("acl" and "acl="), as clients sign them.
            signed.append((unquote(key), sep + unquote(value)))
    signed.sort(key=lambda item: item[0])
    query = "&".join(key + rest for key, rest in signed)
    suffix = wire("?" + query) if query else b""
    return [path + suffix for path in paths]


def _raw_pairs(raw_query: str) -> list[tuple[str, str]]:
    """The query's (name, raw value) pairs; names decoded, values as sent."""
    pairs = []
    for part in raw_query.split("&"):
        if part:
            key, _, value = part.partition("=")
            pairs.append((unquote(key), value))
    return pairs
