"""The audit and metrics part of the MetaStore suite (audit batches, pages, purges; metrics
history; usage per bucket; the node id; the upgrade from schema version 1), run on SQLite
and on PostgreSQL."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sqlalchemy as sa

from objstore.meta import migrations, schema
from objstore.meta.audit_queries import MAX_PAGE, AuditFilter, AuditRecord
from objstore.meta.metrics_queries import BucketUsage, MetricsSample
from objstore.meta.node_identity import NODE_ID_SETTING, ensure_node_id
from objstore.meta.records import BucketRecord, ObjectRecord, PartRecord, UploadRecord
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    FakeClock,
    backend,
    db_engine,
    make_engine,
    meta_store,
    postgres_database,
)

NOW = 1_700_000_000.0


def entry(ts: float, operation: str = "GetObject", **fields: object) -> AuditRecord:
    return AuditRecord(ts=ts, operation=operation, node_id="node-a", **fields)  # type: ignore[arg-type]


def test_audit_batch_round_trips_every_field(meta_store: SyncMetaStore) -> None:  # noqa: F811
    full = entry(
        NOW, "PutObject", request_id="R1", user_id="u-1", username="alice",
        access_key="AKIA1", bucket="photos", key="a/b.jpg", source_ip="10.0.0.1",
        status=403, error_code="AccessDenied", duration_ms=12.5, bytes_in=10,
        bytes_out=20, user_agent="boto3/1.0", details={"version_id": "v1", "n": 3},
    )
    bare = entry(NOW + 1, "ListBuckets")
    assert meta_store.insert_audit_records([full, bare]) == 2
    assert meta_store.insert_audit_records([]) == 0
    newest, oldest = meta_store.query_audit(AuditFilter())
    assert newest.operation == "ListBuckets" and newest.username == "" and newest.details == {}
    assert oldest.id is not None
    assert oldest == dataclasses.replace(full, id=oldest.id)


@pytest.mark.parametrize("size", [1, 3, 17, 256, 341])
def test_a_batch_of_any_size_is_written_whole_in_its_order(
        meta_store: SyncMetaStore, size: int) -> None:  # noqa: F811
    """Batches run as multi-row INSERTs of 256, 64, 16, 4 and 1 rows: every row arrives,
    in the batch's order (ids ascend with it), each with its own fields."""
    batch = [entry(NOW + n, f"Op{n}", key=f"k{n}", bytes_out=n, status=200 + n % 300,
                   details={"n": n} if n % 2 else {}) for n in range(size)]
    assert meta_store.insert_audit_records(batch) == size
    stored = meta_store.query_audit(AuditFilter(limit=MAX_PAGE))
    assert len(stored) == size
    oldest_first = list(reversed(stored))
    assert [r.id for r in oldest_first] == sorted(r.id for r in stored)
    assert [dataclasses.replace(r, id=None) for r in oldest_first] == batch


def test_audit_filters(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.insert_audit_records([
        entry(NOW, "PutObject", bucket="b1", username="alice", user_id="u-a"),
        entry(NOW + 10, "GetObject", bucket="b1", username="bob", user_id="u-b"),
        entry(NOW + 20, "GetObject", bucket="b2", username="alice", user_id="u-a"),
        entry(NOW + 30, "admin:CreateUser", username="alice", user_id="u-a"),
    ])

    def ops(**wanted: object) -> list[str]:
        return [r.operation + "@" + str(int(r.ts - NOW))
                for r in meta_store.query_audit(AuditFilter(**wanted))]  # type: ignore[arg-type]

    assert ops(bucket="b1") == ["GetObject@10", "PutObject@0"]
    assert ops(operation="GetObject") == ["GetObject@20", "GetObject@10"]
    assert ops(user="alice") == ["admin:CreateUser@30", "GetObject@20", "PutObject@0"]
    assert ops(user="u-b") == ["GetObject@10"]
    assert ops(since=NOW + 10, until=NOW + 30) == ["GetObject@20", "GetObject@10"]
    assert ops(user="alice", bucket="b2", operation="GetObject") == ["GetObject@20"]
    assert ops(bucket="none") == []
    assert ops(limit=0) == []


def test_audit_pages_by_keyset_with_equal_timestamps(meta_store: SyncMetaStore) -> None:  # noqa: F811
    # Five rows share a timestamp: pages must still neither skip nor repeat.
    meta_store.insert_audit_records(
        [entry(NOW + (i // 5), key=f"k{i}") for i in range(12)]
    )
    seen: list[str] = []
    before = None
    while True:
        page = meta_store.query_audit(AuditFilter(limit=5, before=before))
        seen += [r.key for r in page]
        if len(page) < 5:
            break
        last = page[-1]
        assert last.id is not None
        before = (last.ts, last.id)
    assert sorted(seen) == sorted(f"k{i}" for i in range(12))
    assert len(seen) == 12
    timestamps = [r.ts for r in meta_store.query_audit(AuditFilter(limit=12))]
    assert timestamps == sorted(timestamps, reverse=True)


def test_audit_page_is_capped(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.insert_audit_records([entry(NOW + i) for i in range(MAX_PAGE + 5)])
    assert len(meta_store.query_audit(AuditFilter(limit=5000))) == MAX_PAGE + 1


def test_audit_purge_deletes_old_rows_in_batches(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.insert_audit_records([entry(NOW + i) for i in range(10)])
    assert meta_store.purge_audit(NOW + 7, batch_size=3) == 3
    assert meta_store.purge_audit(NOW + 7, batch_size=3) == 3
    assert meta_store.purge_audit(NOW + 7, batch_size=3) == 1
    assert meta_store.purge_audit(NOW + 7, batch_size=3) == 0
    assert [r.ts - NOW for r in meta_store.query_audit(AuditFilter())] == [9, 8, 7]


def sample(ts: float, requests: int = 1) -> MetricsSample:
    return MetricsSample(ts=ts, node_id="node-a", interval_seconds=60.0, requests=requests,
                         errors=1, server_errors=0, bytes_in=100, bytes_out=200, buckets=2,
                         objects=3, stored_bytes=4000)


def test_metrics_history_insert_query_purge(meta_store: SyncMetaStore) -> None:  # noqa: F811
    for i in range(5):
        meta_store.insert_metrics_sample(sample(NOW + 60 * i, requests=i))
    assert [s.requests for s in meta_store.query_metrics_history()] == [4, 3, 2, 1, 0]
    window = meta_store.query_metrics_history(since=NOW + 60, until=NOW + 240)
    assert [s.requests for s in window] == [3, 2, 1]
    assert meta_store.query_metrics_history(limit=2)[0] == sample(NOW + 240, requests=4)
    assert meta_store.purge_metrics_history(NOW + 120) == 2
    assert [s.requests for s in meta_store.query_metrics_history()] == [4, 3, 2]


def add_object(store: SyncMetaStore, bucket: str, key: str, size: int, seq: int,
               delete_marker: bool = False) -> None:
    store.put_object(ObjectRecord(
        bucket=bucket, key=key, version_id=f"v{seq}", blob_id=None if delete_marker else f"b{seq}",
        size=size, etag="e", last_modified=NOW, is_latest=True,
        is_delete_marker=delete_marker, owner_id="u", owner_name="alice",
    ))


def test_usage_by_bucket_largest_first(meta_store: SyncMetaStore) -> None:  # noqa: F811
    for name in ("small", "large", "empty", "middle"):
        meta_store.create_bucket(BucketRecord(name, "u", "us-east-1", NOW))
    add_object(meta_store, "small", "a", 1, 1)
    add_object(meta_store, "large", "a", 500, 2)
    add_object(meta_store, "large", "b", 500, 3)
    add_object(meta_store, "middle", "a", 100, 4)
    add_object(meta_store, "middle", "gone", 0, 5, delete_marker=True)
    assert meta_store.usage_by_bucket(10) == [
        BucketUsage("large", 2, 1000), BucketUsage("middle", 1, 100), BucketUsage("small", 1, 1),
    ]
    assert meta_store.usage_by_bucket(1) == [BucketUsage("large", 2, 1000)]


def test_node_id_is_generated_once_and_kept(meta_store: SyncMetaStore) -> None:  # noqa: F811
    ids = iter(["first", "second"])
    assert ensure_node_id(meta_store, "", lambda: next(ids)) == "first"
    assert ensure_node_id(meta_store, "", lambda: next(ids)) == "first"
    assert ensure_node_id(meta_store, "configured") == "configured"
    assert meta_store.get_setting(NODE_ID_SETTING) == "configured"


def test_upgrade_from_version_1(backend: str, tmp_path: Path,  # noqa: F811
                                request: pytest.FixtureRequest) -> None:
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:1])
        _make_version_1(engine)
        store = SyncMetaStore(engine, clock=FakeClock())
        assert migrations.migrate(engine) == [m.version for m in migrations.MIGRATIONS[1:]]
        applied = migrations.applied_versions(engine)
        assert applied == versions_from(1)
        columns = {c["name"] for c in sa.inspect(engine).get_columns("audit_log")}
        assert "details" in columns
        store.insert_audit_records([entry(NOW, details={"a": 1})])
        assert store.query_audit(AuditFilter())[0].details == {"a": 1}
        store.insert_metrics_sample(sample(NOW))
        assert len(store.query_metrics_history()) == 1
    finally:
        engine.dispose()


def test_upgrade_from_version_2_adds_completed_uploads(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:  # noqa: F811
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:2])
        with engine.begin() as conn:
            schema.completed_uploads.drop(conn)
            conn.execute(sa.delete(schema.schema_version)
                         .where(schema.schema_version.c.version > 2))
        assert migrations.migrate(engine) == versions_from(3)
        assert "completed_uploads" in sa.inspect(engine).get_table_names()
        assert SyncMetaStore(engine).get_completion("nothing") is None
    finally:
        engine.dispose()


def test_upgrade_from_version_3_adds_sync_cursors(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:  # noqa: F811
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:3])
        with engine.begin() as conn:
            schema.sync_cursors.drop(conn)
        assert migrations.migrate(engine) == versions_from(4)
        assert "sync_cursors" in sa.inspect(engine).get_table_names()
        assert SyncMetaStore(engine).list_sync_cursors() == []
    finally:
        engine.dispose()


def test_upgrade_from_version_4_adds_tags_updated_at(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:  # noqa: F811
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:4])
        _drop_tags_updated_at(engine)
        store = SyncMetaStore(engine, clock=FakeClock())
        store.create_bucket(BucketRecord("b", "u", "us-east-1", 1.0))
        with engine.begin() as conn:  # a row written by version 4 (no such column)
            values = schema.object_values(ObjectRecord("b", "k", "null", "blob", 1, "e", 5.0,
                                                    tags={"a": "1"}, seq=1))
            del values["tags_updated_at"]
            conn.execute(sa.insert(schema.objects).values(**values))
        assert migrations.migrate(engine) == versions_from(5)
        assert migrations.migrate(engine) == []
        held = store.get_object("b", "k")
        assert held is not None and held.tags == {"a": "1"} and held.tags_updated_at is None
        store.update_object(dataclasses.replace(held, tags={}, tags_updated_at=9.5))
        assert store.get_object("b", "k").tags_updated_at == 9.5  # type: ignore[union-attr]
    finally:
        engine.dispose()


def _drop_tags_updated_at(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE objects DROP COLUMN tags_updated_at"))
        conn.execute(sa.delete(schema.schema_version)
                     .where(schema.schema_version.c.version > 4))


def _make_version_1(engine: sa.Engine) -> None:
    """A new database is built from today's metadata; take away what versions 2 to 6
    add."""
    _drop_tags_updated_at(engine)
    with engine.begin() as conn:
        schema.maintenance_job_logs.drop(conn)
        schema.maintenance_jobs.drop(conn)
        schema.sync_cursors.drop(conn)
        schema.completed_uploads.drop(conn)
        schema.metrics_history.drop(conn)
        conn.execute(sa.text("ALTER TABLE audit_log DROP COLUMN details"))
        conn.execute(sa.delete(schema.schema_version).where(schema.schema_version.c.version > 1))
        assert not sa.inspect(conn).has_table("metrics_history")


def versions_from(first: int) -> list[int]:
    """The migration versions from `first` on (numbers may have gaps)."""
    return [m.version for m in migrations.MIGRATIONS if m.version >= first]


def test_upgrade_from_version_7_adds_part_encryption_params(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:  # noqa: F811
    """Migration 8: a part row written by version 7 reads back with no key; a part of an
    encrypted upload keeps its wrapped key (both backends)."""
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:7])
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE multipart_parts DROP COLUMN encryption_params"))
            conn.execute(sa.delete(schema.schema_version)
                         .where(schema.schema_version.c.version == 8))
        store = SyncMetaStore(engine, clock=FakeClock())
        store.create_bucket(BucketRecord("b", "u", "us-east-1", 1.0))
        store.create_upload(UploadRecord("up-1", "b", "k", 1.0))
        with engine.begin() as conn:  # a part written by version 7 (no such column)
            conn.execute(sa.insert(schema.multipart_parts).values(
                upload_id="up-1", part_number=1, blob_id="blob-1", size=5, etag="e",
                last_modified=2.0, checksums="{}"))
        assert migrations.migrate(engine) == versions_from(8)
        params = {"format": "aes256gcm-64k-v1", "wrapped_key": "abc", "key_id": "local:1"}
        store.put_part(PartRecord("up-1", 2, "blob-2", 5, "e2", 3.0, {}, params))
        old, new = store.list_parts("up-1", 0, 10)
        assert old.encryption_params == {} and new.encryption_params == params
    finally:
        engine.dispose()


def test_upgrade_from_version_11_adds_object_acls(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:  # noqa: F811
    """Migration 12: a version written by version 11 reads back with no ACL (the owner's
    alone); a new version keeps its ACL, and an update rewrites it (both backends)."""
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:11])
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE objects DROP COLUMN acl"))
        store = SyncMetaStore(engine, clock=FakeClock())
        store.create_bucket(BucketRecord("b", "u", "us-east-1", 1.0))
        with engine.begin() as conn:  # a row written by version 11 (no such column)
            values = schema.object_values(ObjectRecord("b", "old", "null", "blob-1", 1,
                                                       "e", 2.0, seq=1_000))
            del values["acl"]
            conn.execute(sa.insert(schema.objects).values(**values))
        assert migrations.migrate(engine) == versions_from(12)
        acl = '{"owner":"u","grants":[["u","FULL_CONTROL",""]]}'
        store.put_object(ObjectRecord("b", "new", "null", "blob-2", 1, "e", 3.0, acl=acl))
        old = store.get_object("b", "old")
        new = store.get_object("b", "new")
        assert old is not None and old.acl is None
        assert new is not None and new.acl == acl
        store.update_object(dataclasses.replace(new, acl=None), new.seq)
        assert store.get_object("b", "new").acl is None  # type: ignore[union-attr]
    finally:
        engine.dispose()
