"""The lean listing queries return what list_latest / list_versions return, column for
column, on both backends; each page is one index range scan (SQLite's query plan)."""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

import pytest
import sqlalchemy as sa

from objstore.engine.listing import list_grouped
from objstore.engine.versioning import list_version_page
from objstore.meta import listing_queries
from objstore.meta.driver import driver_statement
from objstore.meta.listing_queries import (
    ListingEntry,
    checksum_algorithm,
    entry_of,
    key_bounds,
    listed_checksum_algorithm,
)
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)
from tests.unit.test_metastore import (  # noqa: F401  (fixtures)
    BUCKET,
    LISTING_KEYS,
    delete_marker,
    listing_store,
    obj,
    store,
    versions_store,
)

PREFIXES = ["", "a", "a/", "a/b", "a%", "a\U0010ffff", "\ud7ff", "日", "x/y/", "é", "zz"]
AFTER = ["", "!", "a", "a%", "a/b", "a0", "b", "x/y/", "zzz", "\U0010ffff"]


def test_checksum_algorithm_of_the_stored_json() -> None:
    assert checksum_algorithm(None) is None
    assert checksum_algorithm("") is None
    assert checksum_algorithm("{}") is None
    assert checksum_algorithm('{"crc32":"AAAAAA=="}') == "CRC32"
    assert checksum_algorithm('{"crc64nvme":"AAAAAAAAAAA="}') == "CRC64NVME"
    # Several: the smallest name, whatever order the JSON holds them in.
    assert checksum_algorithm('{"sha256":"x=","crc32c":"y="}') == "CRC32C"
    assert checksum_algorithm('{"crc32":"y=","sha1":"x="}') == "CRC32"


def test_listed_checksum_algorithm_of_either_record() -> None:
    record = obj("k", checksums={"sha256": "x=", "crc32": "y="}, checksum_type="FULL_OBJECT")
    assert listed_checksum_algorithm(record) == "CRC32"
    assert listed_checksum_algorithm(entry_of(record)) == "CRC32"
    assert listed_checksum_algorithm(obj("k")) is None


@pytest.mark.parametrize(
    ("prefix", "after", "expected"),
    [
        ("", "", ("", False, None)),
        ("", "k", ("k", True, None)),
        ("a/", "", ("a/", False, "a0")),
        ("a/", "a", ("a/", False, "a0")),  # a marker before the prefix: the prefix bounds
        ("a/", "a/", ("a/", True, "a0")),
        ("a/", "a/x", ("a/x", True, "a0")),  # deep inside the prefix: start at the marker
        ("a/", "b", ("b", True, "a0")),  # past the prefix: an empty range
    ],
)
def test_key_bounds_take_the_larger_lower_bound(
    prefix: str, after: str, expected: tuple[str, bool, str | None]
) -> None:
    assert key_bounds(prefix, after) == expected


@pytest.mark.parametrize("prefix", PREFIXES)
def test_latest_entries_equal_list_latest(listing_store: SyncMetaStore, prefix: str) -> None:  # noqa: F811
    for after in AFTER:
        for limit in (1, 3, 1000):
            lean = listing_store.list_latest_entries(BUCKET, prefix, after, limit)
            full = listing_store.list_latest(BUCKET, prefix, after, limit)
            assert lean == [entry_of(r) for r in full], (prefix, after, limit)
    assert listing_store.list_latest_entries(BUCKET, prefix, "", 0) == []


def test_latest_entries_carry_the_listed_fields(store: SyncMetaStore) -> None:  # noqa: F811
    store.put_object(obj("k", "v1", size=42, etag="abc", last_modified=7.5, owner_id="u-9",
                         owner_name="nine", storage_class="STANDARD_IA",
                         checksums={"crc32c": "q="}, checksum_type="COMPOSITE",
                         user_metadata={"m": "1"}, tags={"t": "2"}))
    store.put_object(obj("m", "v1", checksums={}))
    store.put_object(delete_marker("z", "dm", 9.0))
    assert store.list_latest_entries(BUCKET) == [
        ListingEntry("k", "v1", 42, "abc", 7.5, True, False, "u-9", "nine", "STANDARD_IA",
                     "CRC32C", "COMPOSITE"),
        ListingEntry("m", "v1", 5, "d41d8cd98f00b204e9800998ecf8427e", 100.0, True, False,
                     "", "", "STANDARD", None, None),
    ]


@pytest.mark.parametrize("prefix", ["", "a", "c/", "c/x", "zz"])
def test_version_entries_equal_list_versions(versions_store: SyncMetaStore, prefix: str) -> None:  # noqa: F811
    markers = [("", ""), ("", "a2"), ("a", ""), ("a", "a3"), ("a", "a2"), ("a", "a1"),
               ("a", "gone"), ("b", "null"), ("c/", "c2"), ("c/", "c1"), ("c/x", "x1"),
               ("!", ""), ("zzz", "")]
    for key_marker, version_marker in markers:
        for limit in (1, 2, 3, 1000):
            lean = versions_store.list_version_entries(BUCKET, prefix, key_marker,
                                                       version_marker, limit)
            full = versions_store.list_versions(BUCKET, prefix, key_marker, version_marker,
                                                limit)
            assert lean == [entry_of(r) for r in full], (prefix, key_marker, version_marker)
    assert versions_store.list_version_entries(BUCKET, prefix, limit=0) == []


def test_version_entries_page_through_everything(versions_store: SyncMetaStore) -> None:  # noqa: F811
    everything = [entry_of(r) for r in versions_store.list_versions(BUCKET)]
    for page in (1, 2, 3):
        collected: list[ListingEntry] = []
        key_marker = version_marker = ""
        while True:
            batch = versions_store.list_version_entries(BUCKET, "", key_marker,
                                                        version_marker, page)
            collected += batch
            if len(batch) < page:
                break
            key_marker, version_marker = batch[-1].key, batch[-1].version_id
        assert collected == everything


# -- the skip scan of a delimiter listing -----------------------------------------------


def first_of_each_group(rows: list[ListingEntry], prefix: str,
                        delimiter: str) -> list[ListingEntry]:
    kept: list[ListingEntry] = []
    open_group: str | None = None
    for row in rows:
        if open_group is not None and row.key.startswith(open_group):
            continue
        kept.append(row)
        open_group = listing_queries.group_of(row.key, prefix, delimiter)
    return kept


@pytest.mark.parametrize("prefix", ["", "a", "a/", "x/", "日"])
def test_latest_skip_scan_keeps_the_first_row_of_each_group(
    listing_store: SyncMetaStore, prefix: str  # noqa: F811
) -> None:
    for delimiter in ("/", "b", "/y/"):
        for after in AFTER:
            everything = listing_store.list_latest_entries(BUCKET, prefix, after, 10_000)
            expected = first_of_each_group(everything, prefix, delimiter)
            for limit in (1, 2, 5, 1000):
                got = listing_store.list_latest_entries(BUCKET, prefix, after, limit, delimiter)
                assert got == expected[:limit], (prefix, delimiter, after, limit)


@pytest.mark.parametrize("prefix", ["", "c", "c/"])
def test_versions_skip_scan_keeps_the_first_row_of_each_group(
    versions_store: SyncMetaStore, prefix: str  # noqa: F811
) -> None:
    versions_store.put_object(obj("c/y/1", "y1", last_modified=1.0))
    versions_store.put_object(obj("c/y/2", "y2", last_modified=1.0))
    versions_store.put_object(obj("d", "d1", last_modified=1.0))
    markers = [("", ""), ("a", "a2"), ("c/", "c2"), ("c/", "c1"), ("c/x", ""), ("c/y/1", "y1")]
    for key_marker, version_marker in markers:
        everything = versions_store.list_version_entries(BUCKET, prefix, key_marker,
                                                         version_marker, 10_000)
        expected = first_of_each_group(everything, prefix, "/")
        for limit in (1, 2, 3, 1000):
            got = versions_store.list_version_entries(BUCKET, prefix, key_marker,
                                                      version_marker, limit, "/")
            assert got == expected[:limit], (prefix, key_marker, version_marker, limit)


def _walk(fetch: Any, prefix: str, delimiter: str, page: int) -> list[str]:
    items: list[str] = []
    after = ""
    for _ in range(200):
        result = asyncio.run(list_grouped(fetch, prefix=prefix, delimiter=delimiter,
                                          start_after=after, max_keys=page,
                                          batch_size=min(page + 1, 1001)))
        items += [r.key for r in result.contents] + ["P:" + p for p in result.common_prefixes]
        if not result.is_truncated:
            return items
        after = result.resume_after
    raise AssertionError("no end")


@pytest.mark.parametrize("prefix", ["", "a", "a/", "x/"])
def test_engine_pages_over_the_skip_scan_equal_pages_over_full_rows(
    listing_store: SyncMetaStore, prefix: str  # noqa: F811
) -> None:
    async def lean(p: str, after: str, limit: int) -> list[ListingEntry]:
        return listing_store.list_latest_entries(BUCKET, p, after, limit, "/")

    async def full(p: str, after: str, limit: int) -> list[object]:
        return list(listing_store.list_latest(BUCKET, p, after, limit))

    for page in (1, 2, 1000):
        assert _walk(lean, prefix, "/", page) == _walk(full, prefix, "/", page)


# -- one index range scan per page (SQLite) --------------------------------------------


def _plan(meta: SyncMetaStore, statement: sa.Select[object], index: str) -> str:
    sql = driver_statement(meta.engine.dialect, statement, index).sql
    with meta.engine.connect() as conn:
        rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}",
                                    tuple("x" for _ in range(sql.count("?")))).all()
    return " | ".join(str(row[-1]) for row in rows)


@pytest.mark.parametrize("variant", [(False, False), (False, True), (True, False), (True, True)])
def test_sqlite_pages_are_index_range_scans(store: SyncMetaStore,  # noqa: F811
                                            variant: tuple[bool, bool]) -> None:
    if store.backend != "sqlite":
        pytest.skip("EXPLAIN QUERY PLAN is SQLite's; see bench/README.md for PostgreSQL")
    latest = _plan(store, listing_queries._LATEST[variant], listing_queries.LATEST_INDEX)
    assert "SEARCH objects USING INDEX ux_objects_latest (bucket=? AND key>" in latest
    versions = _plan(store, listing_queries._VERSIONS[variant], listing_queries.VERSIONS_INDEX)
    assert "SEARCH objects USING INDEX ix_objects_versions (bucket=? AND key>" in versions
    older = _plan(store, listing_queries._OLDER_THAN_MARKER, listing_queries.VERSIONS_INDEX)
    assert "SEARCH objects USING INDEX ix_objects_versions (bucket=? AND key=?)" in older
    for plan in (latest, versions, older):
        assert "TEMP B-TREE" not in plan and "SCAN" not in plan, plan


# -- a page of CommonPrefixes reads a few rows per group --------------------------------


def test_groups_are_skipped_reading_a_few_rows_each() -> None:
    keys = [f"d{d:03d}/o{n:03d}" for d in range(300) for n in range(200)]  # 60,000 keys
    entries = [ListingEntry(k, "null", 1, "e", 0.0, True, False, "", "", "STANDARD", None,
                            None) for k in keys]
    read: list[int] = []

    def after(prefix: str, marker: str, limit: int) -> list[ListingEntry]:
        start = bisect.bisect_right(keys, max(marker, prefix))
        if marker < prefix:
            start = bisect.bisect_left(keys, prefix)
        return [e for e in entries[start:start + limit] if e.key.startswith(prefix)]

    async def fetch(prefix: str, marker: str, limit: int) -> list[ListingEntry]:
        rows = after(prefix, marker, limit)
        read.append(len(rows))
        return rows

    result = asyncio.run(list_grouped(fetch, prefix="", delimiter="/", start_after="",
                                      max_keys=1000, batch_size=1001))
    assert len(result.common_prefixes) == 300 and not result.is_truncated
    assert sum(read) < 1001 + 8 * 300  # not 1000 rows per group
    inside = asyncio.run(list_grouped(fetch, prefix="d005/", delimiter="/", start_after="",
                                      max_keys=1000, batch_size=1001))
    assert [e.key for e in inside.contents] == keys[1000:1200]

    versions: list[int] = []

    async def fetch_versions(prefix: str, key_marker: str, version_marker: str,
                             limit: int) -> list[ListingEntry]:
        rows = after(prefix, key_marker, limit)
        versions.append(len(rows))
        return rows

    page = asyncio.run(list_version_page(fetch_versions, prefix="", delimiter="/",
                                         key_marker="", version_marker="", max_keys=1000))
    assert len(page.common_prefixes) == 300 and not page.is_truncated
    assert sum(versions) < 1001 + 8 * 300
