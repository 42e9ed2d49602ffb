"""The tombstone purge on the database (meta/tombstone_purge_queries.py), on SQLite and
PostgreSQL: tombstones of every family older than the cutoff go, in bounded batches,
recent ones stay; tombstones left by the real deletion paths (object version, setting)
go too; and a purged object tombstone leaves the apply path working (a later replicated
delete of the same version is recorded again)."""

from __future__ import annotations

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.dialect import read_transaction, write_transaction
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import SyncMetaStore
from objstore.meta.tombstones import (
    TOMBSTONE_BUCKET,
    TOMBSTONE_CREDENTIAL,
    TOMBSTONE_OBJECT,
    TOMBSTONE_SETTING,
    TOMBSTONE_TEAM_MEMBER,
    leave_tombstone,
    object_tombstone_key,
)
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

NOW = 1_800_000_000.0
FAMILIES = (TOMBSTONE_BUCKET, TOMBSTONE_CREDENTIAL, TOMBSTONE_SETTING, TOMBSTONE_TEAM_MEMBER)
BLOB = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"


def stamp(store: SyncMetaStore, family: str, key: str, deleted_at: float,
          seq: int | None = None) -> None:
    with write_transaction(store.engine) as conn:
        leave_tombstone(store, conn, family, key, seq, deleted_at=deleted_at)


def remaining(store: SyncMetaStore) -> set[tuple[str, str]]:
    t = schema.tombstones
    with read_transaction(store.engine) as conn:
        return {(row.family, row.key) for row in conn.execute(sa.select(t.c.family, t.c.key))}


def test_old_tombstones_of_every_family_go_and_recent_ones_stay(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    for family in FAMILIES:
        stamp(meta_store, family, "old", NOW - 100)
        stamp(meta_store, family, "recent", NOW - 10)
    stamp(meta_store, TOMBSTONE_OBJECT, object_tombstone_key("b", "k:1", "v1"), NOW - 100,
          seq=7)
    stamp(meta_store, TOMBSTONE_OBJECT, object_tombstone_key("b", "k:1", "v2"), NOW - 10,
          seq=8)
    stamp(meta_store, TOMBSTONE_SETTING, "edge", NOW - 50)  # exactly at the cutoff: kept

    assert meta_store.purge_tombstones(NOW - 50) == len(FAMILIES) + 1

    assert remaining(meta_store) == {
        *((family, "recent") for family in FAMILIES),
        (TOMBSTONE_OBJECT, object_tombstone_key("b", "k:1", "v2")),
        (TOMBSTONE_SETTING, "edge"),
    }
    assert meta_store.purge_tombstones(NOW - 50) == 0


def test_the_purge_goes_in_bounded_batches(meta_store: SyncMetaStore) -> None:  # noqa: F811
    for i in range(7):
        stamp(meta_store, TOMBSTONE_SETTING, f"old-{i}", NOW - 100 + i)
    stamp(meta_store, TOMBSTONE_SETTING, "recent", NOW)

    assert [meta_store.purge_tombstones(NOW - 1, batch_size=3) for _ in range(4)] == [3, 3, 1, 0]
    assert remaining(meta_store) == {(TOMBSTONE_SETTING, "recent")}


def test_tombstones_left_by_real_deletions_are_purged(meta_store: SyncMetaStore) -> None:  # noqa: F811
    # The store's clock (FakeClock) stamps the deletions: one second per reading.
    meta_store.put_setting("gone", "1")
    meta_store.delete_setting("gone")
    meta_store.create_bucket(BucketRecord(name="b", owner_id="u", region="r", created_at=NOW))
    meta_store.put_object(ObjectRecord(
        bucket="b", key="k", version_id="v1", blob_id=BLOB, size=1, etag="e",
        last_modified=meta_store.clock(), is_latest=True))
    meta_store.delete_object_version("b", "k", "v1")
    setting_at = meta_store.get_tombstone(TOMBSTONE_SETTING, "gone")
    object_at = meta_store.get_tombstone(TOMBSTONE_OBJECT,
                                         object_tombstone_key("b", "k", "v1"))
    assert setting_at is not None and object_at is not None
    assert object_at[1] is not None  # the object tombstone carries its seq

    # A cutoff between the two deletions takes the older one only.
    assert meta_store.purge_tombstones(object_at[0]) == 1
    assert meta_store.get_tombstone(TOMBSTONE_SETTING, "gone") is None
    assert meta_store.get_tombstone(
        TOMBSTONE_OBJECT, object_tombstone_key("b", "k", "v1")) == object_at


def test_a_replicated_delete_after_the_purge_is_recorded_again(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.create_bucket(BucketRecord(name="b", owner_id="u", region="r", created_at=NOW))
    key = object_tombstone_key("b", "k", "v1")
    stamp(meta_store, TOMBSTONE_OBJECT, key, NOW - 100, seq=1)
    assert meta_store.purge_tombstones(NOW) == 1

    outcome = meta_store.apply_replicated_delete("b", "k", "v1", NOW - 100)

    assert outcome.recorded
    found = meta_store.get_tombstone(TOMBSTONE_OBJECT, key)
    assert found is not None and found[0] == NOW - 100


def test_an_expired_deletion_of_nothing_held_is_not_recorded_again(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    """After a purge, a peer's copy of the same old deletion (a new node's full pull)
    is not recorded again under a fresh seq; a fresh one, or one that beats a row held
    here, or one newer than a tombstone held here, still is."""
    meta_store.create_bucket(BucketRecord(name="b", owner_id="u", region="r", created_at=NOW))
    expired_before = NOW - 50

    outcome = meta_store.apply_replicated_delete("b", "k", "v1", NOW - 100, expired_before)
    assert not outcome.recorded
    assert meta_store.get_tombstone(TOMBSTONE_OBJECT, object_tombstone_key("b", "k", "v1")) is None

    assert meta_store.apply_replicated_delete("b", "k", "v2", NOW - 10, expired_before).recorded

    meta_store.put_object(ObjectRecord(bucket="b", key="k", version_id="v3", blob_id=BLOB,
                                       size=1, etag="e", last_modified=NOW - 200))
    beaten = meta_store.apply_replicated_delete("b", "k", "v3", NOW - 100, expired_before)
    assert beaten.recorded and beaten.removed is not None
    assert meta_store.get_object("b", "k", "v3") is None

    stamp(meta_store, TOMBSTONE_OBJECT, object_tombstone_key("b", "k", "v4"), NOW - 300, seq=99)
    moved = meta_store.apply_replicated_delete("b", "k", "v4", NOW - 100, expired_before)
    assert moved.recorded and moved.deleted_at == NOW - 100
