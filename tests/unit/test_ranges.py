import pytest

from objstore.errors import S3Error
from objstore.s3.copy_source import parse_copy_range
from objstore.s3.ranges import parse_range


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 10, None),
        ("bytes=0-4", 10, (0, 4)),
        ("bytes=5-", 10, (5, 9)),
        ("bytes=-3", 10, (7, 9)),
        ("bytes=-30", 10, (0, 9)),
        ("bytes=2-100", 10, (2, 9)),
        ("bytes=9-9", 10, (9, 9)),
        ("bytes=0-1,3-4", 10, None),  # multiple ranges: whole object, as S3
        ("items=0-1", 10, None),
        ("bytes=5-2", 10, None),
        ("bytes=0-²", 10, None),  # not digits: ignored, as any malformed range
        ("bytes=٣-", 10, None),
        ("bytes=0-" + "9" * 5000, 10, (0, 9)),  # past the end: clamped, never int()'ed
        ("bytes=-" + "9" * 5000, 10, (0, 9)),
        ("bytes=0-" + "9" * 21, 10, (0, 9)),
    ],
)
def test_satisfiable_or_ignored(header: str | None, size: int, expected: object) -> None:
    assert parse_range(header, size) == expected


@pytest.mark.parametrize(("header", "size"), [("bytes=10-", 10), ("bytes=-0", 10),
                                              ("bytes=0-", 0), ("bytes=-5", 0),
                                              ("bytes=" + "9" * 5000 + "-", 10)])
def test_unsatisfiable(header: str, size: int) -> None:
    with pytest.raises(S3Error) as caught:
        parse_range(header, size)
    assert caught.value.status == 416
    assert caught.value.headers["Content-Range"] == f"bytes */{size}"


@pytest.mark.parametrize(("header", "code"), [
    ("bytes=0-²", "InvalidArgument"), ("bytes=٣-٤", "InvalidArgument"),
    ("bytes=0-" + "9" * 5000, "InvalidRange"), ("bytes=" + "9" * 5000 + "-1", "InvalidRange"),
    ("bytes=0-4,6-7", "InvalidArgument"),
])
def test_copy_source_ranges_with_odd_digits(header: str, code: str) -> None:
    with pytest.raises(S3Error) as caught:
        parse_copy_range(header, 10)
    assert caught.value.code == code


def test_copy_source_range() -> None:
    assert parse_copy_range("bytes=2-5", 10) == (2, 4)
    assert parse_copy_range(None, 10) is None
