"""`objects_by_blob_id` (meta/blob_walk_queries.py), on SQLite and PostgreSQL: rows with
bytes in blob-id order after a cursor, page by page, delete markers left out."""

from __future__ import annotations

import pytest

from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

IDS = sorted(f"{n:08x}-{m:04x}-4000-8000-000000000000" for n in (3, 1, 2, 0xab) for m in (1, 2))


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord("b", "u-1", "us-east-1", 1.0))
    for n, blob_id in enumerate(reversed(IDS)):
        meta_store.put_object(ObjectRecord("b", f"k{n}", "null", blob_id, size=1, etag="e",
                                           last_modified=10.0 + n))
    return meta_store


def test_rows_come_in_blob_id_order_page_by_page(store: SyncMetaStore) -> None:
    seen: list[str] = []
    cursor = None
    while page := store.objects_by_blob_id(cursor, 3):
        seen.extend(row.blob_id or "" for row in page)
        cursor = page[-1].blob_id
    assert seen == IDS


def test_delete_markers_are_left_out(store: SyncMetaStore) -> None:
    marker = "ffffffff-0000-4000-8000-000000000000"
    store.put_object(ObjectRecord("b", "gone", "null", marker, size=0, etag="",
                                  last_modified=99.0, is_delete_marker=True))
    assert [row.blob_id for row in store.objects_by_blob_id(IDS[-1], 10)] == []
    assert len(store.objects_by_blob_id(None, 100)) == len(IDS)
