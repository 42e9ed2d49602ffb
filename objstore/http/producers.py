"""A push producer that streams object bytes into a response, chunk by chunk, from a chunk
source (a `ChunkStream` of blobs/reader.py, which reads each chunk on the IO pool).

The producer never touches a file: reading belongs to the blob reader (so a stage stacked
on it later changes nothing here), and the reactor never waits on the disk for a large
response. It keeps one read in flight ahead of the transport (the pool reads the next chunk
while the reactor sends the last one) and at most one chunk waiting while the transport is
paused. `done` fires once everything was written or the client went away; the source is
closed only when no read is in flight, since a pool thread may be using its blob.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from objstore.blobs.reader import READ_CHUNK_BYTES, Chunk

CHUNK_BYTES = READ_CHUNK_BYTES


class ChunkSource(Protocol):
    def next_chunk(self) -> defer.Deferred[Chunk | None]:
        """The next chunk, or None after the last; never called twice at once."""
        ...

    def close(self) -> None: ...


@implementer(IPushProducer)
class BlobProducer:
    def __init__(self, request: Any, source: ChunkSource) -> None:
        self._request = request
        self._source = source
        self._pending: Chunk | None = None  # read, not yet written (paused)
        self._reading = False
        self._advancing = False
        self._paused = False
        self._stopped = False
        self._eof = False
        self._error: Failure | None = None
        self.done: defer.Deferred[None] = defer.Deferred()

    def start(self) -> defer.Deferred[None]:
        self._request.registerProducer(self, True)
        self._advance()
        return self.done

    # -- IPushProducer -------------------------------------------------------------------
    def pauseProducing(self) -> None:  # noqa: N802 (Twisted's name)
        self._paused = True

    def resumeProducing(self) -> None:  # noqa: N802 (Twisted's name)
        self._paused = False
        self._advance()

    def stopProducing(self) -> None:  # noqa: N802 (Twisted's name)
        """The client went away. Unregister while the request still has its channel:
        once `done` fires the request finishes, and a producer still registered then is
        reported as a leak."""
        self._stopped = True
        self._unregister()
        self._advance()

    # -- the pump ------------------------------------------------------------------------
    def _advance(self) -> None:
        """Write what is ready and keep one read in flight, until paused, stopped or at the
        end. A source that answers at once (a test's inline pool) calls back into here:
        the flag turns that into the next turn of this loop instead of a deeper stack."""
        if self._advancing or self.done.called:
            return
        self._advancing = True
        try:
            while not (self._stopped or self._error is not None):
                if self._pending is not None:
                    if self._paused:
                        break
                    chunk, self._pending = self._pending, None
                    if type(chunk) is bytes:
                        self._request.write(chunk)
                    else:
                        for piece in chunk:
                            self._request.write(piece)
                    continue
                if self._reading or self._eof:
                    break
                self._reading = True
                self._source.next_chunk().addCallbacks(self._read, self._failed)
        finally:
            self._advancing = False
        if not self._reading and (self._stopped or self._error is not None
                                  or (self._eof and self._pending is None)):
            self._finish()

    def _read(self, chunk: Chunk | None) -> None:
        self._reading = False
        if chunk is None:
            self._eof = True
        else:
            self._pending = chunk
        self._advance()

    def _failed(self, failure: Failure) -> None:
        self._reading = False
        self._error = failure
        self._advance()

    def _finish(self) -> None:
        self._source.close()
        self._unregister()
        if self._error is not None and not self._stopped:
            # Headers are gone already: the only honest signal left is to cut the stream.
            self._request.channel.transport.abortConnection()
            self.done.errback(self._error)
        else:
            self.done.callback(None)

    def _unregister(self) -> None:
        if self._request.channel is not None and self._request.producer is self:
            self._request.unregisterProducer()
