"""AWS Signature Version 4 for the S3 API: verification and signing, and nothing else.

What this module owns:

* parsing the SigV4 claims of a request, from the ``Authorization`` header or from a
  presigned URL's query (`parse_auth`), without any secret;
* verifying those claims against a secret key (`verify`): credential scope, clock skew or
  presigned expiry, which headers are signed, and the signature of the canonical request,
  computed exactly as AWS does for S3;
* decoding ``aws-chunked`` bodies as they stream in (`AwsChunkedDecoder`), and verifying the
  chunk-signature chain and the signed trailer once the secret is known
  (`verify_chunk_signatures`);
* re-exporting the S3 checksum algorithms of objstore.checksums for its callers;
* signing requests and presigning URLs for our own tools (`sign_headers`, `presign_url`,
  `aws_chunked_body`).

What it must never do: any I/O, import Twisted, log, or put a secret key or a signing key in
an exception message or a repr. Every function is a pure function of its arguments, which is
why it is tested without a reactor.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import lru_cache
from urllib.parse import quote, unquote_to_bytes, urlsplit, urlunsplit

from objstore.checksums import CHECKSUM_ALGORITHMS as CHECKSUM_ALGORITHMS
from objstore.checksums import Checksummer as Checksummer

ALGORITHM = "AWS4-HMAC-SHA256"
TERMINATOR = "aws4_request"
SERVICE = "s3"

STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_PAYLOADS = (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER)

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_CLOCK_SKEW = timedelta(minutes=15)
MAX_PRESIGN_EXPIRES = 604800  # seven days, the AWS maximum

_AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")
_AMZ_DATE_DIGITS = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_PRESIGN_PARAMS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)
# x-amz-* headers whose value is already bound by the signature without being listed in
# SignedHeaders: the payload hash is the last line of the canonical request, the date is
# in the string to sign.
_BOUND_AMZ_HEADERS = frozenset({"x-amz-content-sha256", "x-amz-date"})
# Headers our signer never signs: hop-by-hop or rewritten by proxies and HTTP libraries.
_UNSIGNABLE_HEADERS = frozenset(
    {"authorization", "connection", "expect", "keep-alive", "proxy-authorization", "te",
     "trailer", "transfer-encoding", "upgrade", "user-agent", "x-amzn-trace-id"}
)


class SigV4Error(Exception):
    """A refusal with its S3 error code. Messages never contain secrets."""

    def __init__(self, code: str, message: str, *, region: str | None = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.region = region  # the expected region, for AuthorizationHeaderMalformed

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True)
class RequestView:
    """The parts of a request that SigV4 covers, as they were on the wire.

    ``raw_path`` and ``raw_query`` and the header values are the wire bytes decoded as UTF-8
    with ``surrogateescape``, so that the exact bytes can be recovered. Header names are
    lower-case; repeated headers are joined with ",".
    """

    method: str
    raw_path: str
    raw_query: str
    headers: Mapping[str, str]


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
    payload_hash: str
    presigned: bool
    expires_seconds: int | None

    @property
    def scope(self) -> str:
        return credential_scope(self.scope_date, self.region, self.service)


@dataclass(frozen=True)
class SigningContext:
    """What a verified request yields, for checking the signatures of its body chunks."""

    signing_key: bytes = field(repr=False)
    seed_signature: str
    amz_date_str: str
    scope: str


# --------------------------------------------------------------------------------------
# Small primitives
# --------------------------------------------------------------------------------------


def _wire(text: str) -> bytes:
    """The original bytes of a string decoded with UTF-8 + surrogateescape."""
    return text.encode("utf-8", "surrogateescape")


def _hmac(key: bytes, message: str | bytes) -> bytes:
    data = message.encode("utf-8") if isinstance(message, str) else message
    return hmac.new(key, data, hashlib.sha256).digest()


def derive_signing_key(secret_key: str, scope_date: str, region: str, service: str) -> bytes:
    """The SigV4 signing key of a credential for one day, region and service. Four HMACs,
    the same for every request of that credential on that day: kept in a small LRU
    (in memory only, like the secrets the identity cache already holds)."""
    return _signing_key(secret_key, scope_date, region, service)


@lru_cache(maxsize=1024)
def _signing_key(secret_key: str, scope_date: str, region: str, service: str) -> bytes:
    k_date = _hmac(("AWS4" + secret_key).encode("utf-8"), scope_date)
    k_region = _hmac(k_date, region)
    k_service = _hmac(k_region, service)
    return _hmac(k_service, TERMINATOR)


def credential_scope(scope_date: str, region: str, service: str = SERVICE) -> str:
    return f"{scope_date}/{region}/{service}/{TERMINATOR}"


def payload_hash_is_hex(value: str) -> bool:
    """True for a 64-character lower-case hex SHA-256 claim (a signed, single-chunk body)."""
    return _LOWER_HEX64.fullmatch(value) is not None


def _is_valid_payload_hash(value: str) -> bool:
    return value == UNSIGNED_PAYLOAD or value in STREAMING_PAYLOADS or payload_hash_is_hex(value)


def uri_encode(value: str | bytes, *, keep_slash: bool = False) -> str:
    """Percent-encode per AWS: everything but A-Z a-z 0-9 - _ . ~ (and "/" if asked),
    with upper-case hex. Strings are encoded as UTF-8 first."""
    if isinstance(value, str):
        value = _wire(value)
    return quote(value, safe="/" if keep_slash else "")


def _unquote(text: str) -> bytes:
    # "+" in a query means a space (form encoding, and what twisted.web's request.args
    # does): the signature must cover the value the server acts on.
    return unquote_to_bytes(_wire(text).replace(b"+", b"%20"))


def _trimall(value: bytes) -> bytes:
    # Canonical header value: trimmed, runs of whitespace collapsed (AWS "Trimall"). On
    # bytes, so that only ASCII whitespace counts (not U+00A0 and friends).
    return b" ".join(value.split())


def _format_amz_date(moment: datetime) -> str:
    return _as_utc(moment).strftime(_AMZ_DATE_FORMAT)


def _as_utc(moment: datetime) -> datetime:
    # A naive datetime is taken to be UTC, so that callers cannot mix the two by accident.
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _parse_amz_date(text: str) -> datetime | None:
    if len(text) != 16:
        return None
    if _AMZ_DATE_DIGITS.fullmatch(text):  # the only shape clients send; strptime is slow
        try:
            return datetime(int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[9:11]),
                            int(text[11:13]), int(text[13:15]), tzinfo=UTC)
        except ValueError:
            return None
    try:
        return datetime.strptime(text, _AMZ_DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------
# Canonical request
# --------------------------------------------------------------------------------------


def aws_uri_path(raw_path: str) -> str:
    """The canonical URI AWS computes for S3: the decoded path encoded once, "/" kept.
    No dot-segment removal and no double encoding (those are for the other services)."""
    return uri_encode(unquote_to_bytes(_wire(raw_path or "/")), keep_slash=True)


def _query_pairs(raw_query: str) -> list[tuple[bytes, bytes]]:
    pairs = []
    for part in raw_query.split("&"):
        if not part:
            continue  # "a=1&&b=2": an empty item names no parameter
        key, _, value = part.partition("=")  # "?uploads" and "?uploads=" are the same
        pairs.append((_unquote(key), _unquote(value)))
    return pairs


def canonical_query_string(raw_query: str, *, exclude: str | None = None) -> str:
    """Decode the query as sent, re-encode every key and value the AWS way, sort by key
    then value. ``exclude`` drops one parameter (X-Amz-Signature of a presigned URL)."""
    skip = exclude.encode("utf-8") if exclude is not None else None
    encoded = sorted(
        (uri_encode(key), uri_encode(value))
        for key, value in _query_pairs(raw_query)
        if key != skip
    )
    return "&".join(f"{key}={value}" for key, value in encoded)


def _canonical_request_bytes(
    method: str,
    uri: bytes,
    query: str,
    headers: Sequence[tuple[str, bytes]],
    payload_hash: str,
) -> bytes:
    lines = [method.encode("utf-8"), uri, query.encode("utf-8")]
    lines.extend(name.encode("utf-8") + b":" + value for name, value in headers)
    lines.append(b"")  # canonical headers end with a newline of their own
    lines.append(";".join(name for name, _ in headers).encode("utf-8"))
    lines.append(payload_hash.encode("utf-8"))
    return b"\n".join(lines)


def string_to_sign(amz_date_str: str, scope: str, canonical_request: bytes) -> str:
    digest = hashlib.sha256(canonical_request).hexdigest()
    return f"{ALGORITHM}\n{amz_date_str}\n{scope}\n{digest}"


def _uri_candidates(raw_path: str) -> list[bytes]:
    # The path exactly as sent is what SDKs sign (they encode once, the AWS way). A client
    # that sent a different but equivalent encoding (lower-case hex, "%7E", an unencoded
    # "!") signed the AWS encoding of the same decoded path: accept that too. Both decode
    # to the same key, so neither lets a signature cover another resource.
    raw = _wire(raw_path or "/")
    canonical = aws_uri_path(raw_path).encode("ascii")
    return [raw] if raw == canonical else [raw, canonical]


def _header_value_candidates(value: str) -> list[bytes]:
    # Most clients sign the header bytes they send (UTF-8). Python's http.client sends a
    # str header as Latin-1 while botocore signs its UTF-8 encoding: accept that reading
    # of non-ASCII bytes as well.
    wire = _trimall(_wire(value))
    if wire.isascii():
        return [wire]
    return [wire, wire.decode("latin-1").encode("utf-8")]


def _canonical_requests(auth: AuthRequest, req: RequestView) -> Iterator[bytes]:
    query = canonical_query_string(
        req.raw_query, exclude="X-Amz-Signature" if auth.presigned else None
    )
    values = [_header_value_candidates(req.headers.get(name, "")) for name in auth.signed_headers]
    encodings = 2 if any(len(v) > 1 for v in values) else 1
    for uri in _uri_candidates(req.raw_path):
        for variant in range(encodings):
            headers = [
                (name, value[min(variant, len(value) - 1)])
                for name, value in zip(auth.signed_headers, values, strict=True)
            ]
            yield _canonical_request_bytes(req.method, uri, query, headers, auth.payload_hash)


def canonical_request(auth: AuthRequest, req: RequestView) -> str:
    """The canonical request as most clients compute it (for debugging a mismatch)."""
    return next(_canonical_requests(auth, req)).decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------------------
# Parsing what the client claims
# --------------------------------------------------------------------------------------


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


def parse_auth(req: RequestView) -> AuthRequest | None:
    """The SigV4 claims of a request; None when it carries no authentication at all.

    Raises SigV4Error for a malformed claim, for SigV2, and for a header-signed request
    without ``x-amz-content-sha256``: like AWS, S3 requires that header
    (InvalidRequest "Missing required header for this request: x-amz-content-sha256");
    every AWS SDK, botocore included, always sends it.
    """
    params = _auth_params(req.raw_query)
    authorization = req.headers.get("authorization")
    presigned = any(name in params for name in _PRESIGN_PARAMS)
    if authorization is not None and (presigned or "Signature" in params):
        raise SigV4Error(
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
            "Signature query string parameter or the Authorization header should be specified",
        )
    if authorization is not None:
        return _parse_header_auth(authorization, req.headers)
    if presigned:
        return _parse_query_auth(params, req.headers)
    if "AWSAccessKeyId" in params or "Signature" in params:
        raise _sigv2_refused()
    return None


def _auth_params(raw_query: str) -> dict[str, list[str]]:
    """Decoded values of the query parameters that carry authentication."""
    wanted = (*_PRESIGN_PARAMS, "AWSAccessKeyId", "Signature")
    found: dict[str, list[str]] = {}
    for key, value in _query_pairs(raw_query):
        name = key.decode("utf-8", "replace")
        if name in wanted or name.lower() == "x-amz-content-sha256":
            found.setdefault(name, []).append(value.decode("utf-8", "replace"))
    return found


def _parse_header_auth(authorization: str, headers: Mapping[str, str]) -> AuthRequest:
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
    if payload_hash is None:
        raise SigV4Error(
            "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
        )
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
    amz_date = _parse_amz_date(value["X-Amz-Date"])
    if amz_date is None:
        raise _malformed(
            True, "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\""
        )
    expires = value["X-Amz-Expires"]
    if not (expires.isascii() and expires.isdigit()):
        raise _malformed(True, "X-Amz-Expires should be a number")
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
        expires_seconds=int(expires),
    )


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
    parts = credential.rsplit("/", 4)  # the access key is everything before the scope
    expecting = 'expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request"'
    if len(parts) != 5 or not all(parts):
        prefix = "Error parsing the X-Amz-Credential parameter; " if presigned else ""
        raise _malformed(presigned, f"{prefix}the Credential is mal-formed; {expecting}.")
    access_key, scope_date, region, service, terminal = parts
    if len(scope_date) != 8 or not (scope_date.isascii() and scope_date.isdigit()):
        raise _malformed(presigned, f'Invalid credential date "{scope_date}".')
    if terminal != TERMINATOR:
        raise _malformed(
            presigned, f'incorrect terminal "{terminal}". This endpoint uses "aws4_request".'
        )
    return access_key, scope_date, region, service


def _parse_signed_headers(value: str, presigned: bool) -> tuple[str, ...]:
    names = tuple(name.strip().lower() for name in value.split(";"))
    if not value.strip() or any(not name or any(c.isspace() for c in name) for name in names):
        raise _malformed(presigned, f"cannot parse SignedHeaders {value!r}")
    if len(set(names)) != len(names):
        raise _malformed(presigned, "SignedHeaders lists a header twice")
    return names


def _parse_signature(value: str, presigned: bool) -> str:
    if _HEX64.fullmatch(value) is None:
        raise _malformed(presigned, "the signature must be 64 hexadecimal characters")
    return value.lower()


def _header_date(headers: Mapping[str, str]) -> tuple[str, datetime]:
    """x-amz-date, else Date (RFC 1123), as (ISO 8601 basic string, aware datetime)."""
    refused = SigV4Error("AccessDenied", "AWS authentication requires a valid Date or "
                                         "x-amz-date header")
    amz = headers.get("x-amz-date")
    if amz is not None:
        parsed = _parse_amz_date(amz.strip())
        if parsed is None:
            raise refused
        return amz.strip(), parsed
    http_date = headers.get("date")
    if http_date is None:
        raise refused
    try:
        moment = _as_utc(parsedate_to_datetime(http_date))
    except (TypeError, ValueError):
        raise refused from None
    return _format_amz_date(moment), moment


# --------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------


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
    _check_scope(auth, allowed_regions)
    _check_time(auth, _as_utc(now))
    _check_signed_headers(auth, req)
    key = derive_signing_key(secret_key, auth.scope_date, auth.region, auth.service)
    claimed = auth.signature.encode("ascii")
    for request_bytes in _canonical_requests(auth, req):
        expected = _hmac(key, string_to_sign(auth.amz_date_str, auth.scope, request_bytes))
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
        raise _malformed(True, "X-Amz-Expires must be less than a week (in seconds) that is "
                               "604800")
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


def make_signing_context(
    secret_key: str, amz_date_str: str, region: str, seed_signature: str, service: str = SERVICE
) -> SigningContext:
    """The context a client needs to sign the chunks of a body it is sending."""
    scope_date = amz_date_str[:8]
    return SigningContext(
        derive_signing_key(secret_key, scope_date, region, service),
        seed_signature,
        amz_date_str,
        credential_scope(scope_date, region, service),
    )


# --------------------------------------------------------------------------------------
# aws-chunked bodies
# --------------------------------------------------------------------------------------

CHUNK_LINE_LIMIT = 4096
TRAILER_SECTION_LIMIT = 16384
MIN_SIGNED_CHUNK = 8192  # AWS: only the last data chunk of a signed body may be smaller

_HEADER, _DATA, _DATA_END, _TRAILER, _DONE = range(5)
_EMPTY_DIGEST = hashlib.sha256(b"").digest()


def _incomplete(message: str) -> SigV4Error:
    return SigV4Error("IncompleteBody", message)


class AwsChunkedDecoder:
    """Incremental decoder of an aws-chunked body.

    It is fed the raw body in arbitrary slices (1 byte to megabytes, chunk boundaries
    anywhere) as it arrives off the socket BEFORE the request is authenticated (the secret
    is not known yet), so it only records what must be verified later: for every chunk of a
    signed body its claimed signature and the SHA-256 of its data, computed incrementally,
    in 64 bytes per chunk. It never buffers a chunk. Nothing is recorded for
    STREAMING-UNSIGNED-PAYLOAD-TRAILER bodies (no chunk signatures to check).

    Limits: a chunk-size line (with its extensions) of at most 4 KiB, a trailer section of at
    most 16 KiB (else InvalidArgument); in signed bodies only the last data chunk may be
    smaller than 8 KiB (as AWS requires; it bounds the records kept before authentication);
    ``max_decoded_length`` (EntityTooLarge). Broken framing is IncompleteBody. After an error
    the decoder stays failed.

    Lenient where clients differ: a line may end in LF alone; a blank line between the final
    0-chunk and the trailers is skipped; the final CRLF of the body may be missing.
    """

    def __init__(self, content_sha256: str, max_decoded_length: int | None = None) -> None:
        if content_sha256 not in STREAMING_PAYLOADS:
            raise ValueError(f"not an aws-chunked payload: {content_sha256!r}")
        self.content_sha256 = content_sha256
        self._signed = content_sha256 != STREAMING_UNSIGNED_TRAILER
        self._expect_trailers = content_sha256 != STREAMING_SIGNED
        self._max = max_decoded_length
        self._state = _HEADER
        self._line = bytearray()
        self._remaining = 0
        self._crlf_seen = 0
        self._hash = hashlib.sha256()
        self._chunk_signature = b""
        self._last_size: int | None = None
        self._records = bytearray()  # 32-byte signature + 32-byte sha256, per chunk
        self._decoded = 0
        self._trailers: dict[str, str] = {}
        self._trailer_signature: str | None = None
        self._trailer_bytes = 0
        self._blank_trailer_line = False  # an empty trailer section ("0\r\n\r\n")
        self._error: SigV4Error | None = None

    # -- results ---------------------------------------------------------------------
    @property
    def decoded_length(self) -> int:
        return self._decoded

    @property
    def trailers(self) -> dict[str, str]:
        return dict(self._trailers)

    @property
    def trailer_signature(self) -> str | None:
        return self._trailer_signature

    @property
    def chunks(self) -> Sequence[tuple[str, str]]:
        """(claimed signature, sha256 hex of the data) per chunk, the final empty one
        included; empty for unsigned bodies."""
        return tuple((sig.hex(), digest.hex()) for sig, digest in self.iter_chunk_records())

    def iter_chunk_records(self) -> Iterator[tuple[bytes, bytes]]:
        """(claimed signature, sha256) per chunk as raw 32-byte values, without copies of
        the whole list (a 5 GiB body has up to 655360 chunks)."""
        records = memoryview(self._records)
        for start in range(0, len(records), 64):
            yield bytes(records[start : start + 32]), bytes(records[start + 32 : start + 64])

    @property
    def complete(self) -> bool:
        return self._state == _DONE and self._error is None

    # -- input -----------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        """Consume the next raw slice; return the payload bytes it contained."""
        if self._error is not None:
            raise self._error
        try:
            return self._feed(bytes(data))
        except SigV4Error as exc:
            self._error = exc
            raise

    def finish(self) -> None:
        """The body ended: raise IncompleteBody unless the final chunk (and the trailers,
        when expected) were seen."""
        if self._error is not None:
            raise self._error
        if self._state == _TRAILER and bytes(self._line) in (b"", b"\r") and self._may_end():
            self._state = _DONE
        if self._state != _DONE:
            self._error = _incomplete("The request body terminated unexpectedly")
            raise self._error

    def _may_end(self) -> bool:
        # The body stopped in the trailer section, between lines (only the final CRLF is
        # missing): enough was seen if nothing more was due.
        if self.content_sha256 == STREAMING_SIGNED or self._blank_trailer_line:
            return True  # a missing trailer signature fails verify_chunk_signatures
        if self.content_sha256 == STREAMING_SIGNED_TRAILER:
            return self._trailer_signature is not None
        return bool(self._trailers)

    def _feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            if self._state == _HEADER:
                pos, line = self._take_line(data, pos, CHUNK_LINE_LIMIT, "chunk-size line")
                if line is not None:
                    self._on_chunk_header(line)
            elif self._state == _DATA:
                pos = self._take_data(data, pos, out)
            elif self._state == _DATA_END:
                if data[pos] != b"\r\n"[self._crlf_seen]:
                    raise _incomplete("chunk data is not followed by CRLF")
                pos += 1
                self._crlf_seen += 1
                if self._crlf_seen == 2:
                    self._state = _HEADER
            elif self._state == _TRAILER:
                budget = TRAILER_SECTION_LIMIT - self._trailer_bytes
                pos, line = self._take_line(data, pos, budget, "trailer section")
                if line is not None:
                    self._on_trailer_line(line)
            else:  # _DONE: tolerate stray line ends, nothing else
                if data[pos:].strip(b"\r\n"):
                    raise SigV4Error("InvalidArgument", "data after the end of the aws-chunked "
                                                        "body")
                pos = end
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _take_line(
        self, data: bytes, pos: int, limit: int, what: str
    ) -> tuple[int, bytes | None]:
        newline = data.find(b"\n", pos)
        stop = len(data) if newline < 0 else newline
        # Check before copying: a peer must not make us buffer more than the limit.
        if len(self._line) + (stop - pos) > limit:
            raise SigV4Error("InvalidArgument", f"aws-chunked {what} too long")
        self._line += data[pos:stop]
        if newline < 0:
            return len(data), None
        line = bytes(self._line)
        self._line.clear()
        if self._state == _TRAILER:
            self._trailer_bytes += len(line) + 1
        return newline + 1, line.removesuffix(b"\r")

    def _take_data(self, data: bytes, pos: int, out: list[bytes]) -> int:
        take = min(self._remaining, len(data) - pos)
        piece = data if take == len(data) else data[pos : pos + take]
        if self._signed:
            self._hash.update(piece)
        out.append(piece)
        self._decoded += take
        self._remaining -= take
        if self._remaining == 0:
            self._record_chunk(self._hash.digest())
            self._state = _DATA_END
            self._crlf_seen = 0
        return pos + take

    def _record_chunk(self, digest: bytes) -> None:
        if self._signed:
            self._records += self._chunk_signature + digest

    def _on_chunk_header(self, line: bytes) -> None:
        size_text, _, extensions = line.partition(b";")
        size_text = size_text.strip()
        if not (1 <= len(size_text) <= 16) or not all(c in b"0123456789abcdefABCDEF"
                                                      for c in size_text):
            raise _incomplete("malformed aws-chunked chunk size")
        size = int(size_text, 16)
        if self._signed:
            self._chunk_signature = self._parse_chunk_signature(extensions)
            previous = self._last_size
            if size > 0 and previous is not None and 0 < previous < MIN_SIGNED_CHUNK:
                raise SigV4Error("InvalidArgument", "Only the last chunk is allowed to have a "
                                                    f"size less than {MIN_SIGNED_CHUNK} bytes")
        if self._max is not None and self._decoded + size > self._max:
            raise SigV4Error("EntityTooLarge", "Your proposed upload exceeds the maximum "
                                               "allowed size")
        self._last_size = size
        if size == 0:
            self._record_chunk(_EMPTY_DIGEST)
            self._state = _TRAILER
            return
        self._hash = hashlib.sha256()
        self._remaining = size
        self._state = _DATA

    @staticmethod
    def _parse_chunk_signature(extensions: bytes) -> bytes:
        found = [
            value.strip()
            for name, _, value in (item.partition(b"=") for item in extensions.split(b";"))
            if name.strip() == b"chunk-signature"
        ]
        if len(found) != 1 or _HEX64.fullmatch(found[0].decode("latin-1")) is None:
            raise _incomplete("missing or malformed chunk-signature")
        return bytes.fromhex(found[0].decode("ascii"))

    def _on_trailer_line(self, line: bytes) -> None:
        if not line:
            # A blank line before any trailer is a separator some clients send; otherwise
            # it ends the body.
            nothing_yet = not self._trailers and self._trailer_signature is None
            if not (self._expect_trailers and nothing_yet):
                self._state = _DONE
            self._blank_trailer_line = True
            return
        if not self._expect_trailers:
            raise _incomplete("unexpected data after the final chunk")
        name_bytes, sep, value_bytes = line.partition(b":")
        name = name_bytes.strip().decode("latin-1").lower()
        value = value_bytes.strip().decode("latin-1")
        if not sep or not name or any(c.isspace() for c in name):
            raise _incomplete("malformed trailer line")
        if name == "x-amz-trailer-signature":
            if self._trailer_signature is not None or _HEX64.fullmatch(value) is None:
                raise _incomplete("malformed x-amz-trailer-signature")
            self._trailer_signature = value.lower()
            return
        if name in self._trailers:
            raise SigV4Error("InvalidArgument", f"trailer {name} sent twice")
        self._trailers[name] = value


def canonical_trailers(trailers: Mapping[str, str]) -> bytes:
    """The bytes a trailer signature covers: "name:value\\n" per trailer, sorted by name."""
    return "".join(f"{name}:{trailers[name]}\n" for name in sorted(trailers)).encode("latin-1")


def chunk_signature(ctx: SigningContext, previous_signature: str, chunk_sha256_hex: str) -> str:
    message = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", ctx.amz_date_str, ctx.scope,
                         previous_signature, EMPTY_SHA256, chunk_sha256_hex))
    return _hmac(ctx.signing_key, message).hex()


def trailer_signature(
    ctx: SigningContext, previous_signature: str, trailers: Mapping[str, str]
) -> str:
    digest = hashlib.sha256(canonical_trailers(trailers)).hexdigest()
    message = "\n".join(("AWS4-HMAC-SHA256-TRAILER", ctx.amz_date_str, ctx.scope,
                         previous_signature, digest))
    return _hmac(ctx.signing_key, message).hex()


def verify_chunk_signatures(ctx: SigningContext, decoder: AwsChunkedDecoder) -> None:
    """Recompute the signature chain of a fully decoded body (seed -> every chunk -> the
    final empty chunk -> the trailer); any mismatch is SignatureDoesNotMatch."""
    if not decoder.complete:
        raise _incomplete("The request body terminated unexpectedly")
    if decoder.content_sha256 == STREAMING_UNSIGNED_TRAILER:
        return  # nothing is signed; the caller still checks the trailing checksum
    mismatch = SigV4Error("SignatureDoesNotMatch", "The chunk signature we calculated does not "
                                                   "match the signature you provided.")
    previous = ctx.seed_signature
    for claimed, digest in decoder.iter_chunk_records():
        expected = chunk_signature(ctx, previous, digest.hex())
        if not hmac.compare_digest(bytes.fromhex(expected), claimed):
            raise mismatch
        previous = expected
    if decoder.content_sha256 == STREAMING_SIGNED_TRAILER:
        claimed_trailer = decoder.trailer_signature
        expected = trailer_signature(ctx, previous, decoder.trailers)
        if claimed_trailer is None or not hmac.compare_digest(
            expected.encode("ascii"), claimed_trailer.encode("ascii")
        ):
            raise mismatch


def aws_chunked_body(
    chunks: Iterable[bytes],
    ctx: SigningContext | None = None,
    trailers: Mapping[str, str] | None = None,
) -> bytes:
    """Encode a body as aws-chunked, for our own tools and tests: signed when ``ctx`` is
    given (with a signed trailer when ``trailers`` is given), else the unsigned-trailer
    form botocore sends."""
    out = bytearray()
    previous = ctx.seed_signature if ctx is not None else ""
    for chunk in [*(c for c in chunks if c), b""]:
        if ctx is None:
            out += f"{len(chunk):x}\r\n".encode("ascii")
        else:
            previous = chunk_signature(ctx, previous, hashlib.sha256(chunk).hexdigest())
            out += f"{len(chunk):x};chunk-signature={previous}\r\n".encode("ascii")
        if chunk:
            out += chunk + b"\r\n"
    if trailers is not None:
        out += canonical_trailers(trailers).replace(b"\n", b"\r\n")
        if ctx is not None:
            signature = trailer_signature(ctx, previous, trailers)
            out += f"x-amz-trailer-signature:{signature}\r\n".encode("ascii")
    out += b"\r\n"
    return bytes(out)


# --------------------------------------------------------------------------------------
# Checksums
# --------------------------------------------------------------------------------------

# The checksum algorithms live in objstore.checksums (re-exported here for callers).


# --------------------------------------------------------------------------------------
# Signing, for our own tools (CLI, tests, presign endpoint)
# --------------------------------------------------------------------------------------


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
    canonical = _canonical_request_bytes(
        method.upper(),
        aws_uri_path(parts.path).encode("ascii"),
        canonical_query_string(parts.query, exclude="X-Amz-Signature" if presigned else None),
        [(name, _trimall(headers[name].encode("utf-8"))) for name in names],
        payload_hash,
    )
    return _hmac(key, string_to_sign(amz_date, scope, canonical)).hex(), ";".join(names)


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
    amz_date = _format_amz_date(now)
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
    amz_date = _format_amz_date(now)
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
