"""The `x-amz-tagging` request header (PutObject, CopyObject, CreateMultipartUpload) and the
tag-set rules every way of setting object tags shares.

The header is URL-query encoded (`k1=v1&k2=v2`). The rules are AWS's: at most 10 tags per
object, keys of 1-128 and values of 0-256 characters, unique keys, no key with the reserved
`aws:` prefix, and only letters, digits, white space and `+ - = . _ : / @`. Pure functions;
a violation raises S3Error("InvalidTag") and nothing is stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote

from objstore.errors import S3Error

MAX_OBJECT_TAGS = 10
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 256
RESERVED_PREFIX = "aws:"
_ALLOWED = re.compile(r"^[\w\s+\-=.:/@]*$")


def parse_tagging_header(header: str | None) -> dict[str, str]:
    """The tag set of an `x-amz-tagging` header (empty when absent or empty)."""
    if not header:
        return {}
    try:
        pairs = parse_qsl(header, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise S3Error("InvalidArgument", "The header 'x-amz-tagging' shall be encoded as "
                      "UTF-8 then URLEncoded URL query parameters without tag name duplicates.",
                      ArgumentName="x-amz-tagging", ArgumentValue=header) from None
    return validate_tags(pairs)


def validate_tags(
    pairs: Iterable[tuple[str, str]], max_tags: int = MAX_OBJECT_TAGS, what: str = "Object tags"
) -> dict[str, str]:
    """Check a tag set given as (key, value) pairs; the dict keeps their order. Object tags
    allow 10 tags, bucket tags (`max_tags=50`) allow 50; the other rules are the same."""
    tags: dict[str, str] = {}
    for key, value in pairs:
        if key in tags:
            raise S3Error("InvalidTag", "Cannot provide multiple Tags with the same key",
                          TagKey=key)
        _check_key(key)
        _check_value(key, value)
        tags[key] = value
    if len(tags) > max_tags:
        raise S3Error("InvalidTag", f"{what} cannot be greater than {max_tags}")
    return tags


def _check_key(key: str) -> None:
    if not 1 <= len(key) <= MAX_KEY_CHARS or not _ALLOWED.match(key):
        raise S3Error("InvalidTag", "The TagKey you have provided is invalid", TagKey=key)
    if key.lower().startswith(RESERVED_PREFIX):
        raise S3Error("InvalidTag", "Your TagKey cannot be prefixed with aws:", TagKey=key)


def _check_value(key: str, value: str) -> None:
    if len(value) > MAX_VALUE_CHARS or not _ALLOWED.match(value):
        raise S3Error("InvalidTag", "The TagValue you have provided is invalid", TagKey=key,
                      TagValue=value)


def encode_tagging_header(tags: dict[str, str]) -> str:
    """The header form of a tag set (the inverse of parse_tagging_header)."""
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in tags.items())
