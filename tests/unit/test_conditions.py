import pytest

from objstore.errors import S3Error
from objstore.s3.conditions import evaluate
from objstore.s3.copy_source import parse_copy_range, parse_copy_source

MODIFIED = 1_700_000_000.5  # Tue, 14 Nov 2023 22:13:20 GMT
BEFORE = "Tue, 14 Nov 2023 22:00:00 GMT"
AFTER = "Tue, 14 Nov 2023 23:00:00 GMT"
EXACT = "Tue, 14 Nov 2023 22:13:20 GMT"


@pytest.mark.parametrize(("headers", "code"), [
    ({}, None),
    ({"if-match": '"abc"'}, None),
    ({"if-match": "abc, other"}, None),
    ({"if-match": "*"}, None),
    ({"if-match": '"nope"'}, "PreconditionFailed"),
    ({"if-none-match": '"abc"'}, "NotModified"),
    ({"if-none-match": "*"}, "NotModified"),
    ({"if-none-match": '"nope"'}, None),
    ({"if-modified-since": AFTER}, "NotModified"),
    ({"if-modified-since": EXACT}, "NotModified"),
    ({"if-modified-since": BEFORE}, None),
    ({"if-unmodified-since": BEFORE}, "PreconditionFailed"),
    ({"if-unmodified-since": EXACT}, None),
    ({"if-unmodified-since": "not a date"}, None),
    # If-Match wins over If-Unmodified-Since; If-None-Match over If-Modified-Since
    ({"if-match": "abc", "if-unmodified-since": BEFORE}, None),
    ({"if-none-match": "nope", "if-modified-since": AFTER}, None),
    ({"if-match": "abc", "if-none-match": "abc"}, "NotModified"),
])
def test_get_conditions(headers: dict[str, str], code: str | None) -> None:
    if code is None:
        evaluate(headers, "abc", MODIFIED)
        return
    with pytest.raises(S3Error) as caught:
        evaluate(headers, "abc", MODIFIED)
    assert caught.value.code == code


def test_copy_source_conditions_fail_with_412() -> None:
    with pytest.raises(S3Error) as caught:
        evaluate({"x-amz-copy-source-if-none-match": "abc"}, "abc", MODIFIED,
                 prefix="x-amz-copy-source-if-", not_modified_code="PreconditionFailed")
    assert caught.value.status == 412


@pytest.mark.parametrize(("header", "expected"), [
    ("bkt/key", ("bkt", "key", None)),
    ("/bkt/dir/a%20b%2Bc", ("bkt", "dir/a b+c", None)),
    ("bkt/k%C3%BC?versionId=v1", ("bkt", "kü", "v1")),
    ("bkt/trailing/", ("bkt", "trailing/", None)),
])
def test_parse_copy_source(header: str, expected: tuple[str, str, str | None]) -> None:
    source = parse_copy_source(header)
    assert (source.bucket, source.key, source.version_id) == expected


@pytest.mark.parametrize("header", ["bkt", "/bkt/", "", "bkt/k?versionId=", "bkt/%ff"])
def test_bad_copy_source(header: str) -> None:
    with pytest.raises(S3Error):
        parse_copy_source(header)


def test_copy_range() -> None:
    assert parse_copy_range(None, 10) is None
    assert parse_copy_range("bytes=0-4", 10) == (0, 5)
    assert parse_copy_range("bytes=9-9", 10) == (9, 1)
    for bad, code in [("bytes=0-10", "InvalidRange"), ("bytes=5-", "InvalidArgument"),
                      ("bytes=4-2", "InvalidRange"), ("0-1", "InvalidArgument")]:
        with pytest.raises(S3Error) as caught:
            parse_copy_range(bad, 10)
        assert caught.value.code == code
