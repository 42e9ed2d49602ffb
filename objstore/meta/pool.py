"""The DB thread pools: where every metadata query of the daemon runs.

`DbPool` owns two named thread pools (objstore/threads.py), a writer pool
("objstore-db-write": one thread for SQLite, which admits one writer at a time anyway; N for
PostgreSQL) and a reader pool ("objstore-db-read", N threads), and hands results back to the
reactor as Deferreds. `SyncDbPool` runs the same calls inline, for unit tests without a
reactor. Neither knows SQL: they run callables. The engine's connection pool must hold at
least as many connections as both pools have threads (`dialect.connection_count`).

Writes wait in `DbPool`'s own queue (first in, first out), and each writer thread takes
them from it. A write submitted with `run_grouped_write` may share its transaction with
the groupable writes queued behind it (group commit, meta/group_commit.py): its Deferred
fires once the group committed. `group_commit=False` runs every write alone.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from sqlalchemy.engine import Engine
from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.meta.dialect import thread_counts
from objstore.meta.group_commit import GroupLimits, GroupStats, Outcome, outcome_of, run_group
from objstore.threads import NamedPool, WorkerThreads, fire_result

_P = ParamSpec("_P")
_R = TypeVar("_R")
_log = Logger()

WRITE_POOL_NAME = "objstore-db-write"
READ_POOL_NAME = "objstore-db-read"
CLOSE_POOL_NAME = "objstore-db-close"


class DbRunner(Protocol):
    """What `MetaStore` needs from a pool: run a callable as a read or as a write."""

    def run_read(
        self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> Deferred[_R]: ...

    def run_write(
        self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> Deferred[_R]: ...

    def run_grouped_write(self, engine: Engine, fn: Callable[[], _R]) -> Deferred[_R]:
        """Run `fn` as a write that may share one transaction on `engine` with other
        queued grouped writes (meta/group_commit.py)."""
        ...

    def stats(self) -> dict[str, int]: ...


@dataclass(eq=False)
class _Write:
    """A write waiting in the queue: `engine` set when it may join a group."""

    fn: Callable[[], Any]
    engine: Engine | None
    deferred: Deferred[Any] = field(default_factory=Deferred)


def _call(write: _Write) -> Any:
    return write.fn()


class DbPool(Service):
    """Writer and reader thread pools for the metadata database, as a Twisted service.

    `dispose` (normally `SyncMetaStore.close`) runs when both pools have stopped, on a
    thread made for it, so the engine's connections are closed off the reactor and after
    every query."""

    name = "objstore-db"

    def __init__(
        self,
        reactor: IReactorFromThreads,
        *,
        write_threads: int,
        read_threads: int,
        dispose: Callable[[], Any] | None = None,
        group_commit: bool = True,
        group_limits: GroupLimits = GroupLimits(),
    ) -> None:
        if write_threads < 1 or read_threads < 1:
            raise ValueError("a DB pool needs at least one writer and one reader thread")
        self._reactor = reactor
        self._dispose = dispose
        self._group_commit = group_commit
        self._group_limits = group_limits
        self.group_stats = GroupStats()
        self._writes: deque[_Write] = deque()
        self._writes_lock = threading.Lock()
        self._writer = NamedPool(reactor, WRITE_POOL_NAME, write_threads,
                                 min_threads=write_threads)
        self._reader = NamedPool(reactor, READ_POOL_NAME, read_threads,
                                 min_threads=read_threads)
        self._started = False

    @classmethod
    def for_backend(
        cls,
        reactor: IReactorFromThreads,
        backend: str,
        db_pool_size: int,
        dispose: Callable[[], Any] | None = None,
        group_commit: bool = True,
    ) -> DbPool:
        writers, readers = thread_counts(backend, db_pool_size)
        return cls(reactor, write_threads=writers, read_threads=readers, dispose=dispose,
                   group_commit=group_commit)

    @property
    def write_pool(self) -> WorkerThreads:
        return self._writer.threadpool

    @property
    def read_pool(self) -> WorkerThreads:
        return self._reader.threadpool

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._writer.start()
        self._reader.start()

    def stop(self) -> Deferred[None]:
        """Stop (join) both pools, then dispose the engine on a thread of its own. Callers
        drain their requests first: queries still running delay the join. The join comes
        first because a query that asked for a connection while `dispose` emptied the pool
        waited out the pool's timeout (30 s: the shutdown that hung, docs/STATUS.md)."""
        if not self._started:
            return defer.succeed(None)
        self._started = False
        self._stop_pools()
        if self._dispose is None:
            return defer.succeed(None)
        closer = NamedPool(self._reactor, CLOSE_POOL_NAME, 1)
        closer.start()
        d: Deferred[Any] = closer.run(self._dispose)

        def stop_closer(result: object) -> object:
            closer.stop()
            return result

        d.addBoth(stop_closer)
        return d.addCallback(lambda _: None)

    def _stop_pools(self) -> None:
        self._writer.stop()
        self._reader.stop()

    def startService(self) -> None:
        super().startService()
        self.start()

    def stopService(self) -> Deferred[None]:
        super().stopService()
        return self.stop()

    def run_read(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        return self._reader.run(fn, *args, **kwargs)

    def run_write(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        return self._submit(_Write(functools.partial(fn, *args, **kwargs), None))

    def run_grouped_write(self, engine: Engine, fn: Callable[[], _R]) -> Deferred[_R]:
        return self._submit(_Write(fn, engine if self._group_commit else None))

    def _submit(self, write: _Write) -> Deferred[Any]:
        with self._writes_lock:
            self._writes.append(write)
        # One call per write; a call that finds the queue emptied (its write went into
        # an earlier call's group) returns at once.
        self._writer.threadpool.callInThread(self._run_writes)
        return write.deferred

    def _take(self, engine: Engine | None) -> _Write | None:
        """The next queued write (writer thread); with `engine`, only a write that may
        join a group on it."""
        with self._writes_lock:
            if not self._writes:
                return None
            if engine is not None and self._writes[0].engine is not engine:
                return None
            return self._writes.popleft()

    def _run_writes(self) -> None:
        """Writer thread: run the next queued write, alone, or with the groupable writes
        queued behind it in one transaction (meta/group_commit.py)."""
        first = self._take(None)
        if first is None:
            return
        engine = first.engine
        second = None if engine is None else self._take(engine)
        if engine is None or second is None:
            outcomes = [outcome_of(first, _call)]
        else:
            outcomes = run_group(engine, [first, second], lambda: self._take(engine), _call,
                                 limits=self._group_limits, stats=self.group_stats)
        # A group's outcomes reach the reactor in ONE call: one wake-up, not one each.
        self._reactor.callFromThread(_fire_outcomes, outcomes)

    def stats(self) -> dict[str, int]:
        """Thread counts, busy threads and queued calls of each pool, for metrics."""
        return {f"{side}_{key}": value
                for side, pool in (("write", self._writer), ("read", self._reader))
                for key, value in pool.stats().items()}


def _fire_outcomes(outcomes: list[Outcome[_Write]]) -> None:
    """(reactor) Fire each write's Deferred with its outcome, in order; one that cannot be
    fired (never expected: a Deferred keeps its callbacks' errors) is logged, and the
    others still hear theirs."""
    for outcome in outcomes:
        try:
            fire_result(outcome.job.deferred, outcome.ok, outcome.value)
        except Exception:  # noqa: BLE001
            _log.failure("could not deliver the outcome of a database write")


class SyncDbPool:
    """`DbPool` for unit tests: runs every call inline on the calling thread and returns an
    already-fired Deferred (a failed one when the call raised)."""

    def __init__(self, dispose: Callable[[], Any] | None = None) -> None:
        self._dispose = dispose
        self.reads = 0
        self.writes = 0

    def start(self) -> None:
        pass

    def stop(self) -> Deferred[None]:
        if self._dispose is not None:
            try:
                self._dispose()
            except Exception:
                return defer.fail(Failure())
        return defer.succeed(None)

    def run_read(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        self.reads += 1
        return _call_now(fn, *args, **kwargs)

    def run_write(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        self.writes += 1
        return _call_now(fn, *args, **kwargs)

    def run_grouped_write(self, engine: Engine, fn: Callable[[], _R]) -> Deferred[_R]:
        self.writes += 1
        return _call_now(fn)

    def stats(self) -> dict[str, int]:
        keys = ("threads", "busy", "queued")
        return {f"{side}_{key}": 0 for side in ("write", "read") for key in keys}


def _call_now(fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
    try:
        result = fn(*args, **kwargs)
    except Exception:
        return defer.fail(Failure())
    return defer.succeed(result)
