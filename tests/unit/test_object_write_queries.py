"""The lean `put_object` transaction on the driver: all or nothing (SQLite and
PostgreSQL), and database errors keep the shape the retry rules expect; the stamp of a
client's write (a PUT, a delete marker, a completed upload, a version delete) is strictly
after the rows and tombstone of its key it follows, whatever the clock says."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from objstore.convergence import lww
from objstore.meta.dialect import create_db_engine, write_gate, write_transaction
from objstore.meta.object_write_queries import Usage
from objstore.meta.records import (
    NULL_VERSION,
    BucketRecord,
    ObjectRecord,
    PartRecord,
    PartRef,
    UploadRecord,
    WritePrecondition,
)
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


# -- the stamp of a client's write: strictly after what it replaces on this node ------------


def stamped(key: str, at: float, version_id: str = NULL_VERSION, blob: str = "b") -> ObjectRecord:
    return ObjectRecord(BUCKET, key, version_id, f"{blob}-{at}", 1, "e", at)


def test_an_overwrite_on_a_lagging_clock_is_stamped_after_the_row_it_replaces(
    store: SyncMetaStore,
) -> None:
    # The latest row came from a peer 30 s ahead (applied here with its stamp).
    peer = store.apply_replicated_object(stamped("k", 1000.0)).record
    assert peer is not None
    result = store.put_object(stamped("k", 970.0, blob="mine"))
    assert result.record.last_modified == lww.stamp_write(0.0, 1000.0)
    assert store.get_object(BUCKET, "k") == result.record  # stored as returned
    assert result.orphaned_blob_ids == (peer.blob_id,)
    # A clock ahead of what the key holds keeps its own stamp.
    assert store.put_object(stamped("k", 2000.0)).record.last_modified == 2000.0


def test_a_new_version_follows_the_latest_version_of_its_key(store: SyncMetaStore) -> None:
    v1, v2 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
    store.apply_replicated_object(stamped("k", 1000.0, v1))
    marker = replace(stamped("k", 970.0, v2), is_delete_marker=True)
    stored = store.put_object(marker).record
    assert stored.last_modified > 1000.0 and stored.is_latest
    assert [v.version_id for v in store.list_versions(BUCKET) if v.is_latest] == [v2]


def test_a_write_after_a_deletion_applied_from_a_peer_follows_its_tombstone(
    store: SyncMetaStore,
) -> None:
    store.put_object(stamped("k", 900.0))
    store.apply_replicated_delete(BUCKET, "k", NULL_VERSION, 1000.0)
    assert store.get_object(BUCKET, "k") is None
    again = store.put_object(stamped("k", 970.0, blob="again")).record
    assert again.last_modified == lww.stamp_write(0.0, 1000.0)
    # A peer holding the tombstone keeps the write (strictly newer than the deletion).
    assert lww.row_survives_tombstone(again, 1000.0)


def test_a_version_delete_is_stamped_after_the_row_it_removes(store: SyncMetaStore) -> None:
    ahead = store.clock() + 30.0
    store.apply_replicated_object(stamped("k", ahead))
    deleted = store.delete_object_version(BUCKET, "k", NULL_VERSION)
    assert deleted.deleted_at == lww.stamp_write(0.0, ahead)
    assert store.get_tombstone("object", f"{BUCKET}:{NULL_VERSION}:k") == (
        deleted.deleted_at, store.max_seq())


def test_a_completed_upload_is_stamped_after_the_row_it_replaces(store: SyncMetaStore) -> None:
    store.apply_replicated_object(stamped("k", 1000.0))
    store.create_upload(UploadRecord("up-1", BUCKET, "k", initiated_at=10.0))
    part = PartRecord("up-1", 1, "part-1", 5, "etag1", 20.0)
    store.put_part(part)
    record = ObjectRecord(BUCKET, "k", NULL_VERSION, "composite", 5, "abc-1", 970.0,
                          parts=(PartRef(1, "part-1", 5, "etag1"),))
    stored = store.complete_upload("up-1", record).record
    assert stored.last_modified == lww.stamp_write(0.0, 1000.0)
    assert store.get_object(BUCKET, "k") == stored
