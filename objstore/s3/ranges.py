"""Pure parsing of HTTP Range headers for GET/HEAD of objects, as S3 interprets them.

Positions are ASCII digits only (`[0-9]`, not Python's `\\d`, which takes every Unicode
decimal digit). A position longer than `client_bytes.MAX_DIGITS` is past the end of any
object (2**64), read as such without converting thousands of digits: `bytes=0-<huge>`
is the whole object, `bytes=<huge>-` is unsatisfiable, as RFC 9110 reads them.
"""

from __future__ import annotations

import re

from objstore.errors import S3Error
from objstore.http.client_bytes import MAX_DIGITS, decimal

_SINGLE = re.compile(r"^[ \t]*bytes[ \t]*=[ \t]*([0-9]*)[ \t]*-[ \t]*([0-9]*)[ \t]*$")
BEYOND_ANY_OBJECT = 2**64


def position(digits: str) -> int:
    """A byte position written in ASCII digits (checked by the caller's pattern); one too
    long to be read is beyond the end of any object."""
    value = decimal(digits, MAX_DIGITS)
    return BEYOND_ANY_OBJECT if value is None else value


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
        suffix = position(last)
        if suffix == 0:
            raise _unsatisfiable(size)
        return (max(0, size - suffix), size - 1) if size > 0 else _raise_empty(size)
    start = position(first)
    end = position(last) if last else size - 1
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
