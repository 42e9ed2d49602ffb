"""User metadata values in and out (objstore/s3/meta_values.py), as AWS documents them:
RFC 2047 decoded before storing, encoded when not printable US-ASCII on the way out."""

from __future__ import annotations

from email.header import decode_header, make_header

from hypothesis import given
from hypothesis import strategies as st

from objstore.s3.meta_values import returned_value, stored_value


def test_examples() -> None:
    assert stored_value("=?UTF-8?B?SGVsbG8gV29ybGTDqQ==?=") == "Hello Worldé"
    assert stored_value("=?UTF-8?Q?Hello_World=C3=A9?=") == "Hello Worldé"
    assert stored_value("plain  value") == "plain  value"
    assert stored_value("=?broken") == "=?broken"
    assert returned_value("plain value") == "plain value"
    assert returned_value("Hello Worldé") == "=?UTF-8?Q?Hello_World=C3=A9?="
    assert returned_value("\x04mymeta") == "=?UTF-8?Q?=04mymeta?="


@given(st.text(max_size=40))
def test_round_trip(value: str) -> None:
    sent = returned_value(value)
    assert sent.isascii()
    if sent != value:
        assert str(make_header(decode_header(sent))) == value
        assert stored_value(sent) == value


def test_tab_is_returned_as_is() -> None:
    from objstore.s3.meta_values import returned_value
    assert returned_value("blue\tgreen") == "blue\tgreen"
    assert returned_value("a\x01b").startswith("=?UTF-8?Q?")
