import pytest

from objstore.errors import S3Error
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
    ],
)
def test_satisfiable_or_ignored(header: str | None, size: int, expected: object) -> None:
    assert parse_range(header, size) == expected


@pytest.mark.parametrize(("header", "size"), [("bytes=10-", 10), ("bytes=-0", 10),
                                              ("bytes=0-", 0), ("bytes=-5", 0)])
def test_unsatisfiable(header: str, size: int) -> None:
    with pytest.raises(S3Error) as caught:
        parse_range(header, size)
    assert caught.value.status == 416
    assert caught.value.headers["Content-Range"] == f"bytes */{size}"
