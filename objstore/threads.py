"""Named thread pools for blocking work (file IO, CPU-heavy hashing), kept off the reactor.

`NamedPool` wraps a Twisted ThreadPool as a service with a Deferred-returning `run`;
`InlinePool` runs the function at once, for unit tests without threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from twisted.application.service import Service
from twisted.internet import defer, threads
from twisted.internet.interfaces import IReactorFromThreads
from twisted.python.threadpool import ThreadPool

T = TypeVar("T")


class Runner(Protocol):
    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]: ...


class NamedPool(Service):
    """A named thread pool, started and stopped with the node (a Twisted service), whose
    `run` hands each result back to the reactor as a Deferred. The one thread-pool wrapper:
    the IO and hashing pools are NamedPools, and the DB pool (meta/pool.py) is a pair."""

    def __init__(self, reactor: IReactorFromThreads, name: str, size: int, *,
                 min_threads: int = 0) -> None:
        self._reactor = reactor
        self.name = name
        self._pool = ThreadPool(minthreads=min_threads, maxthreads=size, name=name)

    @property
    def threadpool(self) -> ThreadPool:
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
        return threads.deferToThreadPool(self._reactor, self._pool, fn, *args, **kwargs)

    def stats(self) -> dict[str, int]:
        """Threads the pool may run, threads at work and calls waiting, for metrics."""
        return {
            "threads": self._pool.max,
            "busy": len(self._pool.working),
            "queued": self._pool._team.statistics().backloggedWorkCount,
        }


class InlinePool:
    """Synchronous stand-in: runs the call immediately (unit tests)."""

    name = "inline"

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]:
        return defer.maybeDeferred(fn, *args, **kwargs)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
