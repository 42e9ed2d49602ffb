"""Delimiter grouping over an in-memory key set, compared with a brute-force model."""

from __future__ import annotations

import asyncio

import pytest

from objstore.engine.listing import list_grouped, resume_point
from objstore.meta.records import ObjectRecord

KEYS = sorted([
    "a", "a/", "a/1", "a/2", "a/b/1", "b", "c/x", "c/y", "c/z/1", "d", "é/1", "photos/",
    "photos/2024/a.jpg", "photos/2024/b.jpg", "photos/2025/c.jpg", "photos/top.jpg",
])


def record(key: str) -> ObjectRecord:
    return ObjectRecord("bkt", key, "null", "00000000-0000-0000-0000-000000000000", 1, "e",
                        0.0)


async def fetch(prefix: str, after: str, limit: int) -> list[ObjectRecord]:
    found = [k for k in KEYS if k.startswith(prefix) and k > after]
    return [record(k) for k in found[:limit]]


def model(prefix: str, delimiter: str) -> list[str]:
    items: list[str] = []
    for key in KEYS:
        if not key.startswith(prefix) or (delimiter and key == prefix):
            continue
        rest = key[len(prefix):]
        if delimiter and delimiter in rest:
            group = prefix + rest[: rest.index(delimiter) + len(delimiter)]
            if group not in items:
                items.append(group)
        else:
            items.append(key)
    return items


def run(**kwargs: object):  # type: ignore[no-untyped-def]
    return asyncio.run(list_grouped(fetch, **kwargs))  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["", "a", "a/", "photos/", "photos/2024/", "zz"])
@pytest.mark.parametrize("delimiter", ["", "/"])
@pytest.mark.parametrize("page", [1, 2, 3, 1000])
@pytest.mark.parametrize("batch", [1, 2, 1000])
def test_paging_matches_model(prefix: str, delimiter: str, page: int, batch: int) -> None:
    seen: list[str] = []
    after = ""
    for _ in range(100):
        result = run(prefix=prefix, delimiter=delimiter, start_after=after, max_keys=page,
                     batch_size=batch)
        items = [r.key for r in result.contents] + result.common_prefixes
        assert len(items) <= page
        seen += sorted(items)
        if not result.is_truncated:
            break
        after = result.resume_after
    assert seen == model(prefix, delimiter)


def test_max_keys_zero_is_not_truncated() -> None:
    result = run(prefix="", delimiter="", start_after="", max_keys=0)
    assert result.contents == [] and not result.is_truncated


def test_groups_count_once_before_the_cut() -> None:
    result = run(prefix="photos/", delimiter="/", start_after="", max_keys=2)
    assert result.common_prefixes == ["photos/2024/", "photos/2025/"]
    assert result.is_truncated


def test_resume_point_skips_a_group() -> None:
    assert resume_point("photos/2024/", "/") > "photos/2024/zzzz"
    assert resume_point("a", "/") == "a"
