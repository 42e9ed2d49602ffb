"""The two rules for client bytes (objstore/http/client_bytes.py): decimal numbers are 1 to
20 ASCII digits, nothing else; header values are UTF-8, refused with InvalidArgument only
when read, and shown escaped."""

from __future__ import annotations

import pytest

from objstore.errors import S3Error
from objstore.http.client_bytes import (
    HeaderValues,
    decimal,
    header_value,
    loggable_header,
    signed_decimal,
)


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("7", 7), ("007", 7), ("10000", 10000), ("9" * 20, int("9" * 20)),
])
def test_ascii_digits_are_numbers(text: str, value: int) -> None:
    assert decimal(text) == value


@pytest.mark.parametrize("text", [
    "", " 7", "7 ", "+7", "-7", "1_000", "1.5", "0x10", "²", "٣", "７", "1²", "9" * 21,
    "9" * 5000,
])
def test_anything_else_is_not_a_number(text: str) -> None:
    # int() accepts " 7", "1_000", "٣" and "７"; "²".isdigit() is True; 5,000 digits raise.
    assert decimal(text) is None


def test_a_smaller_bound_and_a_sign() -> None:
    assert decimal("12345", max_digits=4) is None
    assert signed_decimal("-12") == -12
    assert signed_decimal("12") == 12
    assert signed_decimal("--12") is None
    assert signed_decimal("-") is None
    assert signed_decimal("-²") is None


def test_header_values_are_utf8() -> None:
    assert header_value("x-amz-meta-a", [b"caf\xc3\xa9"]) == "café"
    assert header_value("x-amz-meta-a", [b"a", b"b"]) == "a,b"


def test_a_value_that_is_not_utf8_is_invalid_argument_with_its_bytes_escaped() -> None:
    with pytest.raises(S3Error) as caught:
        header_value("range", [b"bytes=0-\xff"])
    assert (caught.value.code, caught.value.status) == ("InvalidArgument", 400)
    assert caught.value.fields == {"ArgumentName": "range", "ArgumentValue": "bytes=0-\\xff"}


def test_only_the_headers_read_can_refuse() -> None:
    headers = HeaderValues([(b"User-Agent", [b"bad\xff"]), (b"Content-Type", [b"text/plain"])])
    assert headers["content-type"] == "text/plain"
    assert headers.get("x-amz-meta-missing") is None
    assert "user-agent" in headers and sorted(headers) == ["content-type", "user-agent"]
    with pytest.raises(S3Error):
        headers.get("user-agent")


def test_loggable_header_never_fails() -> None:
    assert loggable_header([b"bad\xff\xfeagent"]) == "bad\\xff\\xfeagent"
    assert loggable_header(None) == ""
    assert loggable_header([b"ok", b"\x80"]) == "ok,\\x80"
