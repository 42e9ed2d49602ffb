"""The webhook's HTTP/1.1 client: persistent connections to one origin on a plain Twisted
`Protocol`, one exchange at a time on each, at most `max_connections` of them.

`Http1Client.exchange(request)` writes the request (one bytes buffer,
`http1_answer.request`) on an idle connection, or a new one when none is idle and fewer
than `max_connections` are open (otherwise it waits for one), and returns the `Answer`
(`http1_answer.AnswerParser`). A connection goes back to the idle ones after an answer
that leaves it reusable; otherwise, and after any failure, it is closed. The server
closing an idle connection removes it. A request written on a reused connection that is
closed before any byte of an answer arrived (the server's idle timeout racing the write)
is written once more on a new connection: the caller would have retried it anyway
(at-least-once). Cancelling the Deferred of `exchange` (the caller's timeout) drops the
connection it was on, or stops the connect, or leaves the queue.

The endpoint (TCP, or TLS over TCP with the caller's certificate policy) is made once by
the caller. No timeout here: the caller bounds the whole exchange.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import connectProtocol
from twisted.internet.error import ConnectionClosed
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure

from objstore.notify.targets.http1_answer import Answer, AnswerError, AnswerParser


class ClosedBeforeAnswer(AnswerError):
    """The connection ended before any byte of an answer (a reused one may be retried)."""


class ClientClosed(Exception):
    """The client was closed while the exchange waited."""


class Http1Connection(Protocol):
    """One connection; `exchange` writes a request and fires with its Answer."""

    def __init__(self, keep: int, lost: Any) -> None:
        self._keep = keep
        self._lost = lost  # called with this connection once it is gone
        self._parser: AnswerParser | None = None
        self._waiting: Deferred[Answer] | None = None
        self._transport: Any = None  # zope interfaces are not mypy types
        self.open = False
        self.reused = False  # taken from the idle ones (it carried an exchange before)

    def connectionMade(self) -> None:  # noqa: N802 (Twisted's)
        self._transport = self.transport
        self.open = True

    def exchange(self, data: bytes) -> Deferred[Answer]:
        self._parser = AnswerParser(self._keep)
        waiting: Deferred[Answer] = Deferred(self._cancel)
        self._waiting = waiting
        self._transport.write(data)
        return waiting

    def _cancel(self, _: Deferred[Answer]) -> None:
        self._waiting = None
        self.abort()

    def abort(self) -> None:
        if self.open:
            self.open = False
            self._transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:  # noqa: N802
        if self._waiting is None or self._parser is None:  # unasked for: drop it
            self.abort()
            return
        try:
            answer = self._parser.feed(data)
        except AnswerError as problem:
            self._finish(Failure(problem))
            self.abort()
            return
        if answer is not None:
            if not answer.reusable:
                self.open = False
                self._transport.loseConnection()
            self._finish(answer)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        self.open = False
        if self._waiting is not None and self._parser is not None:
            if not self._parser.started:
                why = "" if reason.check(ConnectionClosed) else \
                    f" ({type(reason.value).__name__}: {reason.value})"
                self._finish(Failure(ClosedBeforeAnswer(
                    f"the connection was closed before an answer{why}")))
            else:
                try:
                    self._finish(self._parser.closed())
                except AnswerError as problem:
                    self._finish(Failure(problem))
        self._lost(self)

    def _finish(self, outcome: Answer | Failure) -> None:
        waiting, self._waiting, self._parser = self._waiting, None, None
        if waiting is None:
            return
        if isinstance(outcome, Answer):
            waiting.callback(outcome)
        else:
            waiting.errback(outcome)


class Http1Client:
    def __init__(self, endpoint: Any, keep: int, max_connections: int = 2) -> None:
        """`endpoint`: an IStreamClientEndpoint to the origin; `keep`: body bytes kept
        of an answer."""
        self._endpoint = endpoint
        self._keep = keep
        self._max = max(1, max_connections)
        self._idle: list[Http1Connection] = []
        self._members: set[Http1Connection] = set()  # connected, idle or busy
        self._connecting = 0
        self._waiters: list[Deferred[None]] = []
        self._closed = False

    @property
    def open_connections(self) -> int:
        return len(self._members)

    async def exchange(self, data: bytes) -> Answer:
        connection = await self._connection()
        try:
            try:
                answer = await connection.exchange(data)
            except ClosedBeforeAnswer:
                if not connection.reused:
                    raise
                self._drop(connection)
                connection = await self._connection(fresh=True)
                answer = await connection.exchange(data)
        except BaseException:
            self._drop(connection)
            raise
        if answer.reusable and connection.open and not self._closed:
            self._idle.append(connection)
            self._wake()
        else:
            self._drop(connection)
        return answer

    async def _connection(self, fresh: bool = False) -> Http1Connection:
        """An idle connection (`fresh`: never), a new one, or the next one let go."""
        while True:
            if self._closed:
                raise ClientClosed("the webhook target was closed")
            while self._idle and not fresh:
                connection = self._idle.pop()
                if connection.open:
                    connection.reused = True
                    return connection
                self._forget(connection)
            if len(self._members) + self._connecting < self._max or (
                    fresh and self._idle and self._evict()):
                return await self._connect()
            waiter: Deferred[None] = Deferred(self._waiters.remove)
            self._waiters.append(waiter)
            await waiter

    def _evict(self) -> bool:
        """Close an idle connection to make room for a fresh one (True): its room goes to
        the caller, not to a waiting exchange."""
        connection = self._idle.pop(0)
        self._members.discard(connection)
        connection.abort()
        return True

    async def _connect(self) -> Http1Connection:
        self._connecting += 1
        try:
            connection: Http1Connection = await connectProtocol(
                self._endpoint, Http1Connection(self._keep, self._forget))
        except BaseException:
            self._connecting -= 1
            self._wake()  # its room is free again
            raise
        self._connecting -= 1
        if self._closed:
            connection.abort()
            raise ClientClosed("the webhook target was closed")
        self._members.add(connection)
        return connection

    def _drop(self, connection: Http1Connection) -> None:
        connection.abort()
        self._forget(connection)

    def _forget(self, connection: Http1Connection) -> None:
        if connection in self._idle:
            self._idle.remove(connection)
        if connection in self._members:
            self._members.discard(connection)
            self._wake()

    def _wake(self) -> None:
        if self._waiters:
            self._waiters.pop(0).callback(None)

    def close(self) -> None:
        """Drop every connection; exchanges waiting for one fail."""
        self._closed = True
        for connection in list(self._members):
            self._drop(connection)
        while self._waiters:
            self._waiters.pop(0).callback(None)  # they see `_closed`


__all__ = ["ClientClosed", "ClosedBeforeAnswer", "Http1Client", "Http1Connection"]
