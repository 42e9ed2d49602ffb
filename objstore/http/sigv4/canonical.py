"""The vocabulary every part of SigV4 shares: the constants, the refusal type, the request
as SigV4 sees it, the signing key, and the canonical request's building blocks (AWS's URI
and query encodings, the string to sign).

Pure functions only; never I/O, Twisted or logging, and never a secret or a signing key in
an exception message or a repr.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property, lru_cache
from urllib.parse import quote, unquote_to_bytes

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
HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")
_AMZ_DATE_DIGITS = re.compile(r"[0-9]{8}T[0-9]{6}Z")
# Text made only of the characters AWS's URI encoding leaves alone decodes to itself and
# encodes to itself: most query names and values, and most paths (with "/"), take no
# decoding or encoding work at all.
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")
_UNRESERVED_PATH = re.compile(r"[A-Za-z0-9_.~/-]*")
# Components that are not plain (a credential's "%2F", keys with spaces) repeat across
# requests; their (decoded, encoded) forms are kept in a bounded table, short ones only
# (a client can not fill memory with long, never repeated ones).
_COMPONENT_CACHE = 4096
CACHED_TEXT_CHARS = 256


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

    @cached_property
    def query(self) -> QueryItems:
        """The query parsed once (`query_items`), for every check that reads it."""
        return query_items(self.raw_query)


@dataclass(frozen=True)
class SigningContext:
    """What a verified request yields, for checking the signatures of its body chunks."""

    signing_key: bytes = field(repr=False)
    seed_signature: str
    amz_date_str: str
    scope: str


def wire(text: str) -> bytes:
    """The original bytes of a string decoded with UTF-8 + surrogateescape."""
    return text.encode("utf-8", "surrogateescape")


def hmac_sha256(key: bytes, message: str | bytes) -> bytes:
    """HMAC-SHA256 without letting go of the GIL. `hmac.digest` is one C call, but it
    releases the GIL whatever the message's length, and on the reactor thread of a busy
    node getting it back waited ~0.7 ms per call (bench/RESULTS.md session 15); an HMAC
    object releases it only for a message of 2,048 bytes or more, which SigV4's are not."""
    data = message.encode("utf-8") if isinstance(message, str) else message
    return hmac.new(key, data, hashlib.sha256).digest()


def derive_signing_key(secret_key: str, scope_date: str, region: str, service: str) -> bytes:
    """The SigV4 signing key of a credential for one day, region and service. Four HMACs,
    the same for every request of that credential on that day: kept in a small LRU
    (in memory only, like the secrets the identity cache already holds)."""
    return _signing_key(secret_key, scope_date, region, service)


@lru_cache(maxsize=1024)
def _signing_key(secret_key: str, scope_date: str, region: str, service: str) -> bytes:
    k_date = hmac_sha256(("AWS4" + secret_key).encode("utf-8"), scope_date)
    k_region = hmac_sha256(k_date, region)
    k_service = hmac_sha256(k_region, service)
    return hmac_sha256(k_service, TERMINATOR)


def credential_scope(scope_date: str, region: str, service: str = SERVICE) -> str:
    return f"{scope_date}/{region}/{service}/{TERMINATOR}"


def payload_hash_is_hex(value: str) -> bool:
    """True for a 64-character lower-case hex SHA-256 claim (a signed, single-chunk body)."""
    return _LOWER_HEX64.fullmatch(value) is not None


def uri_encode(value: str | bytes, *, keep_slash: bool = False) -> str:
    """Percent-encode per AWS: everything but A-Z a-z 0-9 - _ . ~ (and "/" if asked),
    with upper-case hex. Strings are encoded as UTF-8 first."""
    if isinstance(value, str):
        value = wire(value)
    return quote(value, safe="/" if keep_slash else "")


def _unquote(text: str) -> bytes:
    # "+" in a query means a space (form encoding, and what twisted.web's request.args
    # does): the signature must cover the value the server acts on.
    return unquote_to_bytes(wire(text).replace(b"+", b"%20"))


def query_component(raw: str) -> tuple[bytes, str]:
    """One query name or value as sent: (its decoded bytes, its AWS encoding)."""
    if _UNRESERVED.fullmatch(raw):
        return raw.encode("ascii"), raw
    if len(raw) <= CACHED_TEXT_CHARS:
        return _cached_query_component(raw)
    return _query_component(raw)


def _query_component(raw: str) -> tuple[bytes, str]:
    decoded = _unquote(raw)
    return decoded, uri_encode(decoded)


_cached_query_component = lru_cache(maxsize=_COMPONENT_CACHE)(_query_component)


def trimall(value: bytes) -> bytes:
    # Canonical header value: trimmed, runs of whitespace collapsed (AWS "Trimall"). On
    # bytes, so that only ASCII whitespace counts (not U+00A0 and friends).
    return b" ".join(value.split())


def format_amz_date(moment: datetime) -> str:
    return as_utc(moment).strftime(_AMZ_DATE_FORMAT)


def as_utc(moment: datetime) -> datetime:
    # A naive datetime is taken to be UTC, so that callers cannot mix the two by accident.
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def parse_amz_date(text: str) -> datetime | None:
    if len(text) != 16 or not text.isascii():  # strptime would read other Unicode digits
        return None
    return _parse_amz_date(text)


@lru_cache(maxsize=1024)  # a date is claimed by every request signed in that second
def _parse_amz_date(text: str) -> datetime | None:
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


def aws_uri_path(raw_path: str) -> str:
    """The canonical URI AWS computes for S3: the decoded path encoded once, "/" kept.
    No dot-segment removal and no double encoding (those are for the other services)."""
    if raw_path and _UNRESERVED_PATH.fullmatch(raw_path):
        return raw_path
    if len(raw_path) <= CACHED_TEXT_CHARS:
        return _cached_aws_uri_path(raw_path)
    return _aws_uri_path(raw_path)


def _aws_uri_path(raw_path: str) -> str:
    return uri_encode(unquote_to_bytes(wire(raw_path or "/")), keep_slash=True)


_cached_aws_uri_path = lru_cache(maxsize=_COMPONENT_CACHE)(_aws_uri_path)


# A parsed query: per parameter ((decoded name, decoded value), (encoded name, encoded
# value)), in the order sent.
QueryItems = tuple[tuple[tuple[bytes, bytes], tuple[str, str]], ...]


def query_items(raw_query: str) -> QueryItems:
    """The query as sent, each name and value decoded and encoded the AWS way once."""
    items = []
    for part in raw_query.split("&"):
        if not part:
            continue  # "a=1&&b=2": an empty item names no parameter
        key, _, value = part.partition("=")  # "?uploads" and "?uploads=" are the same
        (key_bytes, key_text), (value_bytes, value_text) = (query_component(key),
                                                            query_component(value))
        items.append(((key_bytes, value_bytes), (key_text, value_text)))
    return tuple(items)


def query_pairs(raw_query: str | QueryItems) -> list[tuple[bytes, bytes]]:
    items = query_items(raw_query) if isinstance(raw_query, str) else raw_query
    return [decoded for decoded, _ in items]


def canonical_query_string(raw_query: str | QueryItems, *, exclude: str | None = None
                           ) -> str:
    """Decode the query as sent, re-encode every key and value the AWS way, sort by key
    then value. ``exclude`` drops one parameter (X-Amz-Signature of a presigned URL).
    A query already parsed (`query_items`) is not parsed again."""
    items = query_items(raw_query) if isinstance(raw_query, str) else raw_query
    skip = exclude.encode("utf-8") if exclude is not None else None
    encoded = sorted(pair for (key, _), pair in items if key != skip)
    return "&".join(f"{key}={value}" for key, value in encoded)


def canonical_request_bytes(
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
