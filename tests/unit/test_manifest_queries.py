"""The changed-since manifest (meta/manifest_queries.py) and anti-entropy's cursors
(meta/cursor_queries.py), on SQLite and PostgreSQL: rows and tombstones in seq order
above a cursor, pages and `more`, a lock change redelivered under a fresh seq, the
counter as max_seq; cursors stored, replaced, listed and forgotten."""

from __future__ import annotations

from dataclasses import replace

import pytest

from objstore.convergence.sync_rules import SyncCursor
from objstore.meta.manifest_queries import split_object_tombstone_key
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import SyncMetaStore, object_tombstone_key
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

BUCKET = "manifest"
V1 = "11111111-1111-4111-8111-111111111111"
V2 = "22222222-2222-4222-8222-222222222222"
BLOB_A = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
BLOB_B = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"


def row(key: str, version_id: str = V1, *, at: float = 10.0, blob: str = BLOB_A
        ) -> ObjectRecord:
    return ObjectRecord(BUCKET, key, version_id, blob, size=3, etag="e", last_modified=at)


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def test_an_empty_store_has_an_empty_manifest(store: SyncMetaStore) -> None:
    page = store.changed_since(0, 10)
    assert page.entries == () and page.max_seq == 0 and not page.more


def test_rows_and_tombstones_come_in_seq_order_above_the_cursor(store: SyncMetaStore
                                                                 ) -> None:
    store.put_object(row("a"))
    store.put_object(row("b", V2, blob=BLOB_B))
    store.delete_object_version(BUCKET, "a", V1)
    page = store.changed_since(0, 10)
    assert page.max_seq == store.max_seq() == 3 and not page.more
    assert [e.seq for e in page.entries] == [2, 3]  # "a"'s row is gone: its tombstone
    assert page.entries[0].record is not None and page.entries[0].record.key == "b"
    deletion = page.entries[1].deletion
    assert deletion is not None and (deletion.bucket, deletion.key, deletion.version_id) \
        == (BUCKET, "a", V1)
    assert store.get_tombstone("object", object_tombstone_key(BUCKET, "a", V1)) == (
        deletion.deleted_at, 3)
    assert [e.seq for e in store.changed_since(2, 10).entries] == [3]
    assert store.changed_since(3, 10).entries == ()


def test_pages_are_bounded_and_say_more(store: SyncMetaStore) -> None:
    for index in range(5):
        store.put_object(row(f"k{index}"))
    first = store.changed_since(0, 2)
    assert [e.seq for e in first.entries] == [1, 2] and first.more
    last = store.changed_since(4, 2)
    assert [e.seq for e in last.entries] == [5] and not last.more
    exact = store.changed_since(3, 2)
    assert [e.seq for e in exact.entries] == [4, 5] and not exact.more


def test_a_lock_change_is_redelivered_under_a_fresh_seq(store: SyncMetaStore) -> None:
    stored = store.put_object(row("locked")).record
    locked = replace(stored, legal_hold_status="ON", lock_updated_at=20.0)
    store.update_object(locked)
    page = store.changed_since(stored.seq, 10)
    assert len(page.entries) == 1 and page.entries[0].seq == stored.seq + 1
    record = page.entries[0].record
    assert record is not None and record.legal_hold_status == "ON"


def test_an_overwrite_moves_the_row_to_a_later_seq(store: SyncMetaStore) -> None:
    store.put_object(row("k", "null", at=10.0))
    store.put_object(row("other"))
    store.put_object(row("k", "null", at=11.0, blob=BLOB_B))
    entries = store.changed_since(0, 10).entries
    assert [(e.seq, e.record.key if e.record else None) for e in entries] == [
        (2, "other"), (3, "k")]
    assert entries[1].record is not None and entries[1].record.blob_id == BLOB_B


def test_tombstone_keys_split_back_with_colons_in_the_key() -> None:
    assert split_object_tombstone_key(object_tombstone_key("b", "a:b:c", V1)) == (
        "b", "a:b:c", V1)


def test_cursors_are_stored_replaced_listed_and_forgotten(store: SyncMetaStore) -> None:
    assert store.get_sync_cursor("node-b") is None and store.list_sync_cursors() == []
    cursor = SyncCursor("node-b", cursor=7, peer_max_seq=9, failing_seq=8, failed_passes=2)
    store.put_sync_cursor(cursor)
    assert store.get_sync_cursor("node-b") == cursor
    moved = replace(cursor, cursor=9, first_pass_done=True, last_reconcile=123.5,
                    failing_seq=None, failed_passes=0, skipped_entries=1)
    store.put_sync_cursor(moved)
    store.put_sync_cursor(SyncCursor("node-a"))
    assert store.list_sync_cursors() == [SyncCursor("node-a"), moved]
    assert store.delete_sync_cursor("node-a") and not store.delete_sync_cursor("node-a")
    assert store.list_sync_cursors() == [moved]
    assert store.max_seq() == 0  # cursors take no object seq
