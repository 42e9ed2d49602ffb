"""DB thread pools and the Deferred facade, without a reactor.

`SyncDbPool` runs calls inline, so `MetaStore` is tested with already-fired Deferreds. The
real `DbPool` is started and its thread pools are driven directly with `callInThread`;
a stand-in for `callFromThread` lets `stop()` run without a
reactor.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import exc as sa_exc
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from objstore.errors import ServerCondition
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import READ_POOL_NAME, WRITE_POOL_NAME, DbPool, SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.retry import RetryPolicy, call_with_retries, is_transient
from objstore.meta.store import RecordNotFound, SyncMetaStore

T = TypeVar("T")
WAIT_SECONDS = 10.0


def result_of(d: Deferred[T]) -> T:
    """The result of an already-fired Deferred (re-raising its failure)."""
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]  # type: ignore[no-any-return]


class FakeReactor:
    """Just enough of IReactorFromThreads: calls from DB threads are queued and run by the
    test thread when it calls `run_pending`."""

    def __init__(self) -> None:
        self._pending: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._lock = threading.Lock()
        self.arrived = threading.Event()

    def callFromThread(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._pending.append((fn, args))
        self.arrived.set()

    def run_pending(self) -> None:
        assert self.arrived.wait(WAIT_SECONDS)
        with self._lock:
            pending, self._pending = self._pending, []
            self.arrived.clear()
        for fn, args in pending:
            fn(*args)


def locked_error() -> sa_exc.OperationalError:
    return sa_exc.OperationalError("BEGIN", {}, sqlite3.OperationalError("database is locked"))


# -- SyncDbPool -----------------------------------------------------------------------


def test_sync_pool_runs_inline() -> None:
    def add(a: int, b: int = 0) -> int:
        return a + b

    pool = SyncDbPool()
    pool.start()
    assert result_of(pool.run_read(add, 1, b=2)) == 3
    assert result_of(pool.run_write(str.upper, "x")) == "X"
    failed = pool.run_write(lambda: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        result_of(failed)
    assert (pool.reads, pool.writes) == (1, 2)
    assert set(pool.stats()) == {
        "write_threads",
        "write_busy",
        "write_queued",
        "read_threads",
        "read_busy",
        "read_queued",
    }


def test_sync_pool_stop_disposes() -> None:
    disposed: list[bool] = []
    assert result_of(SyncDbPool(dispose=lambda: disposed.append(True)).stop()) is None
    assert disposed == [True]


# -- retries --------------------------------------------------------------------------


def test_is_transient() -> None:
    assert is_transient(locked_error())
    busy = sqlite3.OperationalError("database is busy")
    assert is_transient(sa_exc.OperationalError("x", {}, busy))
    dropped = sa_exc.OperationalError("x", {}, Exception("gone"), connection_invalidated=True)
    assert is_transient(dropped)

    class SerializationFailure(Exception):
        pgcode = "40001"

    assert is_transient(sa_exc.DBAPIError("x", {}, SerializationFailure()))
    unique = sqlite3.IntegrityError("UNIQUE constraint failed")
    assert not is_transient(sa_exc.IntegrityError("x", {}, unique))
    syntax = sqlite3.OperationalError("near 'x': syntax error")
    assert not is_transient(sa_exc.OperationalError("x", {}, syntax))
    assert not is_transient(RecordNotFound("bucket"))
    assert not is_transient(ValueError("x"))


def test_psycopg2_operational_errors_are_transient() -> None:
    import psycopg2

    dropped = psycopg2.OperationalError("server closed the connection unexpectedly")
    assert is_transient(sa_exc.OperationalError("SELECT 1", {}, dropped))


def test_call_with_retries_backs_off_then_succeeds() -> None:
    failures = [locked_error(), locked_error()]
    sleeps: list[float] = []

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "ok"

    assert call_with_retries(RetryPolicy(), flaky, sleeps.append) == "ok"
    assert sleeps == [0.05, 0.1]


def test_call_with_retries_is_bounded() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def always_locked() -> None:
        calls.append(1)
        raise locked_error()

    with pytest.raises(ServerCondition) as raised:  # answered 503 + Retry-After
        call_with_retries(RetryPolicy(attempts=3), always_locked, sleeps.append)
    assert isinstance(raised.value.__cause__, sa_exc.OperationalError)
    assert len(calls) == 3 and sleeps == [0.05, 0.1]


def test_call_with_retries_does_not_retry_other_errors() -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise sa_exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE"))

    with pytest.raises(sa_exc.IntegrityError):
        call_with_retries(RetryPolicy(), broken, lambda _: None)
    assert len(calls) == 1


# -- MetaStore over SyncDbPool --------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SyncMetaStore]:
    store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 3))
    store.migrate()
    try:
        yield store
    finally:
        store.close()


def test_metastore_routes_reads_and_writes(sqlite_store: SyncMetaStore) -> None:
    pool = SyncDbPool()
    meta = MetaStore(sqlite_store, pool)
    assert result_of(meta.create_bucket(BucketRecord("b1", "u", "us-east-1", 1.0)))
    assert pool.writes == 1 and pool.reads == 0
    put = result_of(meta.put_object(ObjectRecord("b1", "k", "null", "blob", 3, "e", 2.0)))
    assert put.record.seq == 1
    record = result_of(meta.get_object("b1", "k"))
    assert record == put.record
    assert [r.key for r in result_of(meta.list_latest("b1"))] == ["k"]
    assert result_of(meta.max_seq()) == 1
    assert (pool.writes, pool.reads) == (2, 3)
    with pytest.raises(RecordNotFound):
        result_of(meta.put_object(ObjectRecord("nope", "k", "null", "blob", 3, "e", 2.0)))


def test_metastore_retries_in_the_worker(sqlite_store: SyncMetaStore,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    meta = MetaStore(sqlite_store, SyncDbPool(), sleep=sleeps.append)
    result_of(meta.put_setting("k", "v"))
    engine = sqlite_store.engine
    real = engine.connect
    failures = [locked_error()]

    def flaky_connect() -> Any:
        if failures:
            raise failures.pop()
        return real()

    monkeypatch.setattr(engine, "connect", flaky_connect)
    assert result_of(meta.get_setting("k")) == "v"
    assert sleeps == [0.05] and not failures


def test_metastore_passes_keyword_arguments_of_any_name(sqlite_store: SyncMetaStore) -> None:
    from objstore.meta.iam_records import TeamRecord

    meta = MetaStore(sqlite_store, SyncDbPool())
    assert result_of(meta.create_team(TeamRecord("t-1", "ops", 1.0)))
    changed = result_of(meta.update_team("t-1", name="dev", description=None, now=2.0))
    assert changed.status == "updated" and changed.record is not None
    assert changed.record.name == "dev"


def test_metastore_offers_every_query_of_the_sync_store() -> None:
    from objstore.meta.store import SyncMetaStore

    # The offline tools' own: the schema's lifecycle, and a generator (which cannot cross
    # threads: iter_objects is offered page by page, as objects_batch).
    offline = {"migrate", "is_initialised", "close", "iter_objects"}
    public = {n for n in vars(SyncMetaStore) if not n.startswith("_")} - offline
    offered = {n for n in dir(MetaStore) if not n.startswith("_")}
    assert public <= offered
    assert "objects_batch" in offered
    for name in public:  # the same query function on both sides
        assert getattr(MetaStore, name).__name__ == getattr(SyncMetaStore, name).__name__


# -- the real DbPool, driven without a reactor ----------------------------------------


def run_in(pool: Any, fn: Callable[[], T]) -> T:
    """Run `fn` on a pool's thread and wait for it with a threading.Event."""
    done = threading.Event()
    outcome: list[tuple[bool, Any]] = []

    def call() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException:
            outcome.append((False, Failure()))
        finally:
            done.set()

    pool.callInThread(call)
    assert done.wait(WAIT_SECONDS), "the pool did not run the call"
    success, result = outcome[0]
    if not success:
        result.raiseException()
    return result  # type: ignore[no-any-return]


def test_real_pools_start_run_and_join(sqlite_store: SyncMetaStore) -> None:
    reactor = FakeReactor()
    disposed = threading.Event()

    order: list[str] = []

    def dispose() -> None:
        order.append("disposed")
        sqlite_store.close()
        disposed.set()

    pool = DbPool.for_backend(reactor, "sqlite", 3, dispose=dispose)  # type: ignore[arg-type]
    pool.start()
    try:
        assert pool.stats()["write_threads"] == 1 and pool.stats()["read_threads"] == 3
        write_thread = run_in(pool.write_pool, lambda: threading.current_thread().name)
        read_thread = run_in(pool.read_pool, lambda: threading.current_thread().name)
        assert WRITE_POOL_NAME in write_thread and READ_POOL_NAME in read_thread

        bucket = BucketRecord("b1", "u", "us-east-1", 1.0)
        assert run_in(pool.write_pool, lambda: sqlite_store.create_bucket(bucket))
        stored = run_in(pool.read_pool, lambda: sqlite_store.get_bucket("b1"))
        assert stored is not None and stored.name == "b1"

        # One writer thread: a second write queues behind a busy one.
        release = threading.Event()
        started = threading.Event()

        def blocking() -> None:
            started.set()
            release.wait(WAIT_SECONDS)

        pool.write_pool.callInThread(blocking)
        assert started.wait(WAIT_SECONDS)
        pool.write_pool.callInThread(lambda: None)
        stats = pool.stats()
        assert (stats["write_busy"], stats["write_queued"]) == (1, 1)
        release.set()
        assert run_in(pool.write_pool, lambda: "drained") == "drained"

        # Through deferToThreadPool: the result comes back via callFromThread.
        d = pool.run_read(sqlite_store.list_buckets)
        reactor.run_pending()
        assert [b.name for b in result_of(d)] == ["b1"]

        # A read still running when the pool stops finishes before the engine is
        # disposed (a read that met `dispose` waited out the pool timeout: 30 s).
        reading = threading.Event()

        def late_read() -> None:
            reading.set()
            sqlite_store.list_buckets()
            order.append("read")

        pool.read_pool.callInThread(late_read)
        assert reading.wait(WAIT_SECONDS)
    finally:
        stopped = pool.stop()  # joins both pools, then disposes on a thread of its own
    assert pool.write_pool.joined and pool.read_pool.joined
    assert disposed.wait(WAIT_SECONDS)
    reactor.run_pending()  # delivers the dispose result
    assert result_of(stopped) is None
    assert order == ["read", "disposed"]
    assert pool.write_pool.joined and pool.read_pool.joined
    assert all(not t.is_alive() for t in pool.write_pool.threads + pool.read_pool.threads)


def test_dbpool_sizes_per_backend() -> None:
    reactor = FakeReactor()
    pg = DbPool.for_backend(reactor, "postgres", 4)  # type: ignore[arg-type]
    assert (pg.write_pool.max, pg.read_pool.max) == (4, 4)
    assert result_of(pg.stop()) is None  # never started: nothing to do
    with pytest.raises(ValueError):
        DbPool(reactor, write_threads=0, read_threads=1)  # type: ignore[arg-type]
