"""Verification of a request's SigV4 claims, from the ``Authorization`` header or from a
presigned URL's query: `parse_auth` reads what the client claims without any secret;
`verify` checks it against the secret key (credential scope, clock skew or presigned
expiry, which headers are signed, the signature of the canonical request computed exactly
as AWS does for S3) and returns the `SigningContext` the body's chunk checks need.

Pure functions only; never I/O, Twisted or logging, and never a secret in a message.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import lru_cache

from objstore.http.client_bytes import decimal
from objstore.http.sigv4.canonical import (
    ALGORITHM,
    CACHED_TEXT_CHARS,
    HEX64,
    MAX_CLOCK_SKEW,
    MAX_PRESIGN_EXPIRES,
    SERVICE,
    STREAMING_PAYLOADS,
    TERMINATOR,
    UNSIGNED_PAYLOAD,
    RequestView,
    SigningContext,
    SigV4Error,
    as_utc,
    aws_uri_path,
    canonical_query_string,
    canonical_request_bytes,
    credential_scope,
    derive_signing_key,
    format_amz_date,
    hmac_sha256,
    parse_amz_date,
    payload_hash_is_hex,
    query_pairs,
    string_to_sign,
    trimall,
    wire,
)

_PRESIGN_PARAMS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)
_EXPIRES_TOO_LONG = "X-Amz-Expires must be less than a week (in seconds) that is 604800"
# x-amz-* headers whose value is already bound by the signature without being listed in
# SignedHeaders: the payload hash is the last line of the canonical request, the date is
# in the string to sign.
_BOUND_AMZ_HEADERS = frozenset({"x-amz-content-sha256", "x-amz-date"})
# The payload hash of a header-signed request without x-amz-content-sha256, where that is
# allowed (`parse_auth(..., payload_header_required=False)`): the SHA-256 of the body.
PAYLOAD_FROM_BODY = ""


@dataclass(frozen=True)
class AuthRequest:
    """What the client claims, parsed without any secret."""

    access_key: str
    amz_date: datetime
    amz_date_str: str
    scope_date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    payload_hash: str  # PAYLOAD_FROM_BODY: the server hashes the body it received
    presigned: bool
    expires_seconds: int | None

    @property
    def scope(self) -> str:
        return credential_scope(self.scope_date, self.region, self.service)

    @property
    def payload_from_body(self) -> bool:
        """The signature covers the SHA-256 of a body the client did not hash in a header:
        it can only be checked once the body has arrived."""
        return self.payload_hash == PAYLOAD_FROM_BODY


def _is_valid_payload_hash(value: str) -> bool:
    return value == UNSIGNED_PAYLOAD or value in STREAMING_PAYLOADS or payload_hash_is_hex(value)


def _uri_candidates(raw_path: str) -> list[bytes]:
    # The path exactly as sent is what SDKs sign (they encode once, the AWS way). A client
    # that sent a different but equivalent encoding (lower-case hex, "%7E", an unencoded
    # "!") signed the AWS encoding of the same decoded path: accept that too. Both decode
    # to the same key, so neither lets a signature cover another resource.
    raw = wire(raw_path or "/")
    canonical = aws_uri_path(raw_path).encode("ascii")
    return [raw] if raw == canonical else [raw, canonical]


def _header_value_candidates(value: str) -> list[bytes]:
    # Most clients sign the header bytes they send (UTF-8). Python's http.client sends a
    # str header as Latin-1 while botocore signs its UTF-8 encoding: accept that reading
    # of non-ASCII bytes as well.
    sent = trimall(wire(value))
    if sent.isascii():
        return [sent]
    return [sent, sent.decode("latin-1").encode("utf-8")]


def canonical_requests(auth: AuthRequest, req: RequestView) -> Iterator[bytes]:
    query = canonical_query_string(
        req.query, exclude="X-Amz-Signature" if auth.presigned else None
    )
    values = [_header_value_candidates(req.headers.get(name, "")) for name in auth.signed_headers]
    encodings = 2 if any(len(v) > 1 for v in values) else 1
    for uri in _uri_candidates(req.raw_path):
        for variant in range(encodings):
            headers = [
                (name, value[min(variant, len(value) - 1)])
                for name, value in zip(auth.signed_headers, values, strict=True)
            ]
            yield canonical_request_bytes(req.method, uri, query, headers, auth.payload_hash)


def _malformed(presigned: bool, message: str) -> SigV4Error:
    if presigned:
        return SigV4Error("AuthorizationQueryParametersError", message)
    return SigV4Error("AuthorizationHeaderMalformed", f"The authorization header is malformed; "
                                                      f"{message}")


def _sigv2_refused() -> SigV4Error:
    return SigV4Error(
        "InvalidRequest",
        "The authorization mechanism you have provided is not supported. "
        "Please use AWS4-HMAC-SHA256.",
    )


def parse_auth(req: RequestView, *, payload_header_required: bool = True
               ) -> AuthRequest | None:
    """The SigV4 claims of a request; None when it carries no authentication at all.

    Raises SigV4Error for a malformed claim, for SigV2, and for a header-signed request
    without ``x-amz-content-sha256`` when `payload_header_required`: like AWS, S3 requires
    that header (InvalidRequest "Missing required header for this request:
    x-amz-content-sha256"); every AWS SDK, botocore included, always sends it. Generic SigV4
    signers (the admin API's clients) do not: without the requirement, the payload hash is
    PAYLOAD_FROM_BODY.
    """
    params = _auth_params(req)
    authorization = req.headers.get("authorization")
    presigned = any(name in params for name in _PRESIGN_PARAMS)
    if authorization is not None and (presigned or "Signature" in params):
        raise SigV4Error(
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
            "Signature query string parameter or the Authorization header should be specified",
        )
    if authorization is not None:
        return _parse_header_auth(authorization, req.headers, payload_header_required)
    if presigned:
        return _parse_query_auth(params, req.headers)
    if "AWSAccessKeyId" in params or "Signature" in params:
        raise _sigv2_refused()
    return None


_AUTH_PARAMS = frozenset((*_PRESIGN_PARAMS, "AWSAccessKeyId", "Signature"))


def _auth_params(req: RequestView) -> dict[str, list[str]]:
    """Decoded values of the query parameters that carry authentication."""
    wanted = _AUTH_PARAMS
    found: dict[str, list[str]] = {}
    for key, value in query_pairs(req.query):
        name = key.decode("utf-8", "replace")
        if name in wanted or name.lower() == "x-amz-content-sha256":
            found.setdefault(name, []).append(value.decode("utf-8", "replace"))
    return found


def _parse_header_auth(authorization: str, headers: Mapping[str, str],
                       payload_header_required: bool) -> AuthRequest:
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme == "AWS":
        raise _sigv2_refused()
    if scheme != ALGORITHM:
        raise SigV4Error("InvalidArgument", "Unsupported Authorization Type")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or name in fields:
            raise _malformed(False, f"cannot parse component {part.strip()!r}")
        fields[name] = value.strip()
    missing = {"Credential", "SignedHeaders", "Signature"} - set(fields)
    if missing or len(fields) != 3:
        raise _malformed(False, "expecting Credential, SignedHeaders and Signature")
    access_key, scope_date, region, service = _parse_credential(fields["Credential"], False)
    amz_date_str, amz_date = _header_date(headers)
    payload_hash = headers.get("x-amz-content-sha256")
    if payload_hash is None and payload_header_required:
        raise SigV4Error(
            "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
        )
    if payload_hash is None:
        payload_hash = PAYLOAD_FROM_BODY
    else:
        _check_payload_hash(payload_hash.strip())
    return AuthRequest(
        access_key=access_key,
        amz_date=amz_date,
        amz_date_str=amz_date_str,
        scope_date=scope_date,
        region=region,
        service=service,
        signed_headers=_parse_signed_headers(fields["SignedHeaders"], False),
        signature=_parse_signature(fields["Signature"], False),
        payload_hash=payload_hash.strip(),
        presigned=False,
        expires_seconds=None,
    )


def _parse_query_auth(params: Mapping[str, list[str]], headers: Mapping[str, str]) -> AuthRequest:
    if any(len(params.get(name, ())) != 1 for name in _PRESIGN_PARAMS):
        raise _malformed(
            True,
            "Query-string authentication version 4 requires the X-Amz-Algorithm, "
            "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and "
            "X-Amz-Expires parameters.",
        )
    value = {name: params[name][0] for name in _PRESIGN_PARAMS}
    if value["X-Amz-Algorithm"] != ALGORITHM:
        raise _malformed(True, 'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"')
    access_key, scope_date, region, service = _parse_credential(value["X-Amz-Credential"], True)
    amz_date = parse_amz_date(value["X-Amz-Date"])
    if amz_date is None:
        raise _malformed(
            True, "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\""
        )
    expires_seconds = _expires_seconds(value["X-Amz-Expires"])
    return AuthRequest(
        access_key=access_key,
        amz_date=amz_date,
        amz_date_str=value["X-Amz-Date"],
        scope_date=scope_date,
        region=region,
        service=service,
        signed_headers=_parse_signed_headers(value["X-Amz-SignedHeaders"], True),
        signature=_parse_signature(value["X-Amz-Signature"], True),
        payload_hash=_presigned_payload_hash(params, headers),
        presigned=True,
        expires_seconds=expires_seconds,
    )


def _expires_seconds(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise _malformed(True, "X-Amz-Expires should be a number")
    seconds = decimal(text)
    if seconds is None:  # too many digits to be read: far more than the maximum
        raise _malformed(True, _EXPIRES_TOO_LONG)
    return seconds


def _presigned_payload_hash(params: Mapping[str, list[str]], headers: Mapping[str, str]) -> str:
    # A presigned URL signs "UNSIGNED-PAYLOAD" unless the client put a payload hash in the
    # query (signed as a parameter) or sent the header (botocore then signs its value).
    in_query = [v for name, values in params.items() if name.lower() == "x-amz-content-sha256"
                for v in values]
    in_header = headers.get("x-amz-content-sha256")
    claims = {v.strip() for v in in_query} | ({in_header.strip()} if in_header else set())
    if len(claims) > 1:
        raise SigV4Error("InvalidArgument", "Conflicting x-amz-content-sha256 values")
    if not claims:
        return UNSIGNED_PAYLOAD
    claim = claims.pop()
    _check_payload_hash(claim)
    return claim


def _check_payload_hash(value: str) -> None:
    if not _is_valid_payload_hash(value):
        raise SigV4Error(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER "
            "or a valid sha256 value.",
        )


def _parse_credential(credential: str, presigned: bool) -> tuple[str, str, str, str]:
    if len(credential) <= CACHED_TEXT_CHARS:
        return _cached_credential(credential, presigned)
    return _read_credential(credential, presigned)


def _parse_signed_headers(value: str, presigned: bool) -> tuple[str, ...]:
    if len(value) <= CACHED_TEXT_CHARS:
        return _cached_signed_headers(value, presigned)
    return _read_signed_headers(value, presigned)


def _read_credential(credential: str, presigned: bool) -> tuple[str, str, str, str]:
    parts = credential.rsplit("/", 4)  # the access key is everything before the scope
    expecting = 'expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request"'
    if len(parts) != 5 or not all(parts):
        prefix = "Error parsing the X-Amz-Credential parameter; " if presigned else ""
        raise _malformed(presigned, f"{prefix}the Credential is mal-formed; {expecting}.")
    access_key, scope_date, region, service, terminal = parts
    if not (access_key.isascii() and access_key.isprintable()) or " " in access_key:
        # No credential has such an id; refused before it reaches a cache or a query.
        raise SigV4Error("InvalidAccessKeyId", "The AWS access key Id you provided does not "
                                               "exist in our records.")
    if len(scope_date) != 8 or not (scope_date.isascii() and scope_date.isdigit()):
        raise _malformed(presigned, f'Invalid credential date "{scope_date}".')
    if terminal != TERMINATOR:
        raise _malformed(
            presigned, f'incorrect terminal "{terminal}". This endpoint uses "aws4_request".'
        )
    return access_key, scope_date, region, service


def _read_signed_headers(value: str, presigned: bool) -> tuple[str, ...]:
    names = tuple(name.strip().lower() for name in value.split(";"))
    if not value.strip() or any(not name or any(c.isspace() for c in name) for name in names):
        raise _malformed(presigned, f"cannot parse SignedHeaders {value!r}")
    if len(set(names)) != len(names):
        raise _malformed(presigned, "SignedHeaders lists a header twice")
    return names


# Claims that repeat from request to request (one credential scope a day, the same signed
# headers) are read once; a refusal is never kept (lru_cache keeps only what returns), nor
# a long claim.
_cached_credential = lru_cache(maxsize=1024)(_read_credential)
_cached_signed_headers = lru_cache(maxsize=1024)(_read_signed_headers)


def _parse_signature(value: str, presigned: bool) -> str:
    if HEX64.fullmatch(value) is None:
        raise _malformed(presigned, "the signature must be 64 hexadecimal characters")
    return value.lower()


def _header_date(headers: Mapping[str, str]) -> tuple[str, datetime]:
    """x-amz-date, else Date (RFC 1123), as (ISO 8601 basic string, aware datetime)."""
    refused = SigV4Error("AccessDenied", "AWS authentication requires a valid Date or "
                                         "x-amz-date header")
    amz = headers.get("x-amz-date")
    if amz is not None:
        parsed = parse_amz_date(amz.strip())
        if parsed is None:
            raise refused
        return amz.strip(), parsed
    http_date = headers.get("date")
    if http_date is None:
        raise refused
    try:
        moment = as_utc(parsedate_to_datetime(http_date))
    except (TypeError, ValueError):
        raise refused from None
    return format_amz_date(moment), moment


def verify(
    auth: AuthRequest,
    req: RequestView,
    secret_key: str,
    now: datetime,
    allowed_regions: Collection[str],
) -> SigningContext:
    """Check every claim of ``auth`` about ``req``; return what chunk checks need.

    Raises SigV4Error: AuthorizationHeaderMalformed / AuthorizationQueryParametersError
    (scope), RequestTimeTooSkewed, AccessDenied (expired, unsigned headers),
    SignatureDoesNotMatch.
    """
    check_claims(auth, req, now, allowed_regions)
    return verify_signature(auth, req, secret_key)


def check_claims(
    auth: AuthRequest, req: RequestView, now: datetime, allowed_regions: Collection[str]
) -> None:
    """The checks of `verify` that need no secret: credential scope, clock skew or
    presigned expiry, signed headers."""
    _check_scope(auth, allowed_regions)
    _check_time(auth, as_utc(now))
    _check_signed_headers(auth, req)


def verify_signature(auth: AuthRequest, req: RequestView, secret_key: str) -> SigningContext:
    """The signature check of `verify` alone, once `check_claims` has passed. A payload
    hash PAYLOAD_FROM_BODY must have been replaced by the body's SHA-256 first."""
    if auth.payload_from_body:
        raise ValueError("the body's SHA-256 is needed to verify this signature")
    key = derive_signing_key(secret_key, auth.scope_date, auth.region, auth.service)
    claimed = auth.signature.encode("ascii")
    for request_bytes in canonical_requests(auth, req):
        expected = hmac_sha256(key, string_to_sign(auth.amz_date_str, auth.scope, request_bytes))
        if hmac.compare_digest(expected.hex().encode("ascii"), claimed):
            return SigningContext(key, auth.signature, auth.amz_date_str, auth.scope)
    raise SigV4Error(
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method.",
    )


def _check_scope(auth: AuthRequest, allowed_regions: Collection[str]) -> None:
    prefix = "Error parsing the X-Amz-Credential parameter; " if auth.presigned else ""
    if auth.region not in allowed_regions:
        expected = sorted(allowed_regions)[0] if allowed_regions else ""
        error = _malformed(
            auth.presigned, f"{prefix}the region '{auth.region}' is wrong; expecting '{expected}'"
        )
        error.region = expected
        raise error
    if auth.service != SERVICE:
        raise _malformed(
            auth.presigned,
            f"{prefix}incorrect service \"{auth.service}\". This endpoint belongs to \"s3\".",
        )
    if auth.scope_date != auth.amz_date_str[:8]:
        raise _malformed(
            auth.presigned,
            f'Invalid credential date "{auth.scope_date}". '
            f'This date is not the same as X-Amz-Date: "{auth.amz_date_str[:8]}".',
        )


def _check_time(auth: AuthRequest, now: datetime) -> None:
    if not auth.presigned:
        # A replay window for header-signed requests too, not only for presigned URLs.
        if abs(now - auth.amz_date) > MAX_CLOCK_SKEW:
            raise SigV4Error(
                "RequestTimeTooSkewed",
                "The difference between the request time and the current time is too large.",
            )
        return
    expires = auth.expires_seconds
    if expires is None or expires < 1:
        raise _malformed(True, "X-Amz-Expires must be a positive number of seconds")
    if expires > MAX_PRESIGN_EXPIRES:
        raise _malformed(True, _EXPIRES_TOO_LONG)
    if now > auth.amz_date + timedelta(seconds=expires):
        raise SigV4Error("AccessDenied", "Request has expired")
    if auth.amz_date > now + MAX_CLOCK_SKEW:
        raise SigV4Error("AccessDenied", "Request is not valid yet")


def _check_signed_headers(auth: AuthRequest, req: RequestView) -> None:
    # host must be signed, and so must every x-amz-* header that is present: an unsigned
    # one (x-amz-copy-source, x-amz-acl, x-amz-meta-*) could be added by whoever replays
    # the request.
    signed = set(auth.signed_headers)
    unsigned = sorted(
        name
        for name in req.headers
        if name.startswith("x-amz-") and name not in signed and name not in _BOUND_AMZ_HEADERS
    )
    if "host" not in signed:
        unsigned.insert(0, "host")
    if unsigned:
        raise SigV4Error(
            "AccessDenied",
            "There were headers present in the request which were not signed: "
            + ", ".join(unsigned),
        )
