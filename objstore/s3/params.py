"""Query parameters the listing operations share (ListObjects, ListObjectVersions):
max-keys and encoding-type, with the refusals AWS answers for them. Pure; no Twisted."""

from __future__ import annotations

from collections.abc import Mapping

from objstore.errors import S3Error

MAX_KEYS = 1000  # the default page, and the most a page holds


def max_keys(raw: str | None) -> int:
    """max-keys: absent is 1000; a negative or non-integer value is InvalidArgument; more
    than 1000 is 1000."""
    if raw is None:
        return MAX_KEYS
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise S3Error("InvalidArgument", "max-keys must be a non-negative integer.",
                      ArgumentName="max-keys", ArgumentValue=raw)
    return min(value, MAX_KEYS)


def encoding_type(query: Mapping[str, str]) -> str | None:
    """encoding-type: absent, or "url" (keys and prefixes percent-encoded in the answer)."""
    value = query.get("encoding-type")
    if value not in (None, "url"):
        raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request",
                      ArgumentName="encoding-type", ArgumentValue=value)
    return value
