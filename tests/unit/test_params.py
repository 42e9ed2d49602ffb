"""Numbers in query parameters and headers (objstore/s3/params.py): one rule for all of
them, a 400 InvalidArgument naming the parameter for anything that is not 1 to 20 ASCII
digits within the operation's range, never a ValueError (a 500)."""

from __future__ import annotations

import pytest

from objstore.errors import S3Error
from objstore.s3.params import (
    count_argument,
    encoding_type,
    integer_argument,
    max_keys,
    part_number,
)

HOSTILE = ["", "-1", "1.5", "abc", "²", "٣", "１", "1_000", "0x10", "9" * 21, "9" * 5000]


def refused(fn: object, *args: object) -> S3Error:
    with pytest.raises(S3Error) as caught:
        fn(*args)  # type: ignore[operator]
    assert (caught.value.code, caught.value.status) == ("InvalidArgument", 400)
    return caught.value


@pytest.mark.parametrize("raw", HOSTILE)
def test_every_number_parameter_refuses_what_is_not_ascii_digits(raw: str) -> None:
    assert refused(max_keys, raw).fields == {"ArgumentName": "max-keys", "ArgumentValue": raw}
    refused(part_number, raw)
    assert refused(count_argument, raw, "x-amz-max-parts", 1000).fields["ArgumentName"] == (
        "x-amz-max-parts")
    refused(integer_argument, raw, "max-buckets", "m")


def test_ranges_and_defaults() -> None:
    assert max_keys(None) == 1000
    assert max_keys("0") == 0
    assert max_keys("5000") == 1000
    assert max_keys(" 7 ") == 7
    assert count_argument(None, "max-uploads", 1000) == 1000
    assert count_argument("12", "max-uploads", 1000) == 12
    assert part_number("10000") == 10000
    refused(part_number, "0")
    refused(part_number, "10001")
    refused(part_number, None)
    assert integer_argument("10000", "max-buckets", "m", low=1, high=10000) == 10000
    with pytest.raises(S3Error):
        integer_argument("10001", "max-buckets", "m", low=1, high=10000)


def test_encoding_type() -> None:
    assert encoding_type({}) is None
    assert encoding_type({"encoding-type": "url"}) == "url"
    refused(encoding_type, {"encoding-type": "base64"})
