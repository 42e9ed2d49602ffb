"""json_input.parse_json, the one reader of JSON from outside: hostile documents are a
JsonInputError (a ValueError), never a RecursionError or an integer SQLite cannot store;
everything else reads as json.loads reads it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from objstore.json_input import INT64_MAX, INT64_MIN, MAX_DEPTH, JsonInputError, parse_json


@pytest.mark.parametrize("body", [
    b"[" * 100_000,
    b'{"a":' * 100_000,
    b"[" * 100_000 + b"]" * 100_000,
    b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
    b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1),
], ids=["open-arrays", "open-objects", "closed-arrays", "one-too-deep", "objects-too-deep"])
def test_deep_nesting_is_refused(body: bytes) -> None:
    with pytest.raises(JsonInputError, match="nested deeper"):
        parse_json(body)


def test_nesting_up_to_the_limit_reads() -> None:
    assert parse_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    assert parse_json(b"[[1]]", max_depth=2) == [[1]]
    with pytest.raises(JsonInputError):
        parse_json(b"[[1]]", max_depth=1)


@pytest.mark.parametrize("text", [str(INT64_MAX + 1), str(INT64_MIN - 1), str(10 ** 30),
                                  f'{{"since": {2 ** 63}}}', f"[1, {-(2 ** 64)}]"])
def test_integers_outside_signed_64_bit_are_refused(text: str) -> None:
    with pytest.raises(JsonInputError, match="signed 64-bit"):
        parse_json(text)


def test_the_ends_of_signed_64_bit_read() -> None:
    assert parse_json(f"[{INT64_MIN}, {INT64_MAX}]") == [INT64_MIN, INT64_MAX]


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "[1e999]", "-1e400"])
def test_non_finite_numbers_are_refused(text: str) -> None:
    with pytest.raises(JsonInputError):
        parse_json(text)


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe", b"[1,]", "9" * 5000])
def test_malformed_input_is_a_value_error(body: bytes | str) -> None:
    with pytest.raises(ValueError):  # JsonInputError is one: callers catch ValueError
        parse_json(body)


JSON_VALUES: Any = st.recursive(
    st.none() | st.booleans() | st.integers(INT64_MIN, INT64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20)


@given(JSON_VALUES)
def test_documents_within_the_limits_read_as_json_loads_reads_them(value: Any) -> None:
    text = json.dumps(value)
    assert parse_json(text) == json.loads(text)
    assert parse_json(text.encode()) == json.loads(text)
