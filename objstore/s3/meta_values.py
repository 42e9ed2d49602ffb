"""User metadata values (x-amz-meta-*) as AWS keeps and returns them: a value sent as RFC
2047 encoded words (``=?UTF-8?B?...?=``) is stored decoded; a stored value holding
anything but printable US-ASCII (or tab, which a header value may hold) is returned RFC
2047-encoded (``=?UTF-8?Q?...?=``) so that the header stays mail-safe, and an ASCII value
as it is. Pure functions."""

from __future__ import annotations

from email import quoprimime
from email.errors import HeaderParseError
from email.header import decode_header, make_header


def stored_value(sent: str) -> str:
    """The value to store for a header value as sent."""
    if "=?" not in sent:
        return sent
    try:
        return str(make_header(decode_header(sent)))
    except (HeaderParseError, LookupError, UnicodeDecodeError, ValueError):
        return sent


def returned_value(stored: str) -> str:
    """The header value that returns a stored value."""
    if stored.isascii() and stored.replace("\t", " ").isprintable():
        return stored
    encoded = quoprimime.header_encode(stored.encode("utf-8", "surrogateescape"), "UTF-8")
    return encoded.replace("=?UTF-8?q?", "=?UTF-8?Q?", 1)
