"""The listing benchmark's pure helpers: the seeded layout, the pages it measures (their
expected entry counts against a brute-force model of S3 listing), the table, the verdicts
and where a run goes in RESULTS.md. The benchmark itself never runs in the test suite."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from bench.listing import (
    KEYS_PER_DIR,
    PAGE,
    Bucket,
    Measured,
    Page,
    _records,
    buckets_for,
    busy_ticks,
    format_listing_table,
    has_marker,
    insert_section,
    key_name,
    latest_of_versioned_pages,
    object_pages,
    seed_plain,
    size_verdict,
    verdicts,
    version_id,
    version_pages,
)


def test_keys_sort_in_index_order_and_fill_dirs() -> None:
    keys = [key_name(i) for i in range(2 * KEYS_PER_DIR + 5)]
    assert keys == sorted(keys)
    assert key_name(0) == "d0000/o0000"
    assert key_name(KEYS_PER_DIR) == "d0001/o0000"


def test_version_ids_are_distinct_uuids() -> None:
    ids = {version_id(k, v) for k in range(300) for v in range(4)}
    assert len(ids) == 1200
    assert all(str(uuid.UUID(i)) == i for i in ids)


def test_buckets_for_a_run() -> None:
    big, big_versions, small, small_versions = buckets_for(1_000_000)
    assert (big.entries, big_versions.entries, small.entries, small_versions.entries) == (
        1_000_000, 1_000_000, 10_000, 10_000)
    assert big_versions.versioned and not big.versioned


# -- a brute-force model of the two listings ---------------------------------------------


def _group(key: str, prefix: str, delimiter: str) -> str | None:
    if not delimiter:
        return None
    rest = key[len(prefix):]
    return prefix + rest[: rest.index(delimiter) + 1] if delimiter in rest else None


def model_objects(keys: list[str], query: str) -> int:
    params = dict(parse_qsl(query, keep_blank_values=True))
    prefix, delimiter = params.get("prefix", ""), params.get("delimiter", "")
    after = params.get("start-after", "")
    items: list[str] = []
    for key in keys:
        if not key.startswith(prefix) or key <= after:
            continue
        group = _group(key, prefix, delimiter)
        if group is None:
            items.append(key)
        elif group > after and group not in items:
            items.append(group)
    return min(PAGE, len(items))


def model_versions(bucket: Bucket, query: str) -> int:
    params = dict(parse_qsl(query, keep_blank_values=True))
    prefix, delimiter = params.get("prefix", ""), params.get("delimiter", "")
    key_marker, version_marker = params.get("key-marker", ""), params.get(
        "version-id-marker", "")
    rows = [(key_name(k), version_id(k, v)) for k in range(bucket.keys)
            for v in reversed(range(bucket.versions_per_key))]  # newest first
    if key_marker and version_marker:
        start = rows.index((key_marker, version_marker)) + 1
    else:
        start = next((i for i, (k, _) in enumerate(rows) if k > key_marker), len(rows))
    items: list[object] = []
    for key, vid in rows[start:]:
        if not key.startswith(prefix):
            continue
        group = _group(key, prefix, delimiter)
        if group is None:
            items.append((key, vid))
        elif group > key_marker and group not in items:
            items.append(group)
    return min(PAGE, len(items))


@pytest.mark.parametrize("keys", [4000, 4321, 10_000])
def test_object_pages_expect_what_s3_lists(keys: int) -> None:
    bucket = Bucket("b", keys)
    all_keys = [key_name(i) for i in range(keys)]
    pages = object_pages(bucket)
    assert len({p.query for p in pages}) == len(pages)
    for page in pages:
        assert page.expected == model_objects(all_keys, page.query), page.label


def test_latest_of_versioned_pages_skip_delete_markers() -> None:
    bucket = Bucket("v", 3000, 4)
    live = [key_name(k) for k in range(bucket.keys) if not has_marker(k)]
    for page in latest_of_versioned_pages(bucket):
        assert page.expected == model_objects(live, page.query)


@pytest.mark.parametrize("keys", [1000, 1111, 2500])
def test_version_pages_expect_what_s3_lists(keys: int) -> None:
    bucket = Bucket("v", keys, 4)
    for page in version_pages(bucket):
        assert page.expected == model_versions(bucket, page.query), page.label


# -- the report ------------------------------------------------------------------------------


def measured(label: str, bucket: Bucket, *timings: float) -> Measured:
    return Measured(Page(label, bucket, "q", 1000), timings, 12.5, 1000)


def test_table_and_verdicts() -> None:
    big, big_versions, _, small_versions = buckets_for(1_000_000)
    results = [
        measured("ListObjectsV2, start", big, 20.0, 25.0, 21.0),
        measured("ListObjectsV2 delimiter=/, start (CommonPrefixes)", big, 500.0),
        measured("ListObjectVersions, start", small_versions, 10.0),
        measured("ListObjectVersions, end (last page)", big_versions, 19.0, 22.0),
        measured("ListObjectsV2 of the versioned bucket, middle", big_versions, 90.0),
    ]
    table = format_listing_table(results)
    assert "| ListObjectsV2, start | 1,000,000 keys | 1,000 | 21.0 | 25.0 | 12.5 | 3 |" in table
    assert "| 1,000,000 versions |" in table and "| 500 |" in table
    lines = verdicts(results, big, big_versions, small_versions)
    assert lines[0].startswith("issue 6") and lines[0].endswith(": met")
    assert "= 20.0 ms" in lines[1] and "20.5 ms" in lines[1] and lines[1].endswith("NOT met")


def test_size_verdict_compares_the_same_page_of_both_buckets() -> None:
    big, _, small, _ = buckets_for(1_000_000)
    results = [
        measured("ListObjectsV2, start", big, 9.0),
        measured("ListObjectsV2, start", small, 8.0),
        measured("ListObjectsV2, end (last page)", big, 9.5),
        measured("ListObjectsV2, end (last page)", small, 5.0),
        measured("ListObjectsV2 delimiter=/, start (CommonPrefixes)", big, 500.0),
        measured("ListObjectsV2 delimiter=/, start (CommonPrefixes)", small, 1.0),
    ]
    line = size_verdict(results, big, small)
    assert line is not None and "worst ratio 1.90 (ListObjectsV2, end" in line
    assert "slowest median 9.5 ms" in line and line.endswith("NOT met")
    fast = [r for r in results if "end" not in r.page.label]
    line = size_verdict(fast, big, small)
    assert line is not None and "ratio 1.12" in line and line.endswith(": met")
    assert size_verdict([], big, small) is None


def test_new_runs_go_first() -> None:
    document = "# Results\n\nintro\n\n## old run\n\ntable\n"
    assert insert_section(document, "## new run\n\nfigures\n") == (
        "# Results\n\nintro\n\n## new run\n\nfigures\n\n## old run\n\ntable\n")
    assert insert_section("# Results\n", "## first\n") == "# Results\n\n## first\n"


def test_busy_ticks() -> None:
    stat = "cpu  100 5 50 800 40 1 2 3 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    assert busy_ticks(stat) == (161, 1001)


def test_plain_seeding_in_sql_makes_the_rows_insert_recovered_makes(tmp_path: Path) -> None:
    from objstore.meta.dialect import create_db_engine
    from objstore.meta.records import BucketRecord
    from objstore.meta.store import SyncMetaStore

    bucket = Bucket("plain", 2 * KEYS_PER_DIR + 7)
    tables = []
    for mode in ("sql", "records"):
        path = tmp_path / f"{mode}.db"
        store = SyncMetaStore(create_db_engine("sqlite", str(path), None, 1))
        store.migrate()
        store.create_bucket(BucketRecord(bucket.name, "o", "us-east-1", 1.0))
        if mode == "records":
            store.insert_recovered(list(_records(bucket, "o", 5)))
        store.close()
        if mode == "sql":
            seed_plain(path, bucket, "o", 5)
        with sqlite3.connect(path) as conn:
            tables.append((conn.execute("SELECT * FROM objects ORDER BY key").fetchall(),
                           conn.execute("SELECT * FROM seq_counter").fetchall()))
    assert tables[0] == tables[1] and len(tables[0][0]) == bucket.keys
