"""The durable outbox's rows (meta/outbox_queries.py) on SQLite and PostgreSQL: an entry
is left in the change's own transaction (a write that fails leaves none), entries come in
commit order with overwrites, tag changes and deletes each their own, cursors per
consumer never move back, the backlog and the purge follow the slowest consumer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

from objstore.meta import migrations, schema
from objstore.meta.errors import PreconditionNotMet
from objstore.meta.outbox_queries import OutboxNote
from objstore.meta.records import BucketRecord, ObjectRecord, WritePrecondition
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    FakeClock,
    backend,
    db_engine,
    make_engine,
    meta_store,
    postgres_database,
)

BUCKET = "outbox"
NULL = "null"
V2 = "22222222-2222-4222-8222-222222222222"
NOTE = OutboxNote("object_written", "PutObject", "u-1", "10.0.0.9", "req-1")


def row(key: str, version_id: str = NULL, *, size: int = 3, blob: str = "b-1"
        ) -> ObjectRecord:
    return ObjectRecord(BUCKET, key, version_id, blob, size=size, etag=f"e{size}",
                        last_modified=10.0)


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def test_a_write_without_a_note_leaves_no_entry(store: SyncMetaStore) -> None:
    store.put_object(row("a"))
    assert store.outbox_read_after(0, 10).entries == ()


def test_overwrites_tag_changes_and_deletes_each_leave_an_entry_in_commit_order(
        store: SyncMetaStore) -> None:
    first = store.put_object(row("a", size=3), outbox=NOTE).record
    second = store.put_object(row("a", size=5, blob="b-2"), outbox=NOTE).record
    assert store.get_object(BUCKET, "a", NULL).size == 5  # the first row was replaced
    tagged = replace(second, tags={"t": "1"})
    store.update_object(tagged, outbox=replace(NOTE, kind="tags_changed"))
    store.delete_object_version(BUCKET, "a", NULL, outbox=replace(NOTE, kind="version_deleted",
                                                                  operation="DeleteObject"))
    page = store.outbox_read_after(0, 10)
    assert [(e.kind, e.size, e.etag) for e in page.entries] == [
        ("object_written", 3, "e3"), ("object_written", 5, "e5"),
        ("tags_changed", 5, "e5"), ("version_deleted", 5, "e5")]
    seqs = [e.seq for e in page.entries]
    assert seqs == sorted(seqs) and seqs[0] == first.seq and page.max_seq == seqs[-1]
    entry = page.entries[0]
    assert (entry.bucket, entry.key, entry.version_id, entry.principal, entry.source_address,
            entry.request_id, entry.operation) == (BUCKET, "a", NULL, "u-1", "10.0.0.9",
                                                   "req-1", "PutObject")
    assert page.entries[-1].operation == "DeleteObject"
    assert [e.seq for e in store.outbox_read_after(seqs[1], 10).entries] == seqs[2:]
    assert len(store.outbox_read_after(0, 2).entries) == 2


def test_a_write_whose_transaction_fails_leaves_no_entry(store: SyncMetaStore) -> None:
    store.put_object(row("a"), outbox=NOTE)
    with pytest.raises(PreconditionNotMet):
        store.put_object(row("a", size=9), WritePrecondition(if_absent=True), outbox=NOTE)

    def refuse(before: object, after: object) -> None:
        raise RuntimeError("over quota")

    with pytest.raises(RuntimeError):
        store.put_object(row("b"), usage_check=refuse, outbox=NOTE)
    assert [(e.key, e.size) for e in store.outbox_read_after(0, 10).entries] == [("a", 3)]


def test_cursors_are_per_consumer_and_never_move_back(store: SyncMetaStore) -> None:
    assert store.outbox_cursor("hooks") == 0
    store.outbox_advance("hooks", 5)
    store.outbox_advance("hooks", 3)
    assert store.outbox_cursor("hooks") == 5 and store.outbox_cursor("journal") == 0


def test_backlog_and_purge_follow_the_slowest_consumer(store: SyncMetaStore) -> None:
    seqs = [store.put_object(row(k), outbox=NOTE).record.seq for k in "abc"]
    assert store.outbox_backlog([]) == 0 and store.outbox_purge([]) == 0
    assert store.outbox_backlog(["fast", "slow"]) == 3
    store.outbox_advance("fast", seqs[2])
    store.outbox_advance("slow", seqs[0])
    assert store.outbox_backlog(["fast", "slow"]) == 2
    assert store.outbox_purge(["fast", "slow"]) == 1
    assert [e.seq for e in store.outbox_read_after(0, 10).entries] == seqs[1:]
    store.outbox_advance("slow", seqs[2])
    assert store.outbox_purge(["fast", "slow"]) == 2
    assert store.outbox_backlog(["fast", "slow"]) == 0


def test_a_version_6_database_gains_the_outbox(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:6])
        with engine.begin() as conn:  # a new database is built from today's metadata
            schema.outbox_cursors.drop(conn)
            schema.outbox.drop(conn)
        assert not sa.inspect(engine).has_table("outbox")
        assert migrations.migrate(engine) == list(range(7, migrations.current_version() + 1))
        store = SyncMetaStore(engine, clock=FakeClock())
        store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
        store.put_object(row("a"), outbox=NOTE)
        store.outbox_advance("hooks", 1)
        assert store.outbox_backlog(["hooks"]) == 0
    finally:
        engine.dispose()
