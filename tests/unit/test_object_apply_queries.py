"""The apply of replicated object rows and deletes (meta/object_apply_queries.py), on
SQLite and PostgreSQL: each last-writer-wins rule against a stored row, the no-op that takes
no seq, tombstones against rows in both orders, the key's latest recomputed, the blobs a
replacement orphans."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy.dialects import postgresql

from objstore.convergence import lww
from objstore.meta.apply_statements import APPLY_STATE
from objstore.meta.driver import driver_statement
from objstore.meta.records import NULL_VERSION, BucketRecord, ObjectRecord, PartRef
from objstore.meta.store import (
    TOMBSTONE_OBJECT,
    ApplyVerdict,
    RecordNotFound,
    SyncMetaStore,
    object_tombstone_key,
)
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

BUCKET = "replica"
V1 = "11111111-1111-4111-8111-111111111111"
V2 = "22222222-2222-4222-8222-222222222222"
V3 = "33333333-3333-4333-8333-333333333333"
BLOB_A = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
BLOB_B = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
PART_1 = "0000000a-0000-4000-8000-000000000001"
PART_2 = "0000000a-0000-4000-8000-000000000002"


def row(version_id: str = V1, *, at: float = 10.0, blob: str = BLOB_A,
        lock_at: float | None = None, **fields: object) -> ObjectRecord:
    values: dict[str, object] = {"size": 3, "etag": "e", **fields}
    return ObjectRecord(BUCKET, "k", version_id, blob, last_modified=at,
                        lock_updated_at=lock_at, **values)  # type: ignore[arg-type]


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def stored(store: SyncMetaStore, version_id: str = V1) -> ObjectRecord | None:
    return store.get_object(BUCKET, "k", version_id)


def test_no_local_row_applies_with_a_fresh_seq(store: SyncMetaStore) -> None:
    before = store.max_seq()
    result = store.apply_replicated_object(row(seq=99, is_latest=False))
    assert result.applied and result.verdict is ApplyVerdict.APPLIED
    assert result.record is not None
    assert result.record.seq == before + 1 and result.record.is_latest  # node-local fields
    assert stored(store) == result.record and result.orphaned_blob_ids == ()


def test_a_newer_row_wins_and_orphans_the_replaced_blob(store: SyncMetaStore) -> None:
    local = store.put_object(row(at=10.0, blob=BLOB_A)).record
    result = store.apply_replicated_object(row(at=11.0, blob=BLOB_B))
    assert result.applied and result.orphaned_blob_ids == (BLOB_A,)
    assert result.record is not None and result.record.seq == local.seq + 1
    assert stored(store) == result.record


def test_an_older_row_is_ignored_without_a_seq(store: SyncMetaStore) -> None:
    local = store.put_object(row(at=10.0, blob=BLOB_A)).record
    seq = store.max_seq()
    result = store.apply_replicated_object(row(at=9.999999, blob=BLOB_B))
    assert result.verdict is ApplyVerdict.KEEP_LOCAL and not result.applied
    assert result.record == local and result.orphaned_blob_ids == ()
    assert store.max_seq() == seq and stored(store) == local


def test_an_identical_row_is_a_no_op_without_a_seq(store: SyncMetaStore) -> None:
    first = store.apply_replicated_object(row()).record
    assert first is not None
    seq = store.max_seq()
    # is_latest and seq are node-local: a copy differing only there is the same row
    again = store.apply_replicated_object(replace(first, seq=1234, is_latest=False))
    assert again.verdict is ApplyVerdict.IDENTICAL and again.record == first
    assert store.max_seq() == seq and stored(store) == first


@pytest.mark.parametrize("local_lock, incoming_lock, wins", [
    (None, 5.0, True),   # None is older than any value
    (5.0, None, False),  # a tie never erases a retention
    (5.0, 6.0, True),
    (6.0, 5.0, False),
])
def test_a_last_modified_tie_is_decided_by_lock_updated_at(
    store: SyncMetaStore, local_lock: float | None, incoming_lock: float | None, wins: bool,
) -> None:
    local = store.put_object(row(lock_at=local_lock, legal_hold_status=(
        "ON" if local_lock is not None else None))).record
    seq = store.max_seq()
    incoming = row(lock_at=incoming_lock, legal_hold_status=(
        "ON" if incoming_lock is not None else None), retention_mode=(
        "GOVERNANCE" if incoming_lock is not None else None))
    result = store.apply_replicated_object(incoming)
    assert result.applied is wins
    if wins:
        assert stored(store) == replace(incoming, seq=seq + 1)
    else:
        assert stored(store) == local and store.max_seq() == seq


def test_the_null_version_tie_is_decided_by_blob_id_in_both_orders(
    store: SyncMetaStore,
) -> None:
    low, high = row(NULL_VERSION, blob=BLOB_A), row(NULL_VERSION, blob=BLOB_B)
    store.apply_replicated_object(low)
    assert store.apply_replicated_object(high).orphaned_blob_ids == (BLOB_A,)
    assert store.apply_replicated_object(low).verdict is ApplyVerdict.KEEP_LOCAL
    kept = stored(store, NULL_VERSION)
    assert kept is not None and kept.blob_id == BLOB_B


def test_a_lock_change_applied_again_takes_a_fresh_seq(store: SyncMetaStore) -> None:
    plain = store.apply_replicated_object(row()).record
    assert plain is not None
    locked = replace(plain, retention_mode="COMPLIANCE", retain_until_date=99.0,
                     lock_updated_at=20.0)
    result = store.apply_replicated_object(locked)
    assert result.applied and result.orphaned_blob_ids == ()  # same blob: kept
    assert result.record is not None and result.record.seq == plain.seq + 1
    assert result.record.retention_mode == "COMPLIANCE"
    seq = store.max_seq()
    assert store.apply_replicated_object(locked).verdict is ApplyVerdict.IDENTICAL
    assert store.max_seq() == seq


def test_a_replaced_composite_orphans_its_blob_and_parts(store: SyncMetaStore) -> None:
    parts = (PartRef(1, PART_1, 5, "p1"), PartRef(2, PART_2, 5, "p2"))
    store.apply_replicated_object(row(blob=BLOB_A, parts=parts, size=10, etag="x-2"))
    result = store.apply_replicated_object(row(at=12.0, blob=BLOB_B))
    assert result.orphaned_blob_ids == (BLOB_A, PART_1, PART_2)


def test_is_latest_follows_last_modified_whatever_the_arrival_order(
    store: SyncMetaStore,
) -> None:
    store.apply_replicated_object(row(V2, at=20.0, blob=BLOB_B))
    late = store.apply_replicated_object(row(V1, at=10.0)).record
    assert late is not None and not late.is_latest
    newer = stored(store, V2)
    assert newer is not None and newer.is_latest
    assert store.get_object(BUCKET, "k") == newer
    newest = store.apply_replicated_object(row(V3, at=30.0, blob=PART_1)).record
    assert newest is not None and newest.is_latest
    assert [v.version_id for v in store.list_versions(BUCKET) if v.is_latest] == [V3]


def test_replacing_the_latest_with_an_older_stamp_promotes_the_newest(
    store: SyncMetaStore,
) -> None:
    # A latest version stamped older than another: what a local write on a lagging node
    # left before writes were stamped after the key's latest (rebuilt here as it was).
    store.insert_recovered([replace(row(V2, at=20.0, blob=BLOB_B), is_latest=False),
                            replace(row(V1, at=10.0), is_latest=True)])
    result = store.apply_replicated_object(row(V1, at=15.0, blob=PART_1))
    assert result.applied and result.orphaned_blob_ids == (BLOB_A,)
    assert result.record is not None and not result.record.is_latest
    latest = store.get_object(BUCKET, "k")
    assert latest is not None and latest.version_id == V2
    assert [v.version_id for v in store.list_versions(BUCKET) if v.is_latest] == [V2]


def test_a_late_copy_of_an_older_version_replaces_it_without_a_promotion(
    store: SyncMetaStore,
) -> None:
    store.apply_replicated_object(row(V1, at=10.0))
    newest = store.apply_replicated_object(row(V2, at=20.0, blob=BLOB_B)).record
    assert newest is not None and newest.is_latest
    seq = store.max_seq()
    result = store.apply_replicated_object(row(V1, at=15.0, blob=PART_1))
    assert result.applied and result.orphaned_blob_ids == (BLOB_A,)
    assert result.record is not None and not result.record.is_latest
    assert result.record.seq == seq + 1 and store.max_seq() == seq + 1  # no promotion
    assert stored(store, V1) == result.record
    assert store.get_object(BUCKET, "k") == newest  # untouched: the same seq


def test_a_row_applied_again_after_its_key_moved_on_is_identical(
    store: SyncMetaStore,
) -> None:
    first = store.apply_replicated_object(row(V1, at=10.0)).record
    store.apply_replicated_object(row(V2, at=20.0, blob=BLOB_B))
    seq = store.max_seq()
    again = store.apply_replicated_object(row(V1, at=10.0))
    assert again.verdict is ApplyVerdict.IDENTICAL and not again.orphaned_blob_ids
    assert first is not None and again.record == replace(first, is_latest=False)
    assert store.max_seq() == seq


def test_the_apply_takes_the_bucket_under_key_share_on_postgres() -> None:
    """A concurrent bucket delete waits for the apply (the bucket row's lock), and the
    lock names the bucket alone: the register's row is on the nullable side of the
    outer join."""
    sql = driver_statement(postgresql.dialect(), APPLY_STATE).sql
    assert sql.rstrip().endswith("FOR KEY SHARE OF buckets")


def test_a_missing_bucket_is_refused_and_takes_no_seq(store: SyncMetaStore) -> None:
    seq = store.max_seq()
    with pytest.raises(RecordNotFound):
        store.apply_replicated_object(replace(row(), bucket="nobucket"))
    with pytest.raises(RecordNotFound):
        store.apply_replicated_delete("nobucket", "k", V1, 10.0)
    assert store.max_seq() == seq


def test_a_row_with_a_non_finite_stamp_is_refused(store: SyncMetaStore) -> None:
    with pytest.raises(ValueError):
        store.apply_replicated_object(row(at=float("nan")))
    with pytest.raises(ValueError):
        store.apply_replicated_delete(BUCKET, "k", V1, float("inf"))


def test_a_far_future_row_is_flagged_and_still_applied(store: SyncMetaStore) -> None:
    result = store.apply_replicated_object(row(at=store.clock() + 3600.0))
    assert result.applied and result.future_stamped
    assert not store.apply_replicated_object(row(V2, at=store.clock())).future_stamped


# -- tombstones ---------------------------------------------------------------------------


def tombstone(store: SyncMetaStore, version_id: str = V1) -> tuple[float, int | None] | None:
    return store.get_tombstone(TOMBSTONE_OBJECT, object_tombstone_key(BUCKET, "k", version_id))


def test_a_delete_beats_a_row_no_newer_than_it(store: SyncMetaStore) -> None:
    store.apply_replicated_object(row(V1, at=5.0, blob=BLOB_B))
    local = store.apply_replicated_object(row(V2, at=10.0)).record
    assert local is not None
    seq = store.max_seq()
    result = store.apply_replicated_delete(BUCKET, "k", V2, 10.0)  # a tie: the delete wins
    assert result.recorded and result.removed == local
    assert result.orphaned_blob_ids == (BLOB_A,)
    assert result.new_latest is not None and result.new_latest.version_id == V1
    assert result.new_latest.is_latest and store.get_object(BUCKET, "k") == result.new_latest
    assert stored(store, V2) is None
    assert tombstone(store, V2) == (10.0, seq + 1)
    # the row arriving late again stays deleted, and takes no seq
    seq = store.max_seq()
    late = store.apply_replicated_object(local)
    assert late.verdict is ApplyVerdict.DELETED and late.record is None
    assert store.max_seq() == seq and stored(store, V2) is None


def test_a_local_delete_of_a_row_stamped_ahead_of_this_clock_stays_deleted(
    store: SyncMetaStore,
) -> None:
    # The row came from a peer whose clock runs an hour ahead of this database's.
    ahead = store.clock() + 3600.0
    local = store.apply_replicated_object(row(V1, at=ahead)).record
    assert local is not None
    result = store.delete_object_version(BUCKET, "k", V1)
    assert result.removed == local and result.deleted_at == lww.stamp_write(0.0, ahead)
    found = tombstone(store)
    assert found is not None and found[0] == result.deleted_at
    assert not lww.row_survives_tombstone(local, found[0])
    # a late copy of that very row (anti-entropy, a slow fan-out) does not bring it back
    seq = store.max_seq()
    late = store.apply_replicated_object(replace(local, seq=0, is_latest=False))
    assert late.verdict is ApplyVerdict.DELETED and stored(store) is None
    assert store.max_seq() == seq
    # nor does the peer's deletion, stamped alike, move the tombstone
    assert not store.apply_replicated_delete(BUCKET, "k", V1, ahead).recorded


def test_a_local_delete_is_stamped_with_the_clock_when_it_is_ahead(
    store: SyncMetaStore,
) -> None:
    store.apply_replicated_object(row(V1, at=10.0))
    result = store.delete_object_version(BUCKET, "k", V1)
    assert result.deleted_at is not None and result.deleted_at > 10.0
    assert tombstone(store) == (result.deleted_at, store.max_seq())
    assert store.delete_object_version(BUCKET, "k", V1).deleted_at is None  # nothing removed


def test_a_delete_first_then_rows_older_and_newer(store: SyncMetaStore) -> None:
    result = store.apply_replicated_delete(BUCKET, "k", NULL_VERSION, 10.0)
    assert result.recorded and result.removed is None and result.deleted_at == 10.0
    seq = store.max_seq()
    older = store.apply_replicated_object(row(NULL_VERSION, at=10.0))
    assert older.verdict is ApplyVerdict.DELETED and store.max_seq() == seq
    assert stored(store, NULL_VERSION) is None
    newer = store.apply_replicated_object(row(NULL_VERSION, at=10.5))  # strictly newer
    assert newer.applied and stored(store, NULL_VERSION) == newer.record


def test_a_row_newer_than_the_delete_survives_it(store: SyncMetaStore) -> None:
    local = store.apply_replicated_object(row(at=20.0)).record
    result = store.apply_replicated_delete(BUCKET, "k", V1, 10.0)
    assert result.recorded and result.removed is None  # the deletion is known all the same
    assert stored(store) == local
    found = tombstone(store)
    assert found is not None and found[0] == 10.0


def test_a_delete_no_newer_than_the_known_tombstone_takes_no_seq(
    store: SyncMetaStore,
) -> None:
    store.apply_replicated_delete(BUCKET, "k", V1, 10.0)
    seq = store.max_seq()
    for stamp in (10.0, 9.0):
        result = store.apply_replicated_delete(BUCKET, "k", V1, stamp)
        assert not result.recorded and result.deleted_at == 10.0
    assert store.max_seq() == seq and tombstone(store) == (10.0, seq)
    later = store.apply_replicated_delete(BUCKET, "k", V1, 12.0)  # moves the tombstone on
    assert later.recorded and tombstone(store) == (12.0, seq + 1)


def test_a_delete_of_a_version_that_is_not_latest_promotes_nothing(
    store: SyncMetaStore,
) -> None:
    old = store.apply_replicated_object(row(V1, at=10.0)).record
    latest = store.apply_replicated_object(row(V2, at=20.0, blob=BLOB_B)).record
    seq = store.max_seq()
    result = store.apply_replicated_delete(BUCKET, "k", V1, 11.0)
    assert old is not None and result.removed == replace(old, is_latest=False)
    assert result.recorded and result.new_latest is None
    assert result.orphaned_blob_ids == (BLOB_A,)
    assert tombstone(store, V1) == (11.0, seq + 1) and store.max_seq() == seq + 1
    assert store.get_object(BUCKET, "k") == latest


def test_a_delete_after_a_newer_row_moves_the_tombstone_and_keeps_the_row(
    store: SyncMetaStore,
) -> None:
    store.apply_replicated_delete(BUCKET, "k", V1, 5.0)
    kept = store.apply_replicated_object(row(V1, at=30.0)).record
    seq = store.max_seq()
    result = store.apply_replicated_delete(BUCKET, "k", V1, 20.0)
    assert result.recorded and result.deleted_at == 20.0 and result.removed is None
    assert tombstone(store, V1) == (20.0, seq + 1)
    assert stored(store, V1) == kept


@pytest.mark.parametrize("case", ["row", "tombstone", "both", "nothing", "no bucket"])
def test_register_states_of_one_register_reads_it_in_one_snapshot(
    store: SyncMetaStore, case: str,
) -> None:
    """One register (a peer's row of a quorum write) is read in one statement on the
    driver: the same answer as the batch read gives for it."""
    bucket = "gone" if case == "no bucket" else BUCKET
    if case in ("tombstone", "both"):
        store.apply_replicated_delete(BUCKET, "k", V1, 10.0)
    local = None
    if case in ("row", "both"):
        local = store.apply_replicated_object(row(V1, at=12.0, parts=(
            PartRef(1, PART_1, 5, "p1"),), checksums={"crc32": "AAAA"})).record
    register = (bucket, "k", V1)
    [single] = store.register_states([register])
    assert single == {"row": (local, None), "tombstone": (None, 10.0),
                      "both": (local, 10.0), "nothing": (None, None),
                      "no bucket": (None, None)}[case]
    assert store.register_states([register, (BUCKET, "other", V1)])[0] == single


def test_a_future_stamped_delete_is_flagged(store: SyncMetaStore) -> None:
    assert store.apply_replicated_delete(BUCKET, "k", V1, store.clock() + 3600.0
                                         ).future_stamped


def test_every_apply_tells_the_object_caches(store: SyncMetaStore) -> None:
    told: list[None] = []
    store.objects_changed = lambda: told.append(None)
    store.apply_replicated_object(row())
    store.apply_replicated_object(row())  # no change: telling is harmless
    store.apply_replicated_delete(BUCKET, "k", V1, 20.0)
    assert len(told) == 3
