"""A push producer that streams object bytes into a response, chunk by chunk, from a chunk
source (a `ChunkStream` of blobs/reader.py, which reads each chunk on the IO pool).

The producer never touches a file: reading belongs to the blob reader (so a stage stacked
on it later changes nothing here), and the reactor never waits on the disk for a large
response. It keeps one read in flight ahead of the transport (the pool reads the next chunk
while the reactor sends the last one) and at most one chunk waiting while the transport is
paused. `done` fires once everything was written or the client went away; the source is
closed only when no read is in flight, since a pool thread may be using its blob.

`body_producer` picks the producer of a response: `SendfileProducer` (sendfile.py, the
kernel copies the blob files to the socket) when the stream is of plain files, the
connection plain TCP and the site allows it (`[server] sendfile`), else `BlobProducer`.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from objstore.blobs.reader import READ_CHUNK_BYTES, Chunk, ChunkStream
from objstore.http.sendfile import SendfileProducer, sendfile_transport

CHUNK_BYTES = READ_CHUNK_BYTES


class ChunkSource(Protocol):
    def next_chunk(self) -> defer.Deferred[Chunk | None]:
        """The next chunk, or None after the last; never called twice at once."""
        ...

    def close(self) -> None: ...


class ResponseProducer(Protocol):
    def start(self) -> defer.Deferred[None]:
        """Register with the request and send; fires when done (or the client left)."""
        ...


def body_producer(request: Any, stream: ChunkSource) -> ResponseProducer:
    """The producer that sends `stream` as `request`'s body (see the module docstring)."""
    site = getattr(getattr(request, "channel", None), "site", None)
    if isinstance(stream, ChunkStream) and getattr(site, "sendfile", False):
        transport = sendfile_transport(request)
        if transport is not None:
            return SendfileProducer(request, stream, transport)
    return BlobProducer(request, stream)


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
        self._closed = False
        self.done: defer.Deferred[None] = defer.Deferred(self._cancelled)

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
        if self.done.called:  # cancelled: the source goes once no read is in flight
            if not self._reading:
                self._close_source()
            return
        if self._advancing:
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

    def _cancelled(self, _done: defer.Deferred[None]) -> None:
        """The request's handler was cancelled: Klein does that when the connection is
        lost, and over TLS that may come without stopProducing (the TLS layer does not
        always pass it on). Stop, and close the source once no read is in flight."""
        self._stopped = True
        self._unregister()
        if not self._reading:
            self._close_source()

    def _close_source(self) -> None:
        if not self._closed:
            self._closed = True
            self._source.close()

    def _finish(self) -> None:
        self._close_source()
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
