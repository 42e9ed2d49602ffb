"""Numbers in query parameters, headers and XML elements: one rule (1 to 20 ASCII digits)
and the S3 refusals built on it; never a ValueError from int()."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from objstore.http.client_bytes import decimal, signed_decimal
from objstore.s3 import params
from objstore.s3.listing import decode_token
from tests.fuzz.outcomes import Refused, outcome
from tests.fuzz.strategies import any_text, numbers

ASCII_NUMBER = re.compile(r"[0-9]{1,20}")


@given(st.one_of(numbers, any_text))
def test_the_rule(text: str) -> None:
    value = decimal(text)
    if ASCII_NUMBER.fullmatch(text):
        assert value == int(text)
    else:
        assert value is None
    signed = signed_decimal(text)
    assert signed is None or abs(signed) == decimal(text.removeprefix("-"))


@given(st.one_of(numbers, any_text))
def test_every_number_parameter(raw: str) -> None:
    for found in (outcome(params.max_keys, raw), outcome(params.part_number, raw),
                  outcome(params.count_argument, raw, "max-uploads", 1000),
                  outcome(params.integer_argument, raw, "max-buckets", "m", low=1,
                          high=10000)):
        assert isinstance(found, int) or (isinstance(found, Refused)
                                          and found.code == "InvalidArgument")
    outcome(params.encoding_type, {"encoding-type": raw})


@given(st.one_of(any_text, st.binary(max_size=40).map(lambda b: b.hex())))
def test_continuation_tokens(token: str) -> None:
    outcome(decode_token, token)
