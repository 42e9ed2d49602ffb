"""How the bytes a client sends become values: the one rule for header values and the one
rule for decimal numbers, used by every parser that reads a request (the body sink,
SigV4, the S3 handlers, their query parameters and XML bodies).

Header values are UTF-8 or refused. twisted.web keeps a header's value as the bytes that
arrived; a value that is not UTF-8 is refused with 400 InvalidArgument naming the header,
and only when something reads it, so a header nobody acts on (an odd User-Agent) never
fails a request. Where such bytes must be shown (the audit log, the ArgumentValue of an
error document) they are escaped (`\\xff`), never passed on raw.

A decimal number is 1 to `MAX_DIGITS` ASCII digits: no sign, no spaces, no underscores,
no other Unicode digits. Python's int() accepts " 7", "1_000" and "٣" and raises
ValueError past 4,300 digits, and str.isdigit() is true for "²", which int() refuses:
neither is ever applied to client text before this rule has accepted it.

Pure functions; no Twisted, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from objstore.errors import S3Error

# 2**64 has 20 digits: more than any count, size or position S3 accepts.
MAX_DIGITS = 20


def decimal(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """The value of `text` when it is 1 to `max_digits` ASCII digits, else None."""
    if 0 < len(text) <= max_digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def signed_decimal(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """`decimal`, with an optional leading "-" (XML elements that are xsd:int)."""
    if text.startswith("-"):
        value = decimal(text[1:], max_digits)
        return None if value is None else -value
    return decimal(text, max_digits)


def escaped(raw: bytes) -> str:
    """`raw` as text that can be logged, stored and rendered: UTF-8, any other byte as
    `\\xNN`."""
    return raw.decode("utf-8", "backslashreplace")


def header_value(name: str, values: Sequence[bytes]) -> str:
    """The value of header `name` (repeated values joined with ","), decoded as UTF-8;
    S3Error InvalidArgument when it is not UTF-8."""
    raw = values[0] if len(values) == 1 else b",".join(values)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidArgument", f"The value of the {name} header is not valid UTF-8.",
                      ArgumentName=name, ArgumentValue=escaped(raw)) from None


def loggable_header(values: Sequence[bytes] | None) -> str:
    """A header's value for the audit log: never fails, whatever its bytes."""
    return escaped(b",".join(values)) if values else ""


class HeaderValues(Mapping[str, str]):
    """A request's headers by lower-case name; a value is decoded (`header_value`) when
    it is read, so only the headers a handler reads can refuse the request."""

    __slots__ = ("_raw",)

    def __init__(self, raw_headers: Iterable[tuple[bytes, Sequence[bytes]]]) -> None:
        self._raw: dict[str, Sequence[bytes]] = {}
        for name, values in raw_headers:
            key = name.decode("latin-1").lower()
            previous = self._raw.get(key)
            self._raw[key] = values if previous is None else [*previous, *values]

    def __getitem__(self, name: str) -> str:
        return header_value(name, self._raw[name])

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)
