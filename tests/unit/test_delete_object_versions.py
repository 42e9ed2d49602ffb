"""`delete_object_versions`, DeleteObjects' one transaction (SQLite and PostgreSQL): each
item leaves what `delete_object_version` leaves (the row gone, the newest remaining version
promoted, a tombstone with its own seq, the outbox entry), a guard that no longer holds or
a missing version is that item's outcome alone, a batch that removes nothing uses no seq,
and a failure rolls the whole batch back. `get_object_versions` reads many versions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from objstore.meta.object_write_queries import VersionDelete
from objstore.meta.outbox_queries import OutboxNote
from objstore.meta.records import NULL_VERSION, BucketRecord, DeleteResult, ObjectRecord
from objstore.meta.store import RowChanged, SyncMetaStore
from objstore.meta.tombstones import TOMBSTONE_OBJECT, object_tombstone_key
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

BUCKET = "batch"
NOTE = OutboxNote("version_deleted", "DeleteObjects", "u-1", "10.0.0.9", "req-1")


def obj(key: str, version_id: str = NULL_VERSION, stamp: float = 10.0) -> ObjectRecord:
    return ObjectRecord(BUCKET, key, version_id, f"blob-{key}-{version_id}", 3, "e",
                        stamp)


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def tombstone_seq(store: SyncMetaStore, key: str, version_id: str) -> int | None:
    found = store.get_tombstone(TOMBSTONE_OBJECT, object_tombstone_key(BUCKET, key,
                                                                        version_id))
    return None if found is None else found[1]


def test_each_item_has_its_own_outcome(store: SyncMetaStore) -> None:
    a = store.put_object(obj("a")).record
    b = store.put_object(obj("b")).record
    c = store.put_object(obj("c")).record
    before = store.max_seq()
    outcomes = store.delete_object_versions(BUCKET, [
        VersionDelete("a", NULL_VERSION, a.seq, NOTE),
        VersionDelete("missing", NULL_VERSION, None, NOTE),
        VersionDelete("b", NULL_VERSION, b.seq + 100, NOTE),  # the guard no longer holds
        VersionDelete("c", NULL_VERSION, c.seq, NOTE),
    ])
    assert len(outcomes) == 4
    first, missing, changed, last = outcomes
    assert isinstance(first, DeleteResult) and first.removed == a
    assert missing == DeleteResult(removed=None)
    assert isinstance(changed, RowChanged)
    assert isinstance(last, DeleteResult) and last.removed == c
    assert first.deleted_at is not None and last.deleted_at is not None
    # the others went; b did not, and is as it was
    assert store.get_object(BUCKET, "a") is None
    assert store.get_object(BUCKET, "c") is None
    assert store.get_object(BUCKET, "b") == b
    # a tombstone each, with its own seq, in order; as many seqs as removals
    seqs = [tombstone_seq(store, "a", NULL_VERSION), tombstone_seq(store, "c", NULL_VERSION)]
    assert seqs == [before + 1, before + 2]
    assert tombstone_seq(store, "b", NULL_VERSION) is None
    assert store.max_seq() == before + 2
    # an outbox entry per removed version, under its tombstone's seq
    entries = store.outbox_read_after(0, 10).entries
    assert [(e.key, e.seq, e.kind, e.operation) for e in entries] == [
        ("a", seqs[0], "version_deleted", "DeleteObjects"),
        ("c", seqs[1], "version_deleted", "DeleteObjects")]


def test_a_batch_leaves_what_single_deletes_leave(store: SyncMetaStore) -> None:
    """The same versions deleted one by one in one bucket and as a batch in another: the
    same rows remain, promoted alike, and the same tombstones and outbox entries."""
    store.create_bucket(BucketRecord("single", "u-1", "us-east-1", 1.0))
    for bucket in (BUCKET, "single"):
        for key in ("k1", "k2"):
            for n, version in enumerate(("v1", "v2", "v3")):
                store.put_object(replace(obj(key, version, 10.0 + n), bucket=bucket))
    doomed = [("k1", "v3"), ("k2", "v1"), ("k1", "v2")]  # k1: the latest, then the next
    for key, version in doomed:
        store.delete_object_version("single", key, version, outbox=NOTE)
    outcomes = store.delete_object_versions(BUCKET, [VersionDelete(key, version, None, NOTE)
                                                     for key, version in doomed])
    assert all(isinstance(o, DeleteResult) and o.removed is not None for o in outcomes)
    first = outcomes[0]
    assert isinstance(first, DeleteResult) and first.new_latest is not None
    assert first.new_latest.version_id == "v2"

    def shape(bucket: str) -> list[tuple[str, str, bool]]:
        return [(r.key, r.version_id, r.is_latest) for r in store.list_versions(bucket)]

    assert shape(BUCKET) == shape("single")
    assert [(r.key, r.version_id) for r in store.list_versions(BUCKET)
            if r.is_latest] == [("k1", "v1"), ("k2", "v3")]
    for key, version in doomed:
        assert tombstone_seq(store, key, version) is not None
    entries = store.outbox_read_after(0, 100).entries
    assert ([(e.key, e.version_id) for e in entries if e.bucket == BUCKET]
            == [(e.key, e.version_id) for e in entries if e.bucket == "single"] == doomed)


def test_items_of_distinct_keys_promote_and_report_the_row_as_it_is(
        store: SyncMetaStore) -> None:
    """`VersionDelete.of` a record read before a newer version demoted it (is_latest
    changes without a new seq): the outcome reports the row as it was removed."""
    old = store.put_object(obj("a", "v1", 10.0)).record
    store.put_object(obj("a", "v2", 11.0))  # demotes v1, whose seq stays
    latest = store.put_object(obj("b", "v1", 10.0)).record
    store.put_object(obj("b", "v0", 9.0))  # the latest now (restamped after v1)
    kept_b = store.get_object(BUCKET, "b", "v1")
    assert kept_b is not None and not kept_b.is_latest and kept_b.seq == latest.seq
    newest_b = store.get_object(BUCKET, "b", "v0")
    assert newest_b is not None and newest_b.is_latest
    first, second = store.delete_object_versions(BUCKET, [VersionDelete.of(old, NOTE),
                                                          VersionDelete.of(newest_b, NOTE)])
    assert isinstance(first, DeleteResult) and first.removed == replace(old, is_latest=False)
    assert first.new_latest is None
    assert isinstance(second, DeleteResult) and second.removed == newest_b
    assert second.new_latest is not None and second.new_latest.version_id == "v1"
    promoted = store.get_object(BUCKET, "b")
    assert promoted == second.new_latest and promoted.seq > (
        tombstone_seq(store, "b", "v0") or 0)
    assert [e.key for e in store.outbox_read_after(0, 10).entries] == ["a", "b"]


def test_a_batch_that_removes_nothing_uses_no_seq(store: SyncMetaStore) -> None:
    a = store.put_object(obj("a")).record
    before = store.max_seq()
    outcomes = store.delete_object_versions(BUCKET, [
        VersionDelete("nope", NULL_VERSION), VersionDelete("a", NULL_VERSION, a.seq - 1)])
    assert outcomes[0] == DeleteResult(removed=None)
    assert isinstance(outcomes[1], RowChanged)
    assert store.max_seq() == before
    assert store.delete_object_versions(BUCKET, []) == []


def test_a_version_named_twice_is_removed_once(store: SyncMetaStore) -> None:
    a = store.put_object(obj("a")).record
    first, again = store.delete_object_versions(BUCKET, [
        VersionDelete("a", NULL_VERSION, a.seq), VersionDelete("a", NULL_VERSION, a.seq)])
    assert isinstance(first, DeleteResult) and first.removed == a
    assert again == DeleteResult(removed=None)


def test_a_failure_rolls_the_whole_batch_back(store: SyncMetaStore,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    a = store.put_object(obj("a")).record
    b = store.put_object(obj("b")).record
    before = store.max_seq()

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the outbox insert failed")

    monkeypatch.setattr("objstore.meta.object_write_queries.record_outbox", broken)
    with pytest.raises(RuntimeError):
        store.delete_object_versions(BUCKET, [VersionDelete("a", NULL_VERSION, a.seq, NOTE),
                                              VersionDelete("b", NULL_VERSION, b.seq, NOTE)])
    assert store.get_object(BUCKET, "a") == a
    assert store.get_object(BUCKET, "b") == b
    assert store.max_seq() == before
    assert tombstone_seq(store, "a", NULL_VERSION) is None


def test_get_object_versions_reads_the_versions_that_exist(store: SyncMetaStore) -> None:
    written = [store.put_object(obj(f"k{i}", "v1")).record for i in range(5)]
    wanted = [(f"k{i}", "v1") for i in range(5)] + [("k1", "v9"), ("zz", "v1"), ("k0", "v1")]
    found = store.get_object_versions(BUCKET, wanted)
    assert found == {(r.key, r.version_id): r for r in written}
    assert store.get_object_versions(BUCKET, []) == {}


ODD_KEYS = ["plain", 'quote"d', "back\\slash", "ünï/cødé ✓", "tab\there", "x" * 1000]


def test_rows_as_read_go_in_one_statement_with_each_outcome(store: SyncMetaStore) -> None:
    """Items of rows as the caller read them (`VersionDelete.of`, what DeleteObjects
    sends) are removed set-based: keys JSON must carry as they are, a guard that no
    longer holds (RowChanged), a row gone meanwhile (nothing removed), the newest
    remaining version of several keys promoted, and a key left without any version."""
    for key in ODD_KEYS[:3]:  # an older version to promote once the latest goes
        store.put_object(obj(key, "v1", 10.0))
    read = {key: store.put_object(obj(key, "v2", 20.0)).record for key in ODD_KEYS}
    changed, gone = ODD_KEYS[3], ODD_KEYS[4]
    before = read[changed]
    assert before is not None
    store.update_object(replace(before, tags={"t": "1"}))  # a fresh seq
    store.delete_object_version(BUCKET, gone, "v2")
    outcomes = store.delete_object_versions(BUCKET, [
        VersionDelete.of(record, NOTE) for record in read.values() if record is not None])
    by_key = dict(zip(ODD_KEYS, outcomes, strict=True))
    assert isinstance(by_key[changed], RowChanged)
    assert by_key[gone] == DeleteResult(removed=None)
    assert store.get_object(BUCKET, changed, "v2") is not None
    for key in ODD_KEYS[:3]:
        done = by_key[key]
        assert isinstance(done, DeleteResult) and done.removed == read[key]
        assert done.new_latest is not None and done.new_latest.version_id == "v1"
        assert store.get_object(BUCKET, key) == done.new_latest
        assert tombstone_seq(store, key, "v2") is not None
    last = by_key[ODD_KEYS[5]]
    assert isinstance(last, DeleteResult) and last.removed == read[ODD_KEYS[5]]
    assert last.new_latest is None and store.get_object(BUCKET, ODD_KEYS[5]) is None
    # the same seqs as one by one: one per tombstone, one per promotion
    assert [e.key for e in store.outbox_read_after(0, 10).entries] == [
        ODD_KEYS[0], ODD_KEYS[1], ODD_KEYS[2], ODD_KEYS[5]]


def test_get_object_versions_reads_keys_as_they_are(store: SyncMetaStore) -> None:
    written = {(key, "v1"): store.put_object(obj(key, "v1")).record for key in ODD_KEYS}
    wanted = [*written, ("Plain", "v1"), ("plain", "V1")]
    assert store.get_object_versions(BUCKET, wanted) == written
