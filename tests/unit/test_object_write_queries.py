"""The lean `put_object` transaction on the driver: all or nothing (SQLite and
PostgreSQL), and database errors keep the shape the retry rules expect."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from objstore.meta.async_store import is_transient
from objstore.meta.engine import create_db_engine
from objstore.meta.records import NULL_VERSION, BucketRecord, ObjectRecord, WritePrecondition
from objstore.meta.store import PreconditionNotMet, SqlMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

BUCKET = "lean"


def obj(key: str, etag: str = "e1") -> ObjectRecord:
    return ObjectRecord(BUCKET, key, NULL_VERSION, f"blob-{key}-{etag}", 1, etag, 10.0)


@pytest.fixture
def store(meta_store: SqlMetaStore) -> SqlMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def test_a_refused_write_changes_nothing_not_even_seq(store: SqlMetaStore) -> None:
    first = store.put_object(obj("k")).record
    seq = store.max_seq()
    with pytest.raises(PreconditionNotMet) as caught:
        store.put_object(obj("k", "e2"), WritePrecondition(if_absent=True))
    assert caught.value.reason == "exists"
    assert store.max_seq() == seq
    assert store.get_object(BUCKET, "k") == first
    with pytest.raises(PreconditionNotMet):
        store.put_object(obj("k", "e2"), WritePrecondition(if_match_etag="other"))
    replaced = store.put_object(obj("k", "e2"), WritePrecondition(if_match_etag="e1"))
    assert replaced.record.seq == seq + 1
    assert replaced.orphaned_blob_ids == ("blob-k-e1",)
    assert store.get_object(BUCKET, "k") == replaced.record


def test_a_retried_identical_write_keeps_its_blob(store: SqlMetaStore) -> None:
    store.put_object(obj("k"))
    again = store.put_object(obj("k"))
    assert again.orphaned_blob_ids == ()
    assert store.bucket_usage(BUCKET) == (1, 1)


def test_a_locked_sqlite_database_is_a_transient_error(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    store = SqlMetaStore(create_db_engine("sqlite", str(path), None, 1))
    store.migrate()
    store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    pooled = store.engine.raw_connection()
    pooled.cursor().execute("PRAGMA busy_timeout=50")  # the pool's only connection
    pooled.close()
    other = sqlite3.connect(str(path), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(sa_exc.OperationalError) as caught:
            store.put_object(obj("k"))
        assert is_transient(caught.value)
        other.execute("ROLLBACK")
        assert store.put_object(obj("k")).record.seq == 1
    finally:
        other.close()
        store.close()
