"""Pure evaluation of HTTP conditional headers against an object's ETag and Last-Modified,
in the precedence AWS documents (RFC 7232 with S3's twist): If-Match beats
If-Unmodified-Since, and If-None-Match beats If-Modified-Since.

Used for GET/HEAD (If-*) and for copy sources (x-amz-copy-source-if-*), which share the
rules but fail with 412 where GET would answer 304.
"""

from __future__ import annotations

from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from objstore.errors import S3Error


def _etags(header: str) -> list[str]:
    return [item.strip().strip('"') for item in header.split(",") if item.strip()]


def _matches(header: str, etag: str) -> bool:
    tags = _etags(header)
    return "*" in tags or etag in tags


def _http_time(value: str) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None  # an unparseable date is ignored, as S3 does


def evaluate(
    headers: Mapping[str, str], etag: str, last_modified: float, *, prefix: str = "if-",
    not_modified_code: str = "NotModified",
) -> None:
    """Raise S3Error (PreconditionFailed 412, or `not_modified_code`) when the conditions in
    `headers` (lower-case names, e.g. "if-match" or "x-amz-copy-source-if-match" with
    prefix="x-amz-copy-source-if-") do not hold. Times compare at one-second precision."""
    if_match = headers.get(prefix + "match")
    if_none_match = headers.get(prefix + "none-match")
    if_modified = headers.get(prefix + "modified-since")
    if_unmodified = headers.get(prefix + "unmodified-since")
    modified = int(last_modified)
    if if_match is not None:
        if not _matches(if_match, etag):
            raise S3Error("PreconditionFailed", Condition=prefix.upper() + "MATCH")
    elif if_unmodified is not None:
        limit = _http_time(if_unmodified)
        if limit is not None and modified > limit:
            raise S3Error("PreconditionFailed", Condition=prefix.upper() + "UNMODIFIED-SINCE")
    if if_none_match is not None:
        if _matches(if_none_match, etag):
            raise _unchanged(not_modified_code, prefix, "NONE-MATCH")
    elif if_modified is not None:
        since = _http_time(if_modified)
        if since is not None and modified <= since:
            raise _unchanged(not_modified_code, prefix, "MODIFIED-SINCE")


def _unchanged(code: str, prefix: str, which: str) -> S3Error:
    if code == "PreconditionFailed":
        return S3Error(code, Condition=prefix.upper() + which)
    return S3Error(code)
