"""`SliceProducer`: an HTTP client request body (`IBodyProducer`) of known length whose
bytes come from an awaitable `read(offset, size)`, one slice at a time, waiting while the
connection is paused.

The reader decides where the bytes come from and on which thread: the replication worker
reads a source object through the blob reader, the cluster fan-out reads a stored blob
file with `os.pread` on the IO pool. The reactor only hands slices to the transport, so a
large body never reads a file on the reactor thread (twisted's `FileBodyProducer` does).
A stopped producer (the request was cancelled) reads no further and writes nothing more;
`idle()` fires once no read is in flight, so the owner of the source (a file descriptor)
closes it only after its last read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConsumer
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

SLICE_BYTES = 1024 * 1024


@implementer(IBodyProducer)
class SliceProducer:
    """Streams `length` bytes read by `read(offset, size)` (awaitable), one slice at a
    time, waiting while the connection is paused."""

    def __init__(self, read: Callable[[int, int], Awaitable[bytes]], length: int,
                 slice_bytes: int = SLICE_BYTES) -> None:
        self.length = length
        self._read = read
        self._slice = slice_bytes
        self._paused: Deferred[None] | None = None
        self._stopped = False
        self._reading: Deferred[None] | None = None  # fires when the read in flight ends

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:  # noqa: N802
        return defer.ensureDeferred(self._produce(consumer))

    async def _produce(self, consumer: IConsumer) -> None:
        offset = 0
        while offset < self.length and not self._stopped:
            if self._paused is not None:
                await self._paused
                continue  # stopped while paused, or paused again
            self._reading = Deferred()
            try:
                data = await self._read(offset, min(self._slice, self.length - offset))
            except Exception:
                if self._stopped:
                    return  # the source may be closing: nobody wants the bytes
                raise
            finally:
                reading, self._reading = self._reading, None
                reading.callback(None)
            if self._stopped:
                return
            if not data:
                raise OSError("the source ended early")
            cast(Any, consumer).write(data)
            offset += len(data)

    def pauseProducing(self) -> None:  # noqa: N802
        if self._paused is None:
            self._paused = Deferred()

    def resumeProducing(self) -> None:  # noqa: N802
        paused, self._paused = self._paused, None
        if paused is not None:
            paused.callback(None)

    def stopProducing(self) -> None:  # noqa: N802
        self._stopped = True
        self.resumeProducing()

    def idle(self) -> Deferred[None]:
        """Fires once no read is in flight (at once when none is)."""
        if self._reading is None:
            return defer.succeed(None)
        done: Deferred[None] = Deferred()
        self._reading.addCallback(lambda _: done.callback(None))
        return done


__all__ = ["SLICE_BYTES", "SliceProducer"]
