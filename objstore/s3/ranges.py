"""Pure parsing of HTTP Range headers for GET/HEAD of objects, as S3 interprets them."""

from __future__ import annotations

import re

from objstore.errors import S3Error

_SINGLE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end inclusive) of the requested range, or None for the whole object.

    Syntactically invalid or multi-range headers are ignored (whole object), as S3 does; a
    well-formed range that cannot be satisfied raises InvalidRange (416) with
    `Content-Range: bytes */size`."""
    if not header:
        return None
    match = _SINGLE.match(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:
        suffix = int(last)
        if suffix == 0:
            raise _unsatisfiable(size)
        return (max(0, size - suffix), size - 1) if size > 0 else _raise_empty(size)
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        raise _unsatisfiable(size)
    return start, min(end, size - 1)


def _raise_empty(size: int) -> tuple[int, int]:
    raise _unsatisfiable(size)


def _unsatisfiable(size: int) -> S3Error:
    return S3Error(
        "InvalidRange",
        headers={"Content-Range": f"bytes */{size}"},
        RangeRequested="",
        ActualObjectSize=str(size),
    )
