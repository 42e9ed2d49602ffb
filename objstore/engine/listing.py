"""Delimiter grouping for object listings, over a page-fetching function.

Grouping happens before the max-keys cut: many keys collapsing into one CommonPrefix count
once, and a whole group is skipped with one new range query rather than read key by key.
`max_keys == 0` returns nothing and is not truncated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from objstore.meta.records import ObjectRecord

# Sorts after every key that starts with a given prefix (keys are compared by code point).
_AFTER_ALL = "\U0010ffff"

Fetch = Callable[[str, str, int], Awaitable[list[ObjectRecord]]]  # (prefix, start_after, limit)


@dataclass
class ListResult:
    contents: list[ObjectRecord] = field(default_factory=list)
    common_prefixes: list[str] = field(default_factory=list)
    is_truncated: bool = False
    last_item: str = ""  # the last key or common prefix returned (V1 NextMarker)
    resume_after: str = ""  # where the next page starts (V2 continuation cursor)


def resume_point(item: str, delimiter: str) -> str:
    """The exclusive start for the page after `item` (a key, or a common prefix)."""
    if delimiter and item.endswith(delimiter):
        return item + _AFTER_ALL
    return item


async def list_grouped(
    fetch: Fetch,
    *,
    prefix: str,
    delimiter: str,
    start_after: str,
    max_keys: int,
    batch_size: int = 1000,
) -> ListResult:
    result = ListResult()
    if max_keys <= 0:
        return result
    cursor = start_after
    if start_after < prefix:
        cursor = ""
    while True:
        batch = await fetch(prefix, cursor, batch_size)
        skipped = False
        for record in batch:
            if len(result.contents) + len(result.common_prefixes) >= max_keys:
                result.is_truncated = True
                return result
            cursor = record.key
            if delimiter and record.key == prefix:
                continue  # the directory marker equal to the prefix is not listed (spec)
            group = _group_of(record.key, prefix, delimiter)
            if group is not None:
                cursor = group + _AFTER_ALL
                skipped = True
                if group > start_after:
                    result.common_prefixes.append(group)
                    result.last_item = group
                    result.resume_after = cursor
                break
            result.contents.append(record)
            result.last_item = record.key
            result.resume_after = record.key
        if not skipped and len(batch) < batch_size:
            return result


def _group_of(key: str, prefix: str, delimiter: str) -> str | None:
    if not delimiter:
        return None
    index = key.find(delimiter, len(prefix))
    if index < 0:
        return None
    return key[: index + len(delimiter)]
