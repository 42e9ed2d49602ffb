"""A target whose client library blocks: the library's calls run in a thread of the target's
own (a one-thread pool, so a slow or dead broker holds up nobody else and deliveries to one
target keep their order), never on the reactor thread.

A kind supplies `open_session()`, which connects and returns a `Session`; the target keeps
one session open between deliveries, drops it after any failure (closing it quietly) and
opens a new one on the next delivery: that is how every kind reconnects after a broker
restart. When a kept session fails with anything but a `DeliveryError` (the server's own
refusal), the delivery is tried once more on a fresh session at once: an idle connection the
server has closed meanwhile is no failed delivery. Any exception from the library becomes a
`DeliveryError` whose message has the kind's secrets scrubbed out. Every call is bounded
twice: by the library's own socket timeouts (the kind passes `timeout_seconds` to it) and
here, on the reactor side, in case the library waits past them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from twisted.internet import defer
from twisted.internet.threads import deferToThread, deferToThreadPool
from twisted.python.threadpool import ThreadPool

from objstore.notify.targets.base import DeliveryError, Event
from objstore.notify.targets.table import scrub

log = logging.getLogger(__name__)

T = TypeVar("T")


class Session(Protocol):
    """One open connection of a kind's client library (used only on the target's thread)."""

    def send(self, event: Event) -> None:
        """Deliver one event; return when the server accepted it, raise otherwise."""

    def close(self) -> None:
        """Close the connection (errors are ignored by the caller)."""


class BlockingTarget:
    """`Target` for a blocking client library (see the module docstring)."""

    def __init__(self, name: str, kind: str, open_session: Callable[[], Session], *,
                 timeout_seconds: float, secrets: Iterable[str] = (),
                 reactor: Any = None) -> None:
        self.name = name
        self.kind = kind
        self._open_session = open_session
        self._timeout_seconds = timeout_seconds
        self._secrets = tuple(s for s in secrets if s)
        self._reactor = reactor
        self._pool: ThreadPool | None = None
        self._session: Session | None = None
        self._shutdown_trigger: Any = None

    async def deliver(self, event: Event) -> None:
        await self._in_thread(self._send, event)

    async def close(self) -> None:
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        self._get_reactor().removeSystemEventTrigger(self._shutdown_trigger)
        try:
            await self._call_in(pool, self._drop_session)
        except Exception:  # closing is best effort
            pass
        # ThreadPool.stop joins its thread: wait for it in a throwaway thread, not here.
        await deferToThread(pool.stop)

    # On the target's thread.

    def _send(self, event: Event) -> None:
        if self._session is not None:
            # A kept session may have gone stale while idle (a server's idle timeout, missed
            # heartbeats, a restart since): if it fails, try once more on a fresh one before
            # calling the delivery failed. The first try may have reached the server: a
            # repeat is within at-least-once.
            try:
                self._session.send(event)
                return
            except DeliveryError as exc:  # the server's answer (a nack, a refusal): final
                self._drop_session()
                raise DeliveryError(scrub(str(exc), self._secrets)) from None
            except Exception:
                self._drop_session()
        try:
            self._session = self._open_session()
            self._session.send(event)
        except DeliveryError as exc:
            self._drop_session()
            raise DeliveryError(scrub(str(exc), self._secrets)) from None
        except Exception as exc:
            self._drop_session()
            raise DeliveryError(self.describe(exc)) from None

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except Exception:
                pass

    def describe(self, exc: BaseException) -> str:
        """One line for the events view: the exception's type and message, secrets out."""
        text = str(exc).strip() or "; ".join(str(arg) or repr(arg) for arg in exc.args).strip()
        text = text.splitlines()[0] if text else ""
        name = type(exc).__name__
        return scrub(f"{name}: {text}" if text else name, self._secrets)

    # On the reactor.

    def _get_reactor(self) -> Any:
        if self._reactor is None:
            from twisted.internet import reactor
            self._reactor = reactor
        return self._reactor

    def _get_pool(self) -> ThreadPool:
        if self._pool is None:
            pool = ThreadPool(minthreads=1, maxthreads=1, name=f"notify-{self.kind}-{self.name}")
            pool.start()
            # A target nobody closed must not keep the process alive at exit.
            self._shutdown_trigger = self._get_reactor().addSystemEventTrigger(
                "during", "shutdown", pool.stop)
            self._pool = pool
        return self._pool

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._call_in(self._get_pool(), fn, *args)

    async def _call_in(self, pool: ThreadPool, fn: Callable[..., T], *args: Any) -> T:
        reactor = self._get_reactor()
        d: defer.Deferred[T] = deferToThreadPool(reactor, pool, fn, *args)
        # The library's own timeouts normally fire first; this one catches a library that
        # waits past them. Its thread may still be busy: the next delivery queues behind it.
        guard = self._timeout_seconds * 3 + 1  # connect, and send on a kept and a fresh session
        d.addTimeout(guard, reactor)
        try:
            return await d
        except defer.TimeoutError:
            raise DeliveryError(f"no answer within {guard:g} seconds") from None


__all__ = ["BlockingTarget", "Session"]
