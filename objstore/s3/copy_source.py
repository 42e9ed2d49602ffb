"""Parsing of `x-amz-copy-source` and `x-amz-copy-source-range` (pure).

The source is `bucket/key` or `/bucket/key`, URL-encoded, optionally followed by
`?versionId=...`. The range is `bytes=first-last` (both required, inclusive), used by
UploadPartCopy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

from objstore.errors import S3Error
from objstore.s3.ranges import position

_RANGE = re.compile(r"^bytes=([0-9]+)-([0-9]+)\Z")


@dataclass(frozen=True)
class CopySource:
    bucket: str
    key: str
    version_id: str | None


def parse_copy_source(header: str) -> CopySource:
    path, _, query = header.partition("?")
    try:
        decoded = unquote(path, errors="strict")
    except UnicodeDecodeError:
        raise _invalid(header) from None
    bucket, _, key = decoded.lstrip("/").partition("/")
    if not bucket or not key:
        raise _invalid(header)
    version_id = None
    if query:
        versions = parse_qs(query, keep_blank_values=True).get("versionId")
        if versions is None or not versions[0]:
            raise _invalid(header)
        version_id = versions[0]
    return CopySource(bucket, key, version_id)


def parse_copy_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, length) of x-amz-copy-source-range within a source of `size` bytes."""
    if header is None:
        return None
    match = _RANGE.match(header.strip())
    if match is None:
        raise S3Error("InvalidArgument", "The x-amz-copy-source-range value must be of the "
                      "form bytes=first-last where first and last are the zero-based offsets",
                      ArgumentName="x-amz-copy-source-range", ArgumentValue=header)
    first, last = position(match.group(1)), position(match.group(2))
    if last < first or last >= size:
        raise S3Error("InvalidRange", headers={"Content-Range": f"bytes */{size}"},
                      RangeRequested=header, ActualObjectSize=str(size))
    return first, last - first + 1


def _invalid(header: str) -> S3Error:
    return S3Error("InvalidArgument", "Copy Source must mention the source bucket and key: "
                   "sourcebucket/sourcekey", ArgumentName="x-amz-copy-source",
                   ArgumentValue=header)
