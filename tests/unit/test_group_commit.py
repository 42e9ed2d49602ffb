"""Group commit (meta/group_commit.py): queued writes in one transaction, on SQLite and on
PostgreSQL, driven through the real `DbPool` writer threads (a fake reactor delivers the
results on the test thread) and through `run_group` itself.

What must hold: writes of a group commit together, each failing write rolls back only
itself and gets its own error, no write hears of its outcome before the group's COMMIT,
and a group that can not commit as one (a driver error inside it, a failed COMMIT) runs
its writes again alone.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from objstore.meta import schema, write_group
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import write_transaction
from objstore.meta.driver import driver_transaction
from objstore.meta.group_commit import GroupLimits, GroupStats, Outcome, run_group
from objstore.meta.pool import DbPool
from objstore.meta.records import BucketRecord, ObjectRecord, WritePrecondition
from objstore.meta.retry import RetryPolicy, call_with_retries
from objstore.meta.store import PreconditionNotMet, RecordNotFound, RowChanged, SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

WAIT_SECONDS = 20.0
BUCKET = "b1"
# No time bound: a slow test machine must not split the groups the tests expect.
UNHURRIED = GroupLimits(max_seconds=600.0)


class FakeReactor:
    """`callFromThread` queues; the test thread runs the calls (`pump`)."""

    def __init__(self) -> None:
        self._pending: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)

    def callFromThread(self, fn: Callable[..., Any], *args: Any) -> None:  # noqa: N802
        with self._arrived:
            self._pending.append((fn, args))
            self._arrived.notify_all()

    def pump(self, until: Callable[[], bool]) -> None:
        while not until():
            with self._arrived:
                if not self._pending:
                    assert self._arrived.wait(WAIT_SECONDS), "nothing came back"
                pending, self._pending = self._pending, []
            for fn, args in pending:
                fn(*args)


def outcomes(ds: list[Deferred[Any]], reactor: FakeReactor) -> list[Any]:
    """Each Deferred's result or Failure, once all have fired."""
    box: dict[int, Any] = {}
    for i, d in enumerate(ds):
        d.addBoth(lambda value, i=i: box.__setitem__(i, value))
    reactor.pump(lambda: len(box) == len(ds))
    return [box[i] for i in range(len(ds))]


def record(key: str, last_modified: float = 2.0) -> ObjectRecord:
    return ObjectRecord(BUCKET, key, "null", f"blob-{key}", 3, "e", last_modified)


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u", "us-east-1", 1.0))
    return meta_store


@pytest.fixture
def pool_and_reactor() -> Iterator[tuple[DbPool, FakeReactor]]:
    reactor = FakeReactor()
    pool = DbPool(reactor, write_threads=1, read_threads=1,  # type: ignore[arg-type]
                  group_limits=UNHURRIED)
    pool.start()
    try:
        yield pool, reactor
    finally:
        pool._stop_pools()


def hold_writer(pool: DbPool) -> threading.Event:
    """Occupy the writer thread until the returned event is set, so that the writes
    submitted meanwhile queue up and form one group."""
    release, started = threading.Event(), threading.Event()

    def blocking() -> None:
        started.set()
        release.wait(WAIT_SECONDS)

    pool.run_write(blocking)
    assert started.wait(WAIT_SECONDS)
    return release


def visible(store: SyncMetaStore, key: str) -> bool:
    """Whether `key` is committed, as another connection sees it."""
    return store.get_object(BUCKET, key) is not None


# -- through the writer pool ---------------------------------------------------------


def test_queued_puts_commit_as_one_group(
    store: SyncMetaStore, pool_and_reactor: tuple[DbPool, FakeReactor]
) -> None:
    pool, reactor = pool_and_reactor
    meta = MetaStore(store, pool)
    release = hold_writer(pool)
    ds = [meta.put_object(record(f"k{i}")) for i in range(10)]
    release.set()
    results = outcomes(ds, reactor)
    assert list(pool.group_stats.sizes) == [10] and pool.group_stats.fallbacks == 0
    seqs = [r.record.seq for r in results]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10  # unique, in queue order
    assert all(visible(store, f"k{i}") for i in range(10))


def test_a_failing_write_rolls_back_only_itself(
    store: SyncMetaStore, pool_and_reactor: tuple[DbPool, FakeReactor]
) -> None:
    pool, reactor = pool_and_reactor
    meta = MetaStore(store, pool)
    kept = store.put_object(record("kept")).record
    release = hold_writer(pool)
    ds: list[Deferred[Any]] = [
        meta.put_object(record("a")),
        meta.put_object(record("kept"), WritePrecondition(if_absent=True)),
        meta.put_object(record("b")),
        meta.put_object(ObjectRecord("nobucket", "k", "null", "x", 1, "e", 2.0)),
        meta.update_object(kept, expected_seq=kept.seq + 100),
        meta.delete_object_version(BUCKET, "missing", "null"),  # rolls back, returns
        meta.put_object(record("c")),
    ]
    release.set()
    results = outcomes(ds, reactor)
    assert list(pool.group_stats.sizes) == [7] and pool.group_stats.fallbacks == 0
    assert isinstance(results[1], Failure) and results[1].check(PreconditionNotMet)
    assert isinstance(results[3], Failure) and results[3].check(RecordNotFound)
    assert isinstance(results[4], Failure) and results[4].check(RowChanged)
    assert results[5].removed is None
    assert all(visible(store, k) for k in ("a", "b", "c"))
    stored = store.get_object(BUCKET, "kept")
    assert stored is not None and stored.seq == kept.seq  # neither write changed it
    seqs = [results[i].record.seq for i in (0, 2, 6)]
    assert len(set(seqs)) == 3 and store.max_seq() == max(seqs)


def test_replicated_applies_and_deletes_commit_as_one_group(
    store: SyncMetaStore, pool_and_reactor: tuple[DbPool, FakeReactor]
) -> None:
    """A peer's rows and deletions (the cluster's receive side) group like client writes:
    a row that loses to the local one and a deletion with nothing newer to record roll
    back only their own savepoints, the others commit together."""
    pool, reactor = pool_and_reactor
    meta = MetaStore(store, pool)
    newer = store.put_object(record("newer", last_modified=50.0)).record
    store.put_object(record("doomed", last_modified=3.0))
    release = hold_writer(pool)
    ds: list[Deferred[Any]] = [
        meta.apply_replicated_object(record("r1", last_modified=5.0)),
        meta.apply_replicated_object(record("newer", last_modified=10.0)),  # loses
        meta.apply_replicated_delete(BUCKET, "doomed", "null", 4.0),
        meta.apply_replicated_object(ObjectRecord("nobucket", "k", "null", "x", 1, "e",
                                                  2.0)),
        meta.apply_replicated_object(record("r2", last_modified=6.0)),
    ]
    release.set()
    results = outcomes(ds, reactor)
    assert list(pool.group_stats.sizes) == [5] and pool.group_stats.fallbacks == 0
    assert results[0].applied and results[4].applied
    assert not results[1].applied
    assert results[2].recorded and results[2].removed is not None
    assert isinstance(results[3], Failure) and results[3].check(RecordNotFound)
    assert visible(store, "r1") and visible(store, "r2") and not visible(store, "doomed")
    kept = store.get_object(BUCKET, "newer")
    assert kept is not None and kept.seq == newer.seq and kept.last_modified == 50.0


def test_replicated_applies_that_recompute_the_latest_share_a_group_with_puts(
    store: SyncMetaStore, pool_and_reactor: tuple[DbPool, FakeReactor]
) -> None:
    """The rare branches of a peer's row inside a group, between client PUTs: a late copy
    of the latest stamped older than another version (stored not latest, the newest
    promoted under a fresh seq), an identical row and a deletion of the latest (the next
    version promoted). Each takes its seqs in turn in the group's one transaction; the
    no-op rolls back only its own savepoint."""
    pool, reactor = pool_and_reactor
    meta = MetaStore(store, pool)

    def version(version_id: str, last_modified: float, blob: str) -> ObjectRecord:
        return ObjectRecord(BUCKET, "multi", version_id, blob, 3, "e", last_modified)

    # Rebuilt as a lagging node once left it: the latest stamped older than another.
    store.insert_recovered([
        replace(version("v2", 20.0, "b2"), is_latest=False),
        replace(version("v1", 10.0, "b1"), is_latest=True),
        replace(record("gone", last_modified=3.0), is_latest=True),
        ObjectRecord(BUCKET, "gone", "older", "b-older", 3, "e", 2.0, is_latest=False)])
    copy = store.put_object(record("copy", last_modified=7.0)).record
    before = store.max_seq()
    release = hold_writer(pool)
    ds: list[Deferred[Any]] = [
        meta.put_object(record("a")),
        meta.apply_replicated_object(version("v1", 15.0, "b1-new")),
        meta.apply_replicated_object(copy),  # identical: nothing written
        meta.apply_replicated_delete(BUCKET, "gone", "null", 4.0),
        meta.put_object(record("b")),
    ]
    release.set()
    results = outcomes(ds, reactor)
    assert list(pool.group_stats.sizes) == [5] and pool.group_stats.fallbacks == 0
    applied, identical, deleted = results[1], results[2], results[3]
    assert applied.applied and applied.record is not None and not applied.record.is_latest
    assert applied.orphaned_blob_ids == ("b1",)
    assert not identical.applied and identical.record == copy
    assert deleted.recorded and deleted.new_latest is not None
    assert deleted.new_latest.version_id == "older"
    latest = store.get_object(BUCKET, "multi")
    assert latest is not None and latest.version_id == "v2" and latest.seq > before
    assert store.get_object(BUCKET, "gone") == deleted.new_latest
    assert visible(store, "a") and visible(store, "b")
    # a, the apply and its promotion, the tombstone and its promotion, b: one seq each
    seqs = [results[0].record.seq, applied.record.seq, latest.seq,
            deleted.new_latest.seq, results[4].record.seq]
    assert len(set(seqs)) == 5 and store.max_seq() == before + 6


def test_a_groups_outcomes_reach_the_reactor_in_one_call(
    store: SyncMetaStore, pool_and_reactor: tuple[DbPool, FakeReactor]
) -> None:
    pool, reactor = pool_and_reactor
    meta = MetaStore(store, pool)
    release = hold_writer(pool)
    ds = [meta.put_object(record(f"k{i}")) for i in range(5)]
    ds.append(meta.put_object(record("k0"), WritePrecondition(if_absent=True)))
    calls: list[Any] = []
    queue_call = reactor.callFromThread

    def counted(fn: Callable[..., Any], *args: Any) -> None:
        calls.append(fn)
        queue_call(fn, *args)

    reactor.callFromThread = counted  # type: ignore[method-assign]
    release.set()
    results = outcomes(ds, reactor)
    assert list(pool.group_stats.sizes) == [6]
    assert len(calls) == 2  # the held write's outcome, then the whole group's
    assert [r.record.key for r in results[:5]] == [f"k{i}" for i in range(5)]
    assert isinstance(results[5], Failure) and results[5].check(PreconditionNotMet)


def test_results_are_delivered_after_the_commit(
    store: SyncMetaStore, pool_and_reactor: tuple[DbPool, FakeReactor]
) -> None:
    pool, reactor = pool_and_reactor
    bumps: list[bool] = []
    # The object-cache bump comes after the COMMIT (and once per group).
    store.objects_changed = lambda: bumps.append(visible(store, "k0"))
    meta = MetaStore(store, pool)
    release = hold_writer(pool)
    seen: list[bool] = []
    ds = [meta.put_object(record(f"k{i}")) for i in range(3)]
    for i, d in enumerate(ds):
        d.addCallback(lambda result, i=i: seen.append(visible(store, f"k{i}")) or result)
    release.set()
    outcomes(ds, reactor)
    assert list(pool.group_stats.sizes) == [3]
    assert seen == [True, True, True]
    assert bumps == [True]


def test_ungrouped_writes_run_alone_in_queue_order(
    store: SyncMetaStore, pool_and_reactor: tuple[DbPool, FakeReactor]
) -> None:
    pool, reactor = pool_and_reactor
    meta = MetaStore(store, pool)
    release = hold_writer(pool)
    ds: list[Deferred[Any]] = [
        meta.put_object(record("a")),
        meta.put_object(record("b")),
        meta.put_setting("s", "v"),  # not groupable: ends the group, runs alone
        meta.put_object(record("c")),
        meta.put_object(record("d")),
    ]
    release.set()
    outcomes(ds, reactor)
    assert list(pool.group_stats.sizes) == [2, 2]
    assert store.get_setting("s") == "v"


def test_group_commit_off_runs_every_write_alone(store: SyncMetaStore) -> None:
    reactor = FakeReactor()
    pool = DbPool(reactor, write_threads=1, read_threads=1,  # type: ignore[arg-type]
                  group_commit=False)
    pool.start()
    try:
        meta = MetaStore(store, pool)
        release = hold_writer(pool)
        ds = [meta.put_object(record(f"k{i}")) for i in range(4)]
        release.set()
        outcomes(ds, reactor)
        assert pool.group_stats.groups == 0
        assert all(visible(store, f"k{i}") for i in range(4))
    finally:
        pool._stop_pools()


@pytest.mark.postgres
def test_several_writer_threads_group_on_postgres(
    postgres_database: Any, tmp_path: Any, request: pytest.FixtureRequest,  # noqa: F811
) -> None:
    from tests.unit.meta_fixtures import make_engine

    engine = make_engine("postgres", tmp_path, request)
    pg = SyncMetaStore(engine)
    pg.migrate()
    pg.create_bucket(BucketRecord(BUCKET, "u", "us-east-1", 1.0))
    reactor = FakeReactor()
    pool = DbPool(reactor, write_threads=4, read_threads=1)  # type: ignore[arg-type]
    pool.start()
    try:
        meta = MetaStore(pg, pool)
        ds = [meta.put_object(record(f"k{i % 20}", 2.0 + i)) for i in range(120)]
        results = outcomes(ds, reactor)
        assert not [r for r in results if isinstance(r, Failure)]
        seqs = [r.record.seq for r in results]
        assert len(set(seqs)) == 120
        assert all(visible(pg, f"k{i}") for i in range(20))
        assert pool.group_stats.fallbacks == 0  # object writes take seq first: no deadlock
    finally:
        pool._stop_pools()
        pg.close()


# -- run_group itself ----------------------------------------------------------------


def put_row(key: str) -> Callable[[SyncMetaStore], Any]:
    return lambda store: store.put_object(record(key))


def run(store: SyncMetaStore, jobs: list[Callable[[SyncMetaStore], Any]],
        commit: Callable[[Connection], None] | None = None,
        stats: GroupStats | None = None) -> list[Outcome[Any]]:
    policy = RetryPolicy(first_delay_seconds=0.0)

    def call(job: Callable[[SyncMetaStore], Any]) -> Any:
        return call_with_retries(policy, lambda: job(store), lambda _: None)

    extra: dict[str, Any] = {} if commit is None else {"commit": commit}
    return run_group(store.engine, jobs, lambda: None, call, stats=stats, limits=UNHURRIED,
                     **extra)


def test_one_transaction_until_the_commit(store: SyncMetaStore) -> None:
    seen: list[bool] = []

    def second(s: SyncMetaStore) -> Any:
        seen.append(visible(s, "first"))  # another connection: not committed yet
        return s.put_object(record("second"))

    commits: list[bool] = []

    def commit(conn: Connection) -> None:
        commits.append(visible(store, "first"))
        conn.commit()

    results = run(store, [put_row("first"), second], commit)
    assert [o.ok for o in results] == [True, True]
    assert seen == [False] and commits == [False]
    assert visible(store, "first") and visible(store, "second")


def test_a_failed_commit_runs_every_write_alone(store: SyncMetaStore) -> None:
    calls: list[str] = []

    def counted(key: str) -> Callable[[SyncMetaStore], Any]:
        def job(s: SyncMetaStore) -> Any:
            calls.append(key)
            return s.put_object(record(key))
        return job

    def failing(conn: Connection) -> None:
        raise sa_exc.OperationalError("COMMIT", {}, sqlite3.OperationalError("disk I/O error"))

    stats = GroupStats()
    results = run(store, [counted("a"), counted("b")], failing, stats)
    assert calls == ["a", "b", "a", "b"]  # in the group, then each alone
    assert stats.fallbacks == 1 and stats.groups == 0
    assert [o.ok for o in results] == [True, True]
    # The answers are the alone runs': committed, with their own seqs.
    assert [store.get_object(BUCKET, k).seq for k in "ab"] == [  # type: ignore[union-attr]
        o.value.record.seq for o in results]


def test_a_failed_commit_fails_every_write_that_fails_alone(store: SyncMetaStore) -> None:
    def never(conn: Connection) -> None:
        raise sa_exc.OperationalError("COMMIT", {}, sqlite3.OperationalError("disk I/O error"))

    def fails_alone(key: str) -> Callable[[SyncMetaStore], Any]:
        def job(s: SyncMetaStore) -> Any:
            s.put_object(record(key))
            if write_group.current() is None:
                raise RuntimeError("no good alone")
            return "grouped"
        return job

    results = run(store, [fails_alone("a"), fails_alone("b")], never)
    assert [o.ok for o in results] == [False, False]
    assert all(isinstance(o.value, RuntimeError) for o in results)


TOUCH_SETTING = sa.text("UPDATE settings SET value = 'y' WHERE key = 'x'")


def test_a_driver_error_in_the_group_reruns_its_writes_alone(store: SyncMetaStore) -> None:
    """A transient error (SQLITE_BUSY, a deadlock) is not retried inside the group: the
    group rolls back and each write runs alone, where its retries apply."""
    failures = [sa_exc.OperationalError("UPDATE", {},
                                        sqlite3.OperationalError("database is locked"))]

    def flaky(s: SyncMetaStore) -> Any:
        with driver_transaction(s.engine) as tx:
            tx.execute(TOUCH_SETTING, {})
            if failures:
                raise failures.pop()
        return "flaky done"

    stats = GroupStats()
    results = run(store, [put_row("a"), flaky, put_row("b")], stats=stats)
    assert stats.fallbacks == 1
    assert [o.ok for o in results] == [True, True, True]
    assert results[1].value == "flaky done"
    assert visible(store, "a") and visible(store, "b")


def test_core_and_driver_writes_share_the_group_connection(store: SyncMetaStore) -> None:
    def core(s: SyncMetaStore) -> Any:
        with write_transaction(s.engine) as conn:
            group = write_group.current(s.engine)
            assert group is not None and conn is group.conn
            conn.execute(sa.insert(schema.settings).values(
                key="core", value="1", updated_at=1.0))

    def failing_core(s: SyncMetaStore) -> Any:
        with write_transaction(s.engine) as conn:
            conn.execute(sa.insert(schema.settings).values(
                key="gone", value="1", updated_at=1.0))
            raise RowChanged("x")

    stats = GroupStats()
    results = run(store, [put_row("a"), core, failing_core, put_row("b")], stats=stats)
    assert stats.groups == 1
    assert [o.ok for o in results] == [True, True, False, True]
    assert store.get_setting("core") == "1" and store.get_setting("gone") is None
    assert visible(store, "a") and visible(store, "b")


def test_a_failing_bump_after_the_commit_never_reruns_the_writes(store: SyncMetaStore) -> None:
    calls: list[str] = []

    def bump() -> None:
        raise RuntimeError("counter file gone")

    store.objects_changed = bump

    def counted(key: str) -> Callable[[SyncMetaStore], Any]:
        def job(s: SyncMetaStore) -> Any:
            calls.append(key)
            return s.put_object(record(key))
        return job

    stats = GroupStats()
    results = run(store, [counted("a"), counted("b")], stats=stats)
    assert calls == ["a", "b"] and stats.groups == 1 and stats.fallbacks == 0
    assert all(not o.ok and isinstance(o.value, RuntimeError) for o in results)
    assert visible(store, "a") and visible(store, "b")
