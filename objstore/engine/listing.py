"""Delimiter grouping for object listings, over a page-fetching function.

Grouping happens before the max-keys cut: many keys collapsing into one CommonPrefix count
once, and a whole group is skipped with one new range query rather than read key by key.
A batch is used to its end: rows of a group already counted are passed over, so a fetch
may return only the first row of each group (the metadata store's skip scan does, inside
one transaction). When a batch did hold further rows of a group, the next fetch asks for a
few rows only (AFTER_GROUP_BATCH, doubling while whole batches are listed): a page of 1000
CommonPrefixes must not read 1000 rows per group. `max_keys == 0` returns nothing and is
not truncated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from objstore.meta.keyspace import group_of

# Sorts after every key that starts with a given prefix (keys are compared by code point).
_AFTER_ALL = "\U0010ffff"
# Rows asked for after skipping a group: the next row usually starts another group.
AFTER_GROUP_BATCH = 8


class Keyed(Protocol):
    """A listed entry: an ObjectRecord or a meta.listing_queries.ListingEntry."""

    @property
    def key(self) -> str: ...


EntryT = TypeVar("EntryT", bound=Keyed)
# (prefix, start_after, limit) -> entries by key
Fetch = Callable[[str, str, int], Awaitable[Sequence[EntryT]]]


@dataclass
class ListResult(Generic[EntryT]):
    contents: list[EntryT] = field(default_factory=list)
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
    fetch: Fetch[EntryT],
    *,
    prefix: str,
    delimiter: str,
    start_after: str,
    max_keys: int,
    batch_size: int = 1000,
) -> ListResult[EntryT]:
    result: ListResult[EntryT] = ListResult()
    if max_keys <= 0:
        return result
    cursor = start_after
    if start_after < prefix:
        cursor = ""
    limit = batch_size
    while True:
        batch = await fetch(prefix, cursor, limit)
        open_group: str | None = None  # the group of the rows being passed over
        passed_over = False
        for record in batch:
            if open_group is not None and record.key.startswith(open_group):
                passed_over = True
                continue
            open_group = None
            if len(result.contents) + len(result.common_prefixes) >= max_keys:
                result.is_truncated = True
                return result
            cursor = record.key
            if delimiter and record.key == prefix:
                continue  # the directory marker equal to the prefix is not listed (spec)
            group = group_of(record.key, prefix, delimiter)
            if group is not None:
                cursor = group + _AFTER_ALL
                open_group = group
                if group > start_after:
                    result.common_prefixes.append(group)
                    result.last_item = group
                    result.resume_after = cursor
                continue
            result.contents.append(record)
            result.last_item = record.key
            result.resume_after = record.key
        if len(batch) < limit:
            return result
        limit = min(batch_size, AFTER_GROUP_BATCH if passed_over else limit * 2)
