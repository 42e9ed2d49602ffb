"""The replication journal's rows (meta/replication_queries.py) on SQLite and PostgreSQL:
adding a page twice adds it once, pending entries come in id order, outcomes and retries,
the admin listing with filters and keyset pages, counts and the purge; migration 11 adds
the table to a version 7 database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from objstore.meta import migrations, schema
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.replication_queries import JournalFilter
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    FakeClock,
    backend,
    db_engine,
    make_engine,
    meta_store,
    postgres_database,
)


def values(seq: int, key: str = "k", rule_id: str = "r1", **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "seq": seq, "created_at": 10.0 + seq, "updated_at": 10.0 + seq, "kind": "put",
        "operation": "PutObject", "bucket": "b", "key": key, "version_id": f"v{seq}",
        "size": 3, "etag": "e", "rule_id": rule_id, "endpoint": "http://h:1",
        "dest_bucket": "d", "region": "us-east-1", "credential_ref": "c",
        "storage_class": None, "status": "PENDING", "attempts": 0,
        "next_attempt_at": 0.0, "last_error": None,
    }
    return {**base, **changes}


def test_a_page_added_twice_is_journaled_once(meta_store: SyncMetaStore) -> None:  # noqa: F811
    page = [values(1), values(2, key="other"), values(2, key="other", rule_id="r2")]
    assert meta_store.journal_add(page) == 3
    assert meta_store.journal_add(page) == 0
    assert [(e.seq, e.rule_id) for e in meta_store.journal_pending(10)] == [
        (1, "r1"), (2, "r1"), (2, "r2")]


def test_outcomes_retry_listing_counts_and_purge(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.journal_add([values(n, key=f"k{n % 2}") for n in range(1, 8)])
    first, second = meta_store.journal_pending(2)
    meta_store.journal_update(first.id, status="COMPLETED", attempts=1, next_attempt_at=0,
                              last_error=None, now=20.0)
    meta_store.journal_update(second.id, status="FAILED", attempts=4, next_attempt_at=0,
                              last_error="down", now=21.0)
    assert [e.id for e in meta_store.journal_pending(10)] == [e.id for e in
                                                              meta_store.journal_pending(10)]
    assert len(meta_store.journal_pending(10)) == 5
    counts = meta_store.journal_counts()
    assert (counts["PENDING"], counts["COMPLETED"], counts["FAILED"]) == (5, 1, 1)
    page, total = meta_store.journal_list(JournalFilter(limit=3))
    assert total == 7 and [e.seq for e in page] == [7, 6, 5]
    older, _ = meta_store.journal_list(JournalFilter(limit=3, before_id=page[-1].id))
    assert [e.seq for e in older] == [4, 3, 2]
    failed, total = meta_store.journal_list(JournalFilter(status="FAILED"))
    assert total == 1 and failed[0].last_error == "down"
    keyed, total = meta_store.journal_list(JournalFilter(bucket="b", key="k0"))
    assert total == 3 and {e.key for e in keyed} == {"k0"}
    retried = meta_store.journal_retry(second.id, 30.0)
    assert retried is not None and (retried.status, retried.attempts) == ("PENDING", 0)
    assert meta_store.journal_retry(10_000, 30.0) is None
    assert meta_store.journal_purge(before=20.5) == 1  # the COMPLETED one
    assert meta_store.journal_purge(before=20.5) == 0


def test_a_version_7_database_gains_the_journal(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:7])
        with engine.begin() as conn:  # a new database is built from today's metadata
            schema.replication_journal.drop(conn)
        assert not sa.inspect(engine).has_table("replication_journal")
        assert 11 in migrations.migrate(engine)
        store = SyncMetaStore(engine, clock=FakeClock())
        assert store.journal_add([values(1)]) == 1
    finally:
        engine.dispose()


def test_finish_stamps_the_version_it_sent_only(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.create_bucket(BucketRecord("b", "u-1", "us-east-1", 1.0))
    sent = meta_store.put_object(ObjectRecord("b", "k", "v1", "blob", size=3, etag="e",
                                              last_modified=5.0, replication_status="PENDING",
                                              tags={"t": "1"})).record
    meta_store.put_object(ObjectRecord("b", "r", "v1", "blob2", size=3, etag="e",
                                       last_modified=5.0, replication_status="REPLICA"))
    states = meta_store.version_states([("b", "k", "v1"), ("b", "r", "v1"), ("b", "x", "v")])
    assert states[("b", "k", "v1")].tags == {"t": "1"}
    assert states[("b", "r", "v1")].replication_status == "REPLICA"
    assert ("b", "x", "v") not in states
    meta_store.journal_add([values(1, key="k", version_id="v1"),
                            values(2, key="r", version_id="v1")])
    first, second = meta_store.journal_pending(10)
    meta_store.journal_finish(first, status="COMPLETED", attempts=1, next_attempt_at=0,
                              last_error=None, now=20.0, stamp="COMPLETED")
    stamped = meta_store.get_object("b", "k", "v1")
    assert stamped is not None and stamped.replication_status == "COMPLETED"
    assert stamped.seq > sent.seq
    meta_store.journal_finish(second, status="COMPLETED", attempts=1, next_attempt_at=0,
                              last_error=None, now=20.0, stamp="COMPLETED")
    replica = meta_store.get_object("b", "r", "v1")
    assert replica is not None and replica.replication_status == "REPLICA"
    assert meta_store.journal_pending(10) == []


def test_due_work_is_the_head_of_each_lane(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.journal_add([values(1, key="a"), values(2, key="a"), values(3, key="b"),
                            values(4, key="c", next_attempt_at=100.0), values(5, key="c")])
    assert [e.seq for e in meta_store.journal_pending(10, 50.0)] == [1, 3]
    assert [e.seq for e in meta_store.journal_pending(10, 200.0)] == [1, 3, 4]
    first = meta_store.journal_pending(1, 50.0)[0]
    meta_store.journal_update(first.id, status="COMPLETED", attempts=1, next_attempt_at=0,
                              last_error=None, now=60.0)
    assert [e.seq for e in meta_store.journal_pending(10, 50.0)] == [2, 3]
