import pytest

from objstore.errors import S3Error
from objstore.s3.tagging_header import (
    encode_tagging_header,
    parse_tagging_header,
    validate_tags,
)


def code(header: str) -> str:
    with pytest.raises(S3Error) as caught:
        parse_tagging_header(header)
    return caught.value.code


@pytest.mark.parametrize(("header", "tags"), [
    (None, {}),
    ("", {}),
    ("a=1", {"a": "1"}),
    ("a=1&b=2", {"a": "1", "b": "2"}),
    ("empty=", {"empty": ""}),
    ("bare", {"bare": ""}),
    ("two%20words=a%2Bb", {"two words": "a+b"}),
    ("plus+is+space=x+y", {"plus is space": "x y"}),
    ("ключ=значение", {"ключ": "значение"}),
    ("%D0%BA=%D0%B7", {"к": "з"}),
    ("path=/a/b:c@d.e_f-g", {"path": "/a/b:c@d.e_f-g"}),
    ("&".join(f"k{i}=v" for i in range(10)), {f"k{i}": "v" for i in range(10)}),
    ("k" * 128 + "=" + "v" * 256, {"k" * 128: "v" * 256}),
    ("awsome=1", {"awsome": "1"}),
])
def test_valid_headers(header: str | None, tags: dict[str, str]) -> None:
    assert parse_tagging_header(header) == tags


def test_order_is_kept() -> None:
    assert list(parse_tagging_header("z=1&a=2&m=3")) == ["z", "a", "m"]


@pytest.mark.parametrize("header", [
    "&".join(f"k{i}=v" for i in range(11)),
    "k" * 129 + "=v",
    "k=" + "v" * 257,
    "k=1&k=2",
    "aws:name=x",
    "AWS:name=x",
    "=value",
    "star*=1",
    "k=semi;colon",
    "k=%00",
])
def test_invalid_headers(header: str) -> None:
    assert code(header) == "InvalidTag"


def test_undecodable_percent_escape_is_an_invalid_argument() -> None:
    assert code("k=%FF") == "InvalidArgument"


def test_duplicate_key_is_named() -> None:
    with pytest.raises(S3Error) as caught:
        validate_tags([("a", "1"), ("a", "2")])
    assert caught.value.fields["TagKey"] == "a"
    assert "same key" in caught.value.message


def test_encode_round_trips() -> None:
    tags = {"two words": "a+b=c d", "ключ": "", "x/y": "@:"}
    assert parse_tagging_header(encode_tagging_header(tags)) == tags
