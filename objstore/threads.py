"""Named thread pools for blocking work (file IO, CPU-heavy hashing), kept off the reactor.

`NamedPool` wraps a Twisted ThreadPool with start/stop and a Deferred-returning `run`;
`InlinePool` runs the function at once, for unit tests without threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from twisted.internet import defer, threads
from twisted.internet.interfaces import IReactorFromThreads
from twisted.python.threadpool import ThreadPool

T = TypeVar("T")


class Runner(Protocol):
    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]: ...


class NamedPool:
    def __init__(self, reactor: IReactorFromThreads, name: str, size: int) -> None:
        self._reactor = reactor
        self.name = name
        self._pool = ThreadPool(minthreads=0, maxthreads=size, name=name)

    def start(self) -> None:
        self._pool.start()

    def stop(self) -> None:
        self._pool.stop()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]:
        return threads.deferToThreadPool(self._reactor, self._pool, fn, *args, **kwargs)

    def stats(self) -> dict[str, int]:
        return {
            "workers": len(self._pool.working),
            "queued": self._pool._team.statistics().backloggedWorkCount,
            "max": self._pool.max,
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
