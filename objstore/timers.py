"""Timers that cannot die: a `TimerService` whose tick catches and logs every exception.

An exception escaping a LoopingCall's function stops the loop for good, silently ending a
flush or a purge for the rest of the process's life. Ticks here may be coroutines; the next
tick is scheduled only after the previous one has finished, so ticks never overlap.
Stopping the service waits for a tick in progress.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from twisted.application.internet import TimerService
from twisted.internet import defer
from twisted.logger import Logger

from objstore.errors import condition_of

log = Logger()

Tick = Callable[[], Coroutine[Any, Any, object]]


class ReactorClock(Protocol):
    """The part of IReactorTime that timers use (the reactor, or task.Clock in tests)."""

    def seconds(self) -> float: ...

    def callLater(  # noqa: N802 (Twisted's name)
        self, delay: float, callable: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any: ...


def safe_timer(
    interval_seconds: float, tick: Tick, *, clock: ReactorClock, what: str
) -> TimerService:
    """A service running `tick` now and then every `interval_seconds` on `clock`."""

    def guarded() -> defer.Deferred[None]:
        try:
            running = defer.ensureDeferred(tick())
        except Exception:
            log.failure("{what} failed", what=what)
            return defer.succeed(None)
        return running.addCallbacks(lambda _: None, lambda f: _report(f, what))

    timer = _TimerService(interval_seconds, guarded)
    timer.clock = clock
    timer.setName(what)
    return timer


class _TimerService(TimerService):
    def stopService(self) -> defer.Deferred[None]:  # noqa: N802 (Twisted's name)
        if not self.running:  # never started (start-up failed): nothing to stop
            return defer.succeed(None)
        result: defer.Deferred[None] = super().stopService()
        return result


def _report(failure: Any, what: str) -> None:
    if condition_of(failure.value) is not None:  # a full disk, the database out of reach
        log.warn("{what} failed: {error}", what=what, error=failure.value)
        return
    log.failure("{what} failed", failure, what=what)
