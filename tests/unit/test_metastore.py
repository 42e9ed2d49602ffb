"""The MetaStore suite: one set of behaviours, run on SQLite and on PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from objstore.meta import migrations, object_queries, schema
from objstore.meta.dialect import (
    connection_count,
    create_db_engine,
    read_transaction,
    thread_counts,
    write_transaction,
)
from objstore.meta.records import (
    NULL_VERSION,
    BucketRecord,
    CredentialRecord,
    ObjectRecord,
    PartRecord,
    PartRef,
    UploadRecord,
    UserRecord,
)
from objstore.meta.store import (
    TOMBSTONE_BUCKET,
    TOMBSTONE_OBJECT,
    TOMBSTONE_SETTING,
    RecordNotFound,
    SyncMetaStore,
    object_tombstone_key,
    open_sync_store,
    prefix_upper_bound,
)
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    make_engine,
    meta_store,
    postgres_database,
)

BUCKET = "photos"


def bucket_record(name: str = BUCKET, **fields: Any) -> BucketRecord:
    values: dict[str, Any] = {"owner_id": "u-1", "region": "us-east-1", "created_at": 10.0}
    return BucketRecord(name=name, **{**values, **fields})


def obj(
    key: str,
    version_id: str = NULL_VERSION,
    *,
    bucket: str = BUCKET,
    blob_id: str | None = None,
    last_modified: float = 100.0,
    **fields: Any,
) -> ObjectRecord:
    if blob_id is None and not fields.get("is_delete_marker"):
        blob_id = f"blob-{uuid.uuid4().hex}"
    return ObjectRecord(
        bucket=bucket,
        key=key,
        version_id=version_id,
        blob_id=blob_id,
        size=fields.pop("size", 5),
        etag=fields.pop("etag", "d41d8cd98f00b204e9800998ecf8427e"),
        last_modified=last_modified,
        **fields,
    )


def delete_marker(key: str, version_id: str, last_modified: float) -> ObjectRecord:
    return obj(key, version_id, is_delete_marker=True, size=0, etag="", last_modified=last_modified)


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    """A migrated store with one bucket."""
    assert meta_store.create_bucket(bucket_record())
    return meta_store


def all_rows(store: SyncMetaStore, bucket: str = BUCKET) -> list[ObjectRecord]:
    return [r for r in store.iter_objects() if r.bucket == bucket]


# -- prefix bounds (pure) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("", None),
        ("a", "b"),
        ("a/", "a0"),
        ("photos/2024", "photos/2025"),
        ("a\U0010ffff", "b"),
        ("\U0010ffff\U0010ffff", None),
        ("x\ud7ff", "x\ue000"),
        ("é", "ê"),
    ],
)
def test_prefix_upper_bound(prefix: str, expected: str | None) -> None:
    assert prefix_upper_bound(prefix) == expected


# -- engine and migrations ------------------------------------------------------------


def test_thread_and_connection_counts() -> None:
    assert thread_counts("sqlite", 4) == (1, 4)
    assert thread_counts("postgres", 4) == (4, 4)
    assert connection_count("sqlite", 4) == 5
    assert connection_count("postgres", 4) == 8


def test_create_db_engine_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown metadata backend"):
        create_db_engine("mysql", None, None, 1)
    with pytest.raises(ValueError, match="postgres_url"):
        create_db_engine("postgres", None, None, 1)


def test_sqlite_connection_settings(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "meta.db"
    engine = create_db_engine("sqlite", str(path), None, 2)
    try:
        assert path.parent.is_dir()
        with read_transaction(engine) as conn:
            pragma = conn.exec_driver_sql
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
            assert pragma("PRAGMA synchronous").scalar() == 2  # FULL
            assert pragma("PRAGMA foreign_keys").scalar() == 1
            assert pragma("PRAGMA busy_timeout").scalar() == 10000
    finally:
        engine.dispose()


def test_sqlite_write_transaction_takes_the_write_lock_at_begin(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    engine = create_db_engine("sqlite", str(path), None, 2)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with read_transaction(engine) as conn:
            conn.exec_driver_sql("SELECT 1").all()
            other.execute("BEGIN IMMEDIATE")  # a reader does not block a writer
            other.execute("ROLLBACK")
        # Nothing executed yet, but BEGIN IMMEDIATE already holds the write lock.
        with write_transaction(engine), pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()
        engine.dispose()


@pytest.mark.postgres
def test_postgres_engine_pool(postgres_database: Any) -> None:  # noqa: F811
    engine = create_db_engine("postgres", None, postgres_database.url, 6)
    try:
        assert engine.pool.size() == 6  # type: ignore[attr-defined]
        assert engine.pool._pre_ping  # type: ignore[attr-defined]
        with read_transaction(engine) as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_key_columns_sort_bytewise(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    engine = make_engine("postgres", tmp_path, request)
    try:
        migrations.migrate(engine)
        with read_transaction(engine) as conn:
            rows = conn.exec_driver_sql(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND collation_name = 'C'"
            ).all()
    finally:
        engine.dispose()
    collated = {(str(t), str(c)) for t, c in rows}
    assert {("objects", "bucket"), ("objects", "key"), ("buckets", "name")} <= collated
    assert ("multipart_uploads", "key") in collated


def test_migrate_is_idempotent(meta_store: SyncMetaStore) -> None:  # noqa: F811
    engine = meta_store.engine
    every_version = [m.version for m in migrations.MIGRATIONS]
    assert migrations.applied_versions(engine) == every_version
    meta_store.migrate()
    assert migrations.migrate(engine) == []
    assert migrations.applied_versions(engine) == every_version
    assert meta_store.max_seq() == 0
    tables = set(sa.inspect(engine).get_table_names())
    assert set(schema.metadata.tables) <= tables


def test_concurrent_migrations_apply_once(
    backend: str,  # noqa: F811
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    engine = make_engine(backend, tmp_path, request)
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: migrations.migrate(engine), range(4)))
        every_version = [m.version for m in migrations.MIGRATIONS]
        assert sorted(results) == [[], [], [], every_version]
        assert migrations.applied_versions(engine) == every_version
        assert SyncMetaStore(engine).max_seq() == 0
    finally:
        engine.dispose()


def test_open_sync_store_default_sqlite_path(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Storage:
        data_dir: Path
        metadata_backend: str = "sqlite"
        postgres_url: str | None = None
        sqlite_path: str | None = None
        db_pool_size: int = 3

    store = open_sync_store(Storage(tmp_path))
    try:
        store.migrate()
        assert (tmp_path / "meta" / "objstore.db").is_file()
        assert store.engine.pool.size() == 4  # type: ignore[attr-defined]
    finally:
        store.close()


# -- buckets --------------------------------------------------------------------------


def test_bucket_lifecycle(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    assert store.create_bucket(bucket_record("zeta"))
    assert store.create_bucket(bucket_record("alpha", versioning="Enabled"))
    assert not store.create_bucket(bucket_record("alpha", region="eu-west-1"))
    alpha = store.get_bucket("alpha")
    assert alpha == bucket_record("alpha", versioning="Enabled", updated_at=10.0)
    assert store.get_bucket("missing") is None
    assert [b.name for b in store.list_buckets()] == ["alpha", "zeta"]

    store.update_bucket(replace(bucket_record("alpha"), object_lock=True, updated_at=20.0))
    updated = store.get_bucket("alpha")
    assert updated is not None
    assert (updated.versioning, updated.object_lock, updated.updated_at) == ("Disabled", True, 20)
    with pytest.raises(RecordNotFound):
        store.update_bucket(bucket_record("missing"))

    assert store.delete_bucket("missing") == "missing"
    store.put_bucket_config("zeta", "tagging", "<Tagging/>")
    assert store.delete_bucket("zeta") == "deleted"
    assert store.get_bucket("zeta") is None
    assert store.list_bucket_config("zeta") == {}
    assert store.get_tombstone(TOMBSTONE_BUCKET, "zeta") is not None


@pytest.mark.parametrize("leftover", ["object", "delete_marker", "upload"])
def test_delete_bucket_refuses_when_not_empty(store: SyncMetaStore, leftover: str) -> None:
    if leftover == "object":
        store.put_object(obj("k"))
    elif leftover == "delete_marker":
        store.put_object(delete_marker("k", "v1", 100.0))
    else:
        store.create_upload(UploadRecord("up-1", BUCKET, "k", initiated_at=5.0))
    store.put_bucket_config(BUCKET, "cors", "<CORSConfiguration/>")
    assert store.delete_bucket(BUCKET) == "not_empty"
    assert store.get_bucket(BUCKET) is not None
    assert store.get_bucket_config(BUCKET, "cors") == "<CORSConfiguration/>"


def test_bucket_config(store: SyncMetaStore) -> None:
    assert store.get_bucket_config(BUCKET, "policy") is None
    store.put_bucket_config(BUCKET, "policy", '{"v": 1}')
    store.put_bucket_config(BUCKET, "policy", '{"v": 2}')
    store.put_bucket_config(BUCKET, "lifecycle", "<LifecycleConfiguration/>")
    assert store.get_bucket_config(BUCKET, "policy") == '{"v": 2}'
    assert store.list_bucket_config(BUCKET) == {
        "lifecycle": "<LifecycleConfiguration/>",
        "policy": '{"v": 2}',
    }
    assert store.delete_bucket_config(BUCKET, "policy")
    assert not store.delete_bucket_config(BUCKET, "policy")
    assert store.list_bucket_config(BUCKET) == {"lifecycle": "<LifecycleConfiguration/>"}
    with pytest.raises(RecordNotFound):
        store.put_bucket_config("missing", "policy", "{}")


# -- objects --------------------------------------------------------------------------


def test_put_object_round_trips_every_field(store: SyncMetaStore) -> None:
    record = obj(
        "dir/é😀.txt",
        "v-1",
        owner_id="u-1",
        owner_name="alice",
        content_type="text/plain; charset=utf-8",
        user_metadata={"colour": "bleu ciel", "ünï": "ç"},
        system_headers={"cache-control": "no-cache"},
        storage_class="STANDARD_IA",
        checksums={"crc32": "AAAAAA==", "sha256": "x"},
        checksum_type="COMPOSITE",
        tags={"a": "1"},
        encryption_algorithm="AES256",
        encryption_key_id="key-1",
        encryption_params={"iv": "abc", "nested": {"n": [1, 2]}},
        compression="zstd",
        retention_mode="GOVERNANCE",
        retain_until_date=2_000_000_000.5,
        legal_hold_status="ON",
        lock_updated_at=123.25,
        replication_status="PENDING",
        parts=(
            PartRef(1, "blob-p1", 5 * 2**20, "e1", {"crc32": "q"}),
            PartRef(2, "blob-p2", 7, "e2"),
        ),
        size=5 * 2**20 + 7,
        etag="abc-2",
        last_modified=1_700_000_000.123456,
    )
    result = store.put_object(record)
    assert result.orphaned_blob_ids == ()
    assert result.record == replace(record, seq=1)
    assert store.get_object(BUCKET, record.key) == result.record
    assert store.get_object(BUCKET, record.key, "v-1") == result.record
    assert store.get_object(BUCKET, record.key, "v-2") is None
    assert store.get_object(BUCKET, "other") is None


def test_put_object_into_missing_bucket(meta_store: SyncMetaStore) -> None:  # noqa: F811
    with pytest.raises(RecordNotFound):
        meta_store.put_object(obj("k", bucket="nope"))
    assert meta_store.max_seq() == 0


def test_put_replacing_null_version_orphans_its_blobs(store: SyncMetaStore) -> None:
    first = store.put_object(
        obj("k", blob_id="blob-a", parts=(PartRef(1, "blob-a1", 1, "e"),), last_modified=1.0)
    )
    assert first.orphaned_blob_ids == ()
    second = store.put_object(obj("k", blob_id="blob-b", last_modified=2.0))
    assert set(second.orphaned_blob_ids) == {"blob-a", "blob-a1"}
    assert second.record.seq > first.record.seq
    rows = all_rows(store)
    assert [(r.version_id, r.blob_id, r.is_latest) for r in rows] == [("null", "blob-b", True)]
    # A retried identical put replaces itself and must not orphan its own blob.
    again = store.put_object(obj("k", blob_id="blob-b", last_modified=2.0))
    assert again.orphaned_blob_ids == ()


def test_versioned_puts_keep_history(store: SyncMetaStore) -> None:
    seqs = []
    for n in range(1, 4):
        seqs.append(store.put_object(obj("k", f"v{n}", last_modified=float(n))).record.seq)
    assert seqs == sorted(seqs)
    rows = store.list_versions(BUCKET)
    assert [(r.version_id, r.is_latest) for r in rows] == [
        ("v3", True),
        ("v2", False),
        ("v1", False),
    ]
    latest = store.get_object(BUCKET, "k")
    assert latest is not None and latest.version_id == "v3"
    # A suspended bucket writes the null version next to the real ones.
    result = store.put_object(obj("k", NULL_VERSION, last_modified=4.0))
    assert result.orphaned_blob_ids == ()
    assert [r.version_id for r in store.list_versions(BUCKET)] == ["null", "v3", "v2", "v1"]
    assert [r.is_latest for r in store.list_versions(BUCKET)] == [True, False, False, False]


def test_delete_latest_promotes_the_next_newest(store: SyncMetaStore) -> None:
    store.put_object(obj("k", "v1", last_modified=1.0))
    store.put_object(obj("k", "v2", last_modified=3.0))
    # Same last_modified as v2 but written later: the higher seq wins the tie.
    store.put_object(obj("k", "v3", last_modified=3.0))
    store.put_object(obj("k", "v4", last_modified=4.0))
    before = store.max_seq()

    result = store.delete_object_version(BUCKET, "k", "v4")
    assert result.removed is not None and result.removed.version_id == "v4"
    assert result.new_latest is not None and result.new_latest.version_id == "v3"
    assert result.new_latest.is_latest
    assert result.new_latest.seq > before
    assert store.get_object(BUCKET, "k") == result.new_latest
    tombstone = store.get_tombstone(TOMBSTONE_OBJECT, object_tombstone_key(BUCKET, "k", "v4"))
    assert tombstone is not None and tombstone[1] is not None and tombstone[1] > before

    result = store.delete_object_version(BUCKET, "k", "v3")
    assert result.new_latest is not None and result.new_latest.version_id == "v2"
    # Removing a non-latest version promotes nothing.
    result = store.delete_object_version(BUCKET, "k", "v1")
    assert result.removed is not None and result.new_latest is None
    assert [(r.version_id, r.is_latest) for r in all_rows(store)] == [("v2", True)]

    result = store.delete_object_version(BUCKET, "k", "v2")
    assert result.new_latest is None
    assert store.get_object(BUCKET, "k") is None


def test_delete_missing_version_changes_nothing(store: SyncMetaStore) -> None:
    store.put_object(obj("k", "v1"))
    before = store.max_seq()
    result = store.delete_object_version(BUCKET, "k", "nope")
    assert result.removed is None and result.new_latest is None
    assert store.max_seq() == before
    assert store.get_tombstone(TOMBSTONE_OBJECT, object_tombstone_key(BUCKET, "k", "nope")) is None


def test_delete_markers(store: SyncMetaStore) -> None:
    store.put_object(obj("k", "v1", last_modified=1.0))
    store.put_object(obj("other", "v1", last_modified=1.0))
    marker = store.put_object(delete_marker("k", "dm1", 2.0)).record
    assert marker.is_delete_marker and marker.blob_id is None
    assert store.get_object(BUCKET, "k") == marker
    assert [r.key for r in store.list_latest(BUCKET)] == ["other"]
    assert [(r.key, r.version_id) for r in store.list_versions(BUCKET)] == [
        ("k", "dm1"),
        ("k", "v1"),
        ("other", "v1"),
    ]
    result = store.delete_object_version(BUCKET, "k", "dm1")
    assert result.new_latest is not None and result.new_latest.version_id == "v1"
    assert [r.key for r in store.list_latest(BUCKET)] == ["k", "other"]


def test_update_object_rewrites_mutable_fields_only(store: SyncMetaStore) -> None:
    stored = store.put_object(obj("k", "v1", blob_id="blob-1", tags={"a": "1"})).record
    store.put_object(obj("k", "v2", last_modified=200.0))
    change = replace(
        stored,
        tags={"b": "2"},
        retention_mode="COMPLIANCE",
        retain_until_date=3e9,
        legal_hold_status="ON",
        lock_updated_at=150.0,
        replication_status="COMPLETED",
        user_metadata={"m": "n"},
        content_type="image/png",
        blob_id="blob-other",
        size=999,
        etag="other",
        last_modified=999.0,
        is_latest=True,
    )
    updated = store.update_object(change)
    assert updated.seq > stored.seq
    assert updated == replace(
        change,
        blob_id="blob-1",
        size=5,
        etag=stored.etag,
        last_modified=stored.last_modified,
        is_latest=False,
        seq=updated.seq,
    )
    assert store.get_object(BUCKET, "k", "v1") == updated
    latest = store.get_object(BUCKET, "k")
    assert latest is not None and latest.version_id == "v2"
    with pytest.raises(RecordNotFound):
        store.update_object(replace(stored, version_id="v9"))


def test_seq_strictly_increases_across_mutations(store: SyncMetaStore) -> None:
    seen = [store.put_object(obj("a", "v1", last_modified=1.0)).record.seq]
    seen.append(store.put_object(obj("a", "v2", last_modified=2.0)).record.seq)
    seen.append(store.update_object(obj("a", "v1", last_modified=1.0, tags={"x": "y"})).seq)
    promoted = store.delete_object_version(BUCKET, "a", "v2").new_latest
    assert promoted is not None
    seen.append(promoted.seq)
    seen.append(store.put_object(obj("b")).record.seq)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert store.max_seq() >= seen[-1]
    seqs = [r.seq for r in store.iter_objects()]
    assert len(set(seqs)) == len(seqs)


@pytest.mark.parametrize("versioned", [True, False])
def test_concurrent_puts_to_one_key(store: SyncMetaStore, versioned: bool) -> None:
    threads = 8
    barrier = threading.Barrier(threads)

    def put(n: int) -> Any:
        barrier.wait()
        version = f"v{n}" if versioned else NULL_VERSION
        return store.put_object(obj("hot", version, blob_id=f"blob-{n}", last_modified=float(n)))

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(put, range(threads)))

    rows = all_rows(store)
    assert sum(r.is_latest for r in rows) == 1
    seqs = [r.record.seq for r in results]
    assert len(set(seqs)) == threads
    # The row that is latest is the one committed last (highest seq).
    latest = store.get_object(BUCKET, "hot")
    assert latest is not None and latest.seq == max(seqs)
    orphans = [b for r in results for b in r.orphaned_blob_ids]
    if versioned:
        assert len(rows) == threads and orphans == []
    else:
        assert len(rows) == 1
        assert sorted(orphans + [latest.blob_id or ""]) == sorted(f"blob-{n}" for n in range(8))


def test_readers_never_see_a_gap_in_committed_seqs(store: SyncMetaStore) -> None:
    """seq is commit-ordered: once seq N is visible, every smaller seq is visible too (a
    change cursor that reads up to N can never skip a row committed later)."""
    writers, puts_each = 6, 15
    done = threading.Event()
    snapshots: list[list[int]] = []
    o = schema.objects

    def read_seqs() -> None:
        while not done.is_set():
            with read_transaction(store.engine) as conn:
                seqs = list(conn.execute(sa.select(o.c.seq).order_by(o.c.seq)).scalars())
            snapshots.append(seqs)

    def write(n: int) -> None:
        for i in range(puts_each):
            store.put_object(obj(f"w{n}/{i}", "v1"))

    reader = threading.Thread(target=read_seqs)
    reader.start()
    try:
        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(write, range(writers)))
    finally:
        done.set()
        reader.join()
    snapshots.append(sorted(r.seq for r in store.iter_objects()))
    for seqs in snapshots:
        assert seqs == list(range(1, len(seqs) + 1))
    assert len(snapshots[-1]) == writers * puts_each


# -- listings -------------------------------------------------------------------------

LISTING_KEYS = [
    "a",
    "a/",
    "a/b",
    "a/b/",
    "a/b/c",
    "a%b",
    "a_b",
    "a%",
    "a_",
    "ab",
    "aB",
    "a b",
    "a\x7f",
    "a\U0010ffff",
    "a\U0010ffffz",
    "A",
    "Z_",
    "%",
    "_",
    "b",
    "x/y/",
    "x/y/z",
    "é",
    "éa",
    "ü/x",
    "日本/語",
    "😀",
    "\ufffd",
    "\ud7ff",
    "\ue000",
    "~",
]


@pytest.fixture
def listing_store(store: SyncMetaStore) -> SyncMetaStore:
    for n, key in enumerate(LISTING_KEYS):
        store.put_object(obj(key, "v1", last_modified=float(n)))
    # Noise that listings of latest versions must skip.
    store.put_object(obj("a/b", "v2", last_modified=50.0))
    store.put_object(delete_marker("ab", "dm", 60.0))
    store.create_bucket(bucket_record("other"))
    store.put_object(obj("a/zz", bucket="other"))
    return store


def expected_latest(prefix: str, start_after: str) -> list[str]:
    visible = [k for k in LISTING_KEYS if k != "ab"]
    return sorted(k for k in visible if k.startswith(prefix) and k > start_after)


@pytest.mark.parametrize(
    "prefix",
    ["", "a", "a/", "a/b", "a%", "a_", "a\U0010ffff", "\ud7ff", "日", "x/y/", "é", "zz"],
)
def test_list_latest_prefixes_match_python(listing_store: SyncMetaStore, prefix: str) -> None:
    keys = [r.key for r in listing_store.list_latest(BUCKET, prefix=prefix)]
    assert keys == expected_latest(prefix, "")
    assert all(r.is_latest and not r.is_delete_marker for r in listing_store.list_latest(BUCKET))


def test_list_latest_order_is_codepoint_order(listing_store: SyncMetaStore) -> None:
    keys = [r.key for r in listing_store.list_latest(BUCKET)]
    assert keys == sorted(keys)
    assert keys == sorted(keys, key=lambda k: k.encode("utf-8"))
    assert keys == expected_latest("", "")


@pytest.mark.parametrize("prefix", ["", "a", "a/"])
@pytest.mark.parametrize("page", [1, 3, 1000])
def test_list_latest_pages(listing_store: SyncMetaStore, prefix: str, page: int) -> None:
    collected: list[str] = []
    start_after = ""
    while True:
        batch = listing_store.list_latest(BUCKET, prefix, start_after, page)
        assert len(batch) <= page
        collected += [r.key for r in batch]
        if len(batch) < page:
            break
        start_after = batch[-1].key
    assert collected == expected_latest(prefix, "")


@pytest.mark.parametrize("start_after", ["", "a", "a%", "a/b", "a0", "zzz", "\U0010ffff", "!"])
def test_list_latest_start_after(listing_store: SyncMetaStore, start_after: str) -> None:
    got = [r.key for r in listing_store.list_latest(BUCKET, "a", start_after, 5)]
    assert got == expected_latest("a", start_after)[:5]
    assert listing_store.list_latest(BUCKET, limit=0) == []


@pytest.fixture
def versions_store(store: SyncMetaStore) -> SyncMetaStore:
    store.put_object(obj("a", "a1", last_modified=1.0))
    store.put_object(obj("a", "a2", last_modified=2.0))
    store.put_object(delete_marker("a", "a3", 3.0))
    store.put_object(obj("b", "null", last_modified=1.0))
    store.put_object(obj("c/", "c1", last_modified=5.0))
    store.put_object(obj("c/", "c2", last_modified=5.0))  # tie: later seq is newer
    store.put_object(obj("c/x", "x1", last_modified=1.0))
    return store


ALL_VERSIONS = [
    ("a", "a3"),
    ("a", "a2"),
    ("a", "a1"),
    ("b", "null"),
    ("c/", "c2"),
    ("c/", "c1"),
    ("c/x", "x1"),
]


def version_keys(records: list[ObjectRecord]) -> list[tuple[str, str]]:
    return [(r.key, r.version_id) for r in records]


def test_list_versions_order(versions_store: SyncMetaStore) -> None:
    records = versions_store.list_versions(BUCKET)
    assert version_keys(records) == ALL_VERSIONS
    assert [r.is_latest for r in records] == [True, False, False, True, True, False, True]
    assert version_keys(versions_store.list_versions(BUCKET, prefix="c/")) == ALL_VERSIONS[4:]
    assert version_keys(versions_store.list_versions(BUCKET, limit=2)) == ALL_VERSIONS[:2]


@pytest.mark.parametrize("page", [1, 2, 3, 100])
def test_list_versions_pages_with_markers(versions_store: SyncMetaStore, page: int) -> None:
    collected: list[tuple[str, str]] = []
    key_marker = version_marker = ""
    while True:
        batch = versions_store.list_versions(BUCKET, "", key_marker, version_marker, page)
        collected += version_keys(batch)
        if len(batch) < page:
            break
        key_marker, version_marker = batch[-1].key, batch[-1].version_id
    assert collected == ALL_VERSIONS


def test_list_versions_markers(versions_store: SyncMetaStore) -> None:
    def listed(prefix: str = "", key_marker: str = "", version_marker: str = "") -> Any:
        return version_keys(
            versions_store.list_versions(BUCKET, prefix, key_marker, version_marker)
        )

    assert listed(key_marker="a") == ALL_VERSIONS[3:]
    assert listed(key_marker="a", version_marker="a3") == ALL_VERSIONS[1:]
    assert listed(key_marker="a", version_marker="a1") == ALL_VERSIONS[3:]
    assert listed(key_marker="c/", version_marker="c2") == ALL_VERSIONS[5:]
    assert listed(key_marker="b", version_marker="null") == ALL_VERSIONS[4:]
    # Unknown version marker: start after the key marker's versions.
    assert listed(key_marker="a", version_marker="gone") == ALL_VERSIONS[3:]
    # A version marker without a key marker is ignored.
    assert listed(version_marker="a2") == ALL_VERSIONS
    # The prefix still bounds the listing after the markers.
    assert listed(prefix="c/", key_marker="c/", version_marker="c2") == ALL_VERSIONS[5:]
    assert listed(prefix="c/x", key_marker="a", version_marker="a3") == ALL_VERSIONS[6:]


# -- counting and scanning ------------------------------------------------------------


def test_bucket_usage_and_totals(store: SyncMetaStore) -> None:
    assert store.bucket_usage(BUCKET) == (0, 0)
    store.put_object(obj("a", "v1", size=10))
    store.put_object(obj("a", "v2", size=20))
    store.put_object(delete_marker("a", "v3", 500.0))
    store.put_object(obj("b", size=5))
    store.create_bucket(bucket_record("other"))
    store.put_object(obj("c", bucket="other", size=7))
    assert store.bucket_usage(BUCKET) == (3, 35)
    assert store.bucket_usage("other") == (1, 7)
    assert store.storage_totals() == (2, 4, 42)


def test_iter_objects_in_batches(store: SyncMetaStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_bucket(bucket_record("other"))
    expected = []
    for n in range(12):
        for bucket in (BUCKET, "other"):
            record = obj(f"k{n % 5}/{n}", f"v{n % 3}", bucket=bucket)
            store.put_object(record)
            expected.append((bucket, record.key, record.version_id))
    calls: list[int] = []
    real_batch = object_queries.objects_batch

    def counting_batch(db: Any, after: Any, limit: int = 1000) -> list[ObjectRecord]:
        calls.append(limit)
        batch = real_batch(db, after, limit)
        assert len(batch) <= limit
        return batch

    monkeypatch.setattr(object_queries, "objects_batch", counting_batch)
    rows = [(r.bucket, r.key, r.version_id) for r in store.iter_objects(batch_size=5)]
    assert rows == sorted(expected)
    assert calls == [5] * 5  # 24 rows: four full pages and a short one


def test_insert_recovered(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    store.create_bucket(bucket_record())
    records = [
        obj("k", "v1", last_modified=1.0, is_latest=False, seq=77),
        obj("k", "v2", last_modified=2.0, is_latest=True),
        delete_marker("gone", "dm", 3.0),
        obj("solo", last_modified=4.0, is_latest=True, tags={"t": "1"}),
    ]
    store.insert_recovered(records)
    store.insert_recovered([])
    stored = {(r.key, r.version_id): r for r in store.iter_objects()}
    assert len(stored) == 4
    for n, record in enumerate(records, start=1):
        assert stored[(record.key, record.version_id)] == replace(record, seq=n)
    assert store.max_seq() == 4
    assert store.put_object(obj("k", "v3", last_modified=5.0)).record.seq == 5


def test_insert_recovered_refuses_two_latest_rows(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.create_bucket(bucket_record())
    with pytest.raises(sa.exc.IntegrityError):
        meta_store.insert_recovered([obj("k", "v1"), obj("k", "v2")])
    assert meta_store.max_seq() == 0


# -- multipart ------------------------------------------------------------------------


def test_uploads_and_parts(store: SyncMetaStore) -> None:
    upload = UploadRecord(
        "up-b",
        BUCKET,
        "big/file",
        initiated_at=50.0,
        owner_name="alice",
        user_metadata={"k": "v"},
        extra={"sse": "AES256"},
        tags={"t": "1"},
    )
    store.create_upload(upload)
    store.create_upload(UploadRecord("up-a", BUCKET, "big/file", initiated_at=60.0))
    store.create_upload(UploadRecord("up-c", BUCKET, "another", initiated_at=70.0))
    assert store.get_upload("up-b") == replace(upload, updated_at=50.0)
    assert store.get_upload("missing") is None
    with pytest.raises(RecordNotFound):
        store.create_upload(UploadRecord("up-x", "missing", "k", initiated_at=1.0))

    def ids(**kw: Any) -> list[str]:
        return [u.upload_id for u in store.list_uploads(BUCKET, **kw)]

    assert ids() == ["up-c", "up-a", "up-b"]
    assert ids(prefix="big/") == ["up-a", "up-b"]
    assert ids(key_marker="another") == ["up-a", "up-b"]
    assert ids(key_marker="big/file", upload_id_marker="up-a") == ["up-b"]
    assert ids(key_marker="big/file") == []
    assert ids(limit=1) == ["up-c"]

    def part(number: int, blob: str) -> PartRecord:
        return PartRecord("up-b", number, blob, 5, f"etag-{blob}", 80.0, {"crc32": "x"})

    assert store.put_part(part(2, "p2")) is None
    assert store.put_part(part(1, "p1")) is None
    assert store.put_part(part(3, "p3")) is None
    assert store.put_part(part(2, "p2-new")) == "p2"
    assert store.put_part(part(2, "p2-new")) is None  # retried request
    assert [p.blob_id for p in store.list_parts("up-b")] == ["p1", "p2-new", "p3"]
    assert [p.part_number for p in store.list_parts("up-b", after_part=1, limit=1)] == [2]
    assert store.list_parts("up-b")[0] == part(1, "p1")
    with pytest.raises(RecordNotFound):
        store.put_part(PartRecord("missing", 1, "b", 1, "e", 1.0))

    removed = store.delete_upload("up-b")
    assert [p.blob_id for p in removed] == ["p1", "p2-new", "p3"]
    assert store.get_upload("up-b") is None
    assert store.list_parts("up-b") == []
    assert store.delete_upload("up-b") == []


# -- users, credentials, settings -----------------------------------------------------


def test_users_and_credentials(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    alice = UserRecord("u-alice", "alice", created_at=1.0, description="ops")
    root = UserRecord("u-root", "root", created_at=0.5, is_root=True)
    assert store.create_user(alice)
    assert store.create_user(root)
    assert not store.create_user(UserRecord("u-other", "alice", created_at=2.0))
    assert store.get_user("u-alice") == replace(alice, updated_at=1.0)
    assert store.get_user_by_name("root") == replace(root, updated_at=0.5)
    assert store.get_user("nobody") is None and store.get_user_by_name("nobody") is None
    assert [u.username for u in store.list_users()] == ["alice", "root"]

    key = CredentialRecord("AKIAALICE", "secret", "u-alice", created_at=3.0)
    assert store.create_credential(key)
    assert not store.create_credential(replace(key, secret_access_key="other"))
    assert store.create_credential(CredentialRecord("AKIAROOT", "s", "u-root", created_at=4.0))
    with pytest.raises(RecordNotFound):
        store.create_credential(CredentialRecord("AKIAX", "s", "u-missing", created_at=4.0))

    assert store.get_credential("AKIAALICE") == replace(key, updated_at=3.0)
    identity = store.lookup_identity("AKIAALICE")
    assert identity == (replace(key, updated_at=3.0), replace(alice, updated_at=1.0))
    assert store.lookup_identity("AKIAMISSING") is None
    assert [c.access_key_id for c in store.list_credentials()] == ["AKIAALICE", "AKIAROOT"]
    assert [c.access_key_id for c in store.list_credentials("u-root")] == ["AKIAROOT"]

    store.update_credential(replace(key, active=False, description="rotated", updated_at=9.0))
    identity = store.lookup_identity("AKIAALICE")
    assert identity is not None
    assert (identity[0].active, identity[0].description, identity[0].updated_at) == (
        False,
        "rotated",
        9.0,
    )
    with pytest.raises(RecordNotFound):
        store.update_credential(replace(key, access_key_id="AKIAMISSING"))
    assert store.delete_credential("AKIAALICE")
    assert not store.delete_credential("AKIAALICE")
    assert store.lookup_identity("AKIAALICE") is None


def test_settings(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    assert store.get_setting("node_id") is None
    store.put_setting("node_id", "n-1")
    store.put_setting("node_id", "n-2")
    store.put_setting("ünïcode", "välue")
    assert store.get_setting("node_id") == "n-2"
    assert store.get_setting("ünïcode") == "välue"
    assert store.delete_setting("node_id")
    assert not store.delete_setting("node_id")
    assert store.get_setting("node_id") is None
    assert store.get_tombstone(TOMBSTONE_SETTING, "node_id") is not None
    assert store.get_tombstone(TOMBSTONE_SETTING, "ünïcode") is None


def test_conditional_puts_check_inside_the_transaction(store: SyncMetaStore) -> None:
    from objstore.meta.records import WritePrecondition
    from objstore.meta.store import PreconditionNotMet

    store.create_bucket(BucketRecord("cond", "owner", "us-east-1", 1.0))
    first = ObjectRecord("cond", "k", NULL_VERSION, str(uuid.uuid4()), 1, "etag-1", 1.0)
    store.put_object(first, WritePrecondition(if_absent=True))
    with pytest.raises(PreconditionNotMet) as caught:
        store.put_object(replace(first, blob_id=str(uuid.uuid4())),
                         WritePrecondition(if_absent=True))
    assert caught.value.reason == "exists"
    with pytest.raises(PreconditionNotMet) as caught:
        store.put_object(replace(first, etag="etag-2"), WritePrecondition(if_match_etag="x"))
    assert caught.value.reason == "mismatch"
    second = replace(first, blob_id=str(uuid.uuid4()), etag="etag-2", last_modified=2.0)
    store.put_object(second, WritePrecondition(if_match_etag="etag-1"))
    assert store.get_object("cond", "k").etag == "etag-2"  # type: ignore[union-attr]
    with pytest.raises(PreconditionNotMet) as caught:
        store.put_object(replace(first, key="other"), WritePrecondition(if_match_etag="e"))
    assert caught.value.reason == "missing"
