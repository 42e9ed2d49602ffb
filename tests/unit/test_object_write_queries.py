"""The lean `put_object` transaction on the driver: all or nothing (SQLite and
PostgreSQL), and database errors keep the shape the retry rules expect."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from contextlib import nullcontext
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from objstore.meta.dialect import create_db_engine, write_gate, write_transaction
from objstore.meta.object_write_queries import Usage
from objstore.meta.records import NULL_VERSION, BucketRecord, ObjectRecord, WritePrecondition
from objstore.meta.retry import is_transient
from objstore.meta.store import PreconditionNotMet, SyncMetaStore
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
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def test_a_refused_write_changes_nothing_not_even_seq(store: SyncMetaStore) -> None:
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


def test_a_retried_identical_write_keeps_its_blob(store: SyncMetaStore) -> None:
    store.put_object(obj("k"))
    again = store.put_object(obj("k"))
    assert again.orphaned_blob_ids == ()
    assert store.bucket_usage(BUCKET) == (1, 1)


def test_a_locked_sqlite_database_is_a_transient_error(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    store = SyncMetaStore(create_db_engine("sqlite", str(path), None, 1))
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


def _gate_is_free(path: Path) -> bool:
    """Whether another open file description could take the write gate now."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops a lock taken above
    return True


def test_sqlite_writes_hold_the_write_gate_that_other_processes_queue_on(
        tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    gate = tmp_path / "meta.db.write-lock"
    store = SyncMetaStore(create_db_engine("sqlite", str(path), None, 1))
    store.migrate()
    store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    seen: list[bool] = []

    def probe(before: Usage, after: Usage) -> None:  # runs inside put_object's transaction
        seen.append(_gate_is_free(gate))

    try:
        assert _gate_is_free(gate)
        store.put_object(obj("lean"), usage_check=probe)
        with write_transaction(store.engine):
            seen.append(_gate_is_free(gate))
        assert seen == [False, False]
        assert _gate_is_free(gate)  # released after commit
        with pytest.raises(PreconditionNotMet):
            store.put_object(obj("lean", "e2"), WritePrecondition(if_absent=True))
        assert _gate_is_free(gate)  # and after a rollback
    finally:
        store.close()


def test_only_sqlite_has_a_write_gate(backend: str, db_engine: sa.Engine) -> None:  # noqa: F811
    # PostgreSQL queues its writers on row locks (the seq counter row).
    assert isinstance(write_gate(db_engine), nullcontext) == (backend == "postgres")
