"""Named thread pools for blocking work (file IO, CPU-heavy hashing, database calls), kept
off the reactor.

`WorkerThreads` is the pool itself: threads that take calls from one `queue.SimpleQueue`
(first in, first out), started on demand up to a maximum. It replaces Twisted's
`ThreadPool`, whose hand-off goes through a coordinator worker, a context copy and a
condition per call: 19-59 us of CPU per call against 6-24 us here (measured in session
17; a small PUT makes two or three hand-offs). It keeps that pool's behaviour where the
daemon relies on it: calls queued before `start` wait for it; `stop` lets the queued calls
run, then joins every thread; a call made after `stop` is dropped; an exception of a call
without a Deferred is logged; the threads are named `PoolThread-<name>-<n>` (the benchmark
groups threads by these names).

`NamedPool` wraps one as a service with a Deferred-returning `run`; `InlinePool` runs the
function at once, for unit tests without threads.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, Protocol, TypeVar

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

T = TypeVar("T")

# A queued call: (Deferred to fire or None, reactor to fire it on, function, args, kwargs).
_Call = tuple[Any, Any, Callable[..., Any], tuple[Any, ...], dict[str, Any]]
_STOP = None  # what `stop` queues once per thread: the thread ends when it takes it


class Runner(Protocol):
    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]: ...


def fire_result(d: defer.Deferred[Any], ok: bool, value: Any) -> None:
    """Fire `d` (on the reactor's thread) with a call's result, or with its failure when
    not `ok` (a Failure, or an exception, which `errback` wraps)."""
    if ok:
        d.callback(value)
    else:
        d.errback(value)


class WorkerThreads:
    """Up to `maxthreads` threads named `PoolThread-<name>-<n>` running queued calls in
    the order they were queued; `minthreads` of them start with the pool, the others when
    a call finds no idle thread to take it. Threads never end before `stop`.

    `_idle` counts threads that finished a call and that no call queued since has claimed:
    a call that finds it 0 starts a thread (below `max`). Once the pool runs `max`
    threads, calls queue without a claim and the count runs ahead of the truly idle
    threads, which no longer matters: the pool never shrinks, so it starts no thread
    again."""

    def __init__(self, name: str, maxthreads: int, minthreads: int = 0) -> None:
        if maxthreads < 1 or not 0 <= minthreads <= maxthreads:
            raise ValueError(f"thread pool {name!r}: bad sizes {minthreads}..{maxthreads}")
        self.name = name
        self.max = maxthreads
        self.min = minthreads
        self.threads: list[threading.Thread] = []
        self.started = False
        self.joined = False
        self._calls: SimpleQueue[_Call | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads done with their last call that no queued call claimed yet
        self._working = 0  # threads running a call now
        self._serial = itertools.count(1)

    def start(self) -> None:
        """Start `min` threads, and one per call queued before (up to `max`)."""
        with self._lock:
            if self.started or self.joined:
                return
            self.started = True
            wanted = min(self.max, max(self.min, self._calls.qsize()))
            for _ in range(wanted):
                self._start_thread()
            self._idle = max(0, wanted - self._calls.qsize())

    def callInThread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any  # noqa: N802
                     ) -> None:
        """Run `fn(*args, **kwargs)` on a pool thread; an exception it raises is logged.
        (Twisted's name, which the DB pool and its tests use.)"""
        self.submit(None, None, fn, args, kwargs)

    def submit(self, d: defer.Deferred[Any] | None, reactor: IReactorFromThreads | None,
               fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> None:
        """Queue a call; with `d`, its result or failure fires `d` on `reactor`'s thread.
        After `stop` the call is dropped (as Twisted's pool drops it)."""
        with self._lock:  # so that no call is queued behind `stop`'s ends
            if self.joined:
                return
            if self._idle:
                self._idle -= 1  # an idle thread will take it
            elif self.started and len(self.threads) < self.max:
                self._start_thread()
            self._calls.put((d, reactor, fn, args, kwargs))

    def _start_thread(self) -> None:
        """(Under `_lock`.)"""
        thread = threading.Thread(target=self._work,
                                  name=f"PoolThread-{self.name}-{next(self._serial)}")
        self.threads.append(thread)
        thread.start()

    def _work(self) -> None:
        take, lock = self._calls.get, self._lock
        while True:
            call = take()
            if call is _STOP:
                return
            d, reactor, fn, args, kwargs = call
            with lock:
                self._working += 1
            try:
                value = fn(*args, **kwargs)
                ok = True
            except BaseException:
                value, ok = Failure(), False
            with lock:
                self._working -= 1
                self._idle += 1
            if d is not None:
                reactor.callFromThread(fire_result, d, ok, value)
            elif not ok:
                log.failure("uncaught error in thread pool {name}", value, name=self.name)
            del call, d, fn, args, kwargs, value  # nothing of a call outlives it

    def stop(self) -> None:
        """Let the calls queued so far run, then end and join every thread. Calls made
        afterwards are dropped."""
        with self._lock:
            if self.joined:
                return
            self.joined = True
            self.started = False
            threads = list(self.threads)
            for _ in threads:
                self._calls.put(_STOP)
        for thread in threads:
            thread.join()

    def stats(self) -> dict[str, int]:
        """Threads the pool may run, threads at work and calls waiting, for metrics."""
        return {"threads": self.max, "busy": self._working, "queued": self._calls.qsize()}


class NamedPool(Service):
    """A named thread pool, started and stopped with the node (a Twisted service), whose
    `run` hands each result back to the reactor as a Deferred. The one thread-pool wrapper:
    the IO and hashing pools are NamedPools, and the DB pool (meta/pool.py) is a pair."""

    def __init__(self, reactor: IReactorFromThreads, name: str, size: int, *,
                 min_threads: int = 0) -> None:
        self._reactor = reactor
        self.name = name
        self._pool = WorkerThreads(name, size, min_threads)

    @property
    def threadpool(self) -> WorkerThreads:
        return self._pool

    def start(self) -> None:
        self._pool.start()

    def stop(self) -> None:
        self._pool.stop()

    def startService(self) -> None:  # noqa: N802
        super().startService()
        self.start()

    def stopService(self) -> None:  # noqa: N802
        super().stopService()
        self.stop()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]:
        d: defer.Deferred[T] = defer.Deferred()
        self._pool.submit(d, self._reactor, fn, args, kwargs)
        return d

    def stats(self) -> dict[str, int]:
        """Threads the pool may run, threads at work and calls waiting, for metrics."""
        return self._pool.stats()


class InlinePool:
    """Synchronous stand-in: runs the call immediately (unit tests)."""

    name = "inline"

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]:
        return defer.maybeDeferred(fn, *args, **kwargs)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
