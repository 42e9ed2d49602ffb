"""The metadata-store queries versioning relies on, on SQLite and PostgreSQL: guarded
(expected seq) updates and deletes of a version, the atomic enabling of object lock on an
empty bucket, and the promotion of the newest version when the latest goes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import RecordNotFound, RowChanged, SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)


def version(key: str, version_id: str, modified: float, **fields: object) -> ObjectRecord:
    return ObjectRecord(bucket="b", key=key, version_id=version_id, blob_id=None, size=1,
                        etag="e", last_modified=modified, **fields)  # type: ignore[arg-type]


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord("b", "u", "us-east-1", 1.0, versioning="Enabled"))
    return meta_store


def test_guarded_update_and_delete(store: SyncMetaStore) -> None:
    stored = store.put_object(version("k", "v1", 10.0)).record
    with pytest.raises(RowChanged):
        store.update_object(replace(stored, legal_hold_status="ON"), stored.seq - 1)
    assert store.get_object("b", "k", "v1") == stored  # nothing changed, no seq used
    held = store.update_object(replace(stored, legal_hold_status="ON"), stored.seq)
    assert held.legal_hold_status == "ON" and held.seq > stored.seq
    with pytest.raises(RowChanged):
        store.delete_object_version("b", "k", "v1", stored.seq)
    assert store.get_object("b", "k", "v1") == held
    with pytest.raises(RecordNotFound):
        store.update_object(replace(stored, version_id="gone"), stored.seq)
    assert store.delete_object_version("b", "k", "gone", 1).removed is None
    assert store.delete_object_version("b", "k", "v1", held.seq).removed == held
    assert store.get_object("b", "k") is None


def test_deleting_the_latest_promotes_the_newest_remaining(store: SyncMetaStore) -> None:
    for n, modified in enumerate((10.0, 30.0, 20.0), start=1):
        store.put_object(version("k", f"v{n}", modified))
    latest = store.get_object("b", "k")
    assert latest is not None and latest.version_id == "v3"  # the last written
    result = store.delete_object_version("b", "k", "v3", latest.seq)
    assert result.new_latest is not None and result.new_latest.version_id == "v2"
    marker = store.put_object(version("k", "m", 40.0, is_delete_marker=True)).record
    assert [r.version_id for r in store.list_versions("b")] == ["m", "v2", "v1"]
    store.delete_object_version("b", "k", "m", marker.seq)
    current = store.get_object("b", "k")
    assert current is not None and current.version_id == "v2" and current.is_latest


def test_object_lock_is_enabled_only_on_an_empty_bucket(store: SyncMetaStore) -> None:
    store.create_bucket(BucketRecord("empty", "u", "us-east-1", 1.0))
    assert store.enable_object_lock("empty", 5.0) == "enabled"
    bucket = store.get_bucket("empty")
    assert bucket is not None and bucket.object_lock and bucket.versioning == "Enabled"
    assert bucket.updated_at == 5.0
    store.put_object(version("k", "m", 10.0, is_delete_marker=True))
    assert store.enable_object_lock("b", 6.0) == "not_empty"
    unchanged = store.get_bucket("b")
    assert unchanged is not None and not unchanged.object_lock
    assert store.enable_object_lock("missing", 7.0) == "missing"
