"""The named thread pools (objstore/threads.py) with real threads and a stand-in for the
reactor's `callFromThread`: order, threads on demand up to the maximum, results and
failures handed back, stop semantics and the metrics' counts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.logger import LogEvent, globalLogPublisher
from twisted.python.failure import Failure

from objstore.threads import NamedPool, WorkerThreads

WAIT_SECONDS = 10.0


class FromThreads:
    """Just enough of IReactorFromThreads: calls from pool threads run when the test
    thread calls `run_pending`."""

    def __init__(self) -> None:
        self._pending: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)

    def callFromThread(self, fn: Callable[..., Any], *args: Any) -> None:  # noqa: N802
        with self._lock:
            self._pending.append((fn, args))
            self._arrived.notify_all()

    def run_pending(self, count: int = 1) -> None:
        """Wait until at least `count` calls arrived, then run them all."""
        with self._lock:
            assert self._arrived.wait_for(lambda: len(self._pending) >= count, WAIT_SECONDS)
            pending, self._pending = self._pending, []
        for fn, args in pending:
            fn(*args)


def outcome(d: Deferred[Any]) -> Any:
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    return box[0]


def started(pool: WorkerThreads) -> WorkerThreads:
    pool.start()
    return pool


def test_results_and_failures_come_back_through_the_reactor() -> None:
    reactor = FromThreads()
    pool = NamedPool(reactor, "objstore-test", 2)  # type: ignore[arg-type]
    pool.start()
    try:
        names = pool.run(lambda: threading.current_thread().name)
        failed = pool.run(lambda: 1 // 0)
        assert not names.called  # fired on the reactor's thread only
        reactor.run_pending(2)
        assert outcome(names).startswith("PoolThread-objstore-test-")
        failure = outcome(failed)
        assert isinstance(failure, Failure) and failure.check(ZeroDivisionError)
        added = pool.run(lambda a, b=0: a + b, 1, b=2)
        reactor.run_pending()
        assert outcome(added) == 3
    finally:
        pool.stop()
    assert not any(thread.is_alive() for thread in pool.threadpool.threads)


def test_calls_run_in_order_on_one_thread() -> None:
    pool = started(WorkerThreads("objstore-one", 1))
    seen: list[int] = []
    try:
        for n in range(200):
            pool.callInThread(seen.append, n)
    finally:
        pool.stop()  # runs what was queued, then joins
    assert seen == list(range(200))
    assert len(pool.threads) == 1


def test_threads_start_on_demand_up_to_the_maximum() -> None:
    pool = started(WorkerThreads("objstore-grow", 3))
    assert pool.threads == []  # no minimum: no thread until a call
    release = threading.Event()
    running = threading.Semaphore(0)

    def block() -> None:
        running.release()
        release.wait(WAIT_SECONDS)

    try:
        for _ in range(4):
            pool.callInThread(block)
        for _ in range(3):
            assert running.acquire(timeout=WAIT_SECONDS)
        assert len(pool.threads) == 3
        assert pool.stats() == {"threads": 3, "busy": 3, "queued": 1}
        release.set()
        assert running.acquire(timeout=WAIT_SECONDS)  # the fourth, on a freed thread
    finally:
        release.set()
        pool.stop()
    assert len(pool.threads) == 3
    assert pool.stats() == {"threads": 3, "busy": 0, "queued": 0}


def test_an_idle_thread_takes_the_next_call() -> None:
    pool = started(WorkerThreads("objstore-reuse", 4))
    done = threading.Semaphore(0)
    try:
        for _ in range(50):  # one after the other: the one thread is idle each time
            pool.callInThread(done.release)
            assert done.acquire(timeout=WAIT_SECONDS)
    finally:
        pool.stop()
    assert len(pool.threads) == 1


def test_minimum_threads_start_with_the_pool_and_calls_wait_for_start() -> None:
    pool = WorkerThreads("objstore-min", 4, minthreads=2)
    seen: list[str] = []
    pool.callInThread(seen.append, "early")  # queued before start: runs after it
    assert pool.threads == [] and pool.stats()["queued"] == 1
    pool.start()
    pool.stop()
    assert seen == ["early"]
    assert len(pool.threads) == 2


def test_stop_runs_queued_calls_and_drops_later_ones() -> None:
    pool = started(WorkerThreads("objstore-stop", 1))
    release = threading.Event()
    seen: list[str] = []
    pool.callInThread(release.wait, WAIT_SECONDS)
    pool.callInThread(seen.append, "queued")
    stopper = threading.Thread(target=pool.stop)
    stopper.start()
    release.set()
    stopper.join(WAIT_SECONDS)
    assert not stopper.is_alive()
    assert seen == ["queued"] and pool.joined
    pool.callInThread(seen.append, "late")  # dropped, as Twisted's pool drops it
    assert pool.stats()["queued"] == 0 and seen == ["queued"]
    assert not any(thread.is_alive() for thread in pool.threads)
    pool.stop()  # a second stop does nothing


def test_an_error_of_a_call_without_a_deferred_is_logged() -> None:
    events: list[LogEvent] = []
    globalLogPublisher.addObserver(events.append)
    pool = started(WorkerThreads("objstore-log", 1))
    try:
        pool.callInThread(lambda: 1 // 0)
        pool.callInThread(lambda: None)  # still runs: the thread lives on
    finally:
        pool.stop()
        globalLogPublisher.removeObserver(events.append)
    failures = [e["log_failure"] for e in events if "log_failure" in e]
    assert len(failures) == 1 and failures[0].check(ZeroDivisionError)
    assert len(pool.threads) == 1 and pool.threads[0].name == "PoolThread-objstore-log-1"


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        WorkerThreads("x", 0)
    with pytest.raises(ValueError):
        WorkerThreads("x", 2, minthreads=3)
