"""Sending a plain object's bytes with `os.sendfile`: the kernel copies them from the blob
files' page cache to the socket, without a read into Python, a bytes object per chunk or
a pass through the transport's buffer.

Twisted has no sendfile (twisted#11395), so `SendfileProducer` works beside a plain TCP
transport (`sendfile_transport` says when one is there: never under TLS, where the bytes
must pass through the TLS engine). It relies on the transport's buffer attributes, which
are not public API (`dataBuffer`, `offset`, `_tempDataLen`, `producerPaused`), checked
once per connection; when any is missing the GET falls back to `BlobProducer`
(producers.py). Its rules:

* The response head goes through twisted.web as always (`request.write(b"")` builds it);
  no byte of the body is sent while anything the transport holds is unsent, so the stream
  stays in order.
* It sends while the socket takes bytes, at most `TURN_BYTES` per reactor turn (other
  connections get their turn). When the socket is full (EAGAIN), or the head is still
  queued, it sets `producerPaused` on the transport and asks it to watch for
  writability: once the socket drains, the transport asks its producer (the HTTP
  channel) to resume, which resumes this producer. No thread and no timer.
* It honours `pauseProducing` / `resumeProducing` from the channel, and `stopProducing`
  (the client went away: the connection's loss stops it) ends it quietly. An error
  reading a blob (or a blob shorter than its record) after the head was sent cuts the
  connection, the only honest signal left, as `BlobProducer` does.
* No byte is sent before twisted.web wrote the head: a request whose answer is held
  (http/held_answer.py) pauses this producer and resumes it once the head is out.
* Every byte sent is added to `request.sentLength`, which the access log, the audit
  record and the sent-bytes metric read.

Reads happen inside the kernel, on the reactor thread: bytes that are not in the page cache
would be read from the disk there, with every other connection waiting. So before each
piece (`CALL_BYTES`) it asks whether the piece's first and last byte are cached
(blobs/page_cache.py `cached`, two RWF_NOWAIT reads); when not, the source reads the next
`WARM_BYTES` on the IO pool (`SpanSource.warm`) while nothing is sent, and sending resumes
when they are in. From then on the file is sent only up to the bytes warmed, with the next
window warming meanwhile: a piece reaching past them would read the rest on the reactor.
A stop, a cancel or a client leaving meanwhile closes the source only once the warm-up is
over (a pool thread reads through its descriptor).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from typing import Any, Protocol

from twisted.internet import defer, tcp
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from objstore.blobs import page_cache

# Bytes sent in one reactor turn before the producer lets other connections run.
TURN_BYTES = 8 * 1024 * 1024
# One sendfile call asks for at most this much (the socket takes what fits).
CALL_BYTES = 4 * 1024 * 1024
# Bytes not in the page cache are read on the IO pool this much at a time before sending.
WARM_BYTES = 8 * 1024 * 1024
_TRANSPORT_ATTRIBUTES = ("dataBuffer", "offset", "_tempDataLen", "producerPaused",
                         "startWriting", "fileno")
# The client went away while we were writing: the connection's loss follows.
_GONE = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN})


def sendfile_transport(request: Any) -> Any | None:
    """The plain TCP transport of `request`'s connection when a `SendfileProducer` can
    write to it, else None (TLS, a test's fake transport, a closed connection)."""
    channel = getattr(request, "channel", None)
    transport = getattr(channel, "transport", None)
    if not isinstance(transport, tcp.Connection) or getattr(transport, "TLS", False):
        return None
    if transport.disconnecting or not transport.connected:
        return None
    if not all(hasattr(transport, name) for name in _TRANSPORT_ATTRIBUTES):
        return None
    return transport


class SpanSource(Protocol):
    """What a `SendfileProducer` sends: (descriptor, offset, count) spans, then closed.
    `ChunkStream` is one (blobs/reader.py)."""

    def file_spans(self) -> Iterator[tuple[int, int, int]]: ...

    def warm(self, fd: int, offset: int, count: int) -> defer.Deferred[None]:
        """Bring those bytes of a span's descriptor into the page cache, off the reactor
        thread."""
        ...

    def close(self) -> None: ...


@implementer(IPushProducer)
class SendfileProducer:
    """Streams `source`'s spans into `request` over `transport` (`sendfile_transport`).
    The request's status and headers, with Content-Length, are set before `start`."""

    def __init__(self, request: Any, source: SpanSource, transport: Any) -> None:
        self._request = request
        self._source = source
        self._transport = transport
        self._socket_fd: int = transport.fileno()
        self._spans: Iterator[tuple[int, int, int]] | None = None
        self._span: tuple[int, int, int] | None = None  # (fd, offset, left) being sent
        self._paused = False
        self._stopped = False
        self._sending = False
        self._error: Failure | None = None
        self._closed = False
        # Warm-ups (module notes): at most one job in flight, reading through `_warm_fd`.
        self._warming = False  # a job is in flight (the source is not closed under it)
        self._blocked = False  # sending waits for it
        self._release_after_warm = False
        self._span_serial = 0  # which span is being sent (a new one starts afresh)
        self._warm_serial = -1  # the span the offsets below are of
        self._ready_to = 0  # the span's bytes before this offset were warmed
        self._asked_to = 0  # ... and up to this one are being warmed
        self._cold_file = False  # the span was found cold: keep a window warming ahead
        self.done: defer.Deferred[None] = defer.Deferred(self._cancelled)

    def start(self) -> defer.Deferred[None]:
        self._request.registerProducer(self, True)
        self._request.write(b"")  # the response head, into the transport's buffer
        try:
            self._spans = self._source.file_spans()
        except Exception:
            self._error = Failure()
        self._send()
        return self.done

    # -- IPushProducer -------------------------------------------------------------------
    def pauseProducing(self) -> None:  # noqa: N802 (Twisted's name)
        self._paused = True

    def resumeProducing(self) -> None:  # noqa: N802 (Twisted's name)
        self._paused = False
        self._send()

    def stopProducing(self) -> None:  # noqa: N802 (Twisted's name)
        """The client went away. Unregister while the request still has its channel (see
        `BlobProducer.stopProducing`)."""
        self._stopped = True
        self._send()

    # -- the pump ------------------------------------------------------------------------
    def _send(self) -> None:
        if self.done.called or self._sending:
            return
        if self._warming and (self._blocked or self._stopped or self._error is not None):
            return  # `_warm_done` comes back here
        if self._stopped or self._error is not None:
            self._finish()
            return
        if self._paused:
            return
        self._sending = True
        try:
            ended = self._send_some()
        except Exception:
            self._error = Failure()
            ended = True
        finally:
            self._sending = False
        if ended:
            self._finish()

    def _send_some(self) -> bool:
        """Send until the socket is full, the turn's bytes are spent or everything is
        sent; True when the stream has ended (sent, or the client is gone)."""
        transport = self._transport
        if transport.disconnected or transport.disconnecting:
            self._stopped = True  # stopProducing follows; nothing more to send either way
            return True
        if not self._request.startedWriting:  # the head is held ([audit] strict): the
            return False  # request resumes this producer once it has written it
        if len(transport.dataBuffer) > transport.offset or transport._tempDataLen:
            self._wait_for_socket()  # the head (or anything else) goes first
            return False
        assert self._spans is not None
        sent = 0
        while sent < TURN_BYTES:
            if self._span is None:
                span = next(self._spans, None)
                if span is None:
                    return True
                self._span = span
                self._span_serial += 1
            fd, offset, left = self._span
            if left == 0:
                self._span = None
                continue
            sendable = self._sendable(fd, offset, left)
            if not sendable:
                return False  # `_warm_done` sends on
            try:
                count = os.sendfile(self._socket_fd, fd, offset, sendable)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno in _GONE:  # its loss follows: do not wait for a read to see it
                    self._stopped = True
                    transport.abortConnection()
                    return True
                raise
            if count == 0:
                raise OSError(f"a blob ended {left} bytes before its recorded size")
            sent += count
            self._request.sentLength += count
            self._span = (fd, offset + count, left - count)
        self._wait_for_socket()
        return False

    def _sendable(self, fd: int, offset: int, left: int) -> int:
        """How many bytes at `offset` of `fd` (`left` to its span's end) may be sent now,
        at most CALL_BYTES; 0 when sending must wait for a warm-up (one is started when
        none is in flight). A piece whose first and last byte are cached goes whole; once
        a piece was found cold, the file is sent only up to what the warm-ups brought in,
        with one window warming ahead (a piece reaching past the warmed bytes would read
        the rest from the disk on the reactor)."""
        want = min(left, CALL_BYTES)
        if self._warm_serial != self._span_serial:  # a new span (a descriptor number
            self._warm_serial = self._span_serial  # may be reused for another file)
            self._ready_to = self._asked_to = offset
            self._cold_file = False
        if not self._cold_file:
            if page_cache.cached(fd, offset, want):
                return want
            self._cold_file = True
            self._ready_to = self._asked_to = offset
        if offset >= self._ready_to:
            if not self._warming:
                self._warm(fd, offset, min(left, WARM_BYTES))
            if self._warming:  # (a warm-up may also be over at once)
                self._blocked = True  # `_warm_done` sends on
                return 0
        end = offset + left
        if (not self._warming and self._asked_to < end
                and self._asked_to - offset <= WARM_BYTES):
            self._warm(fd, self._asked_to, min(end - self._asked_to, WARM_BYTES))
        return min(want, self._ready_to - offset)

    def _warm(self, fd: int, offset: int, count: int) -> None:
        self._warming = True
        self._asked_to = offset + count
        self._source.warm(fd, offset, count).addBoth(self._warm_done, self._span_serial,
                                                      offset + count)

    def _warm_done(self, result: object, serial: int, end: int) -> None:
        """A warm-up is over (a failure of it is not the response's: the send that
        follows meets a real read error itself)."""
        self._warming = False
        if serial == self._warm_serial:
            self._ready_to = max(self._ready_to, end)
        if self._release_after_warm:
            self._release_after_warm = False
            self._release()
        self._blocked = False
        self._send()  # on, or to its end when it was stopped meanwhile

    def _wait_for_socket(self) -> None:
        """Ask the transport to resume its producer (the channel, then us) once the socket
        can take more: the transport does that when it drains and finds its producer
        paused."""
        self._transport.producerPaused = True
        self._transport.startWriting()

    def _cancelled(self, _done: defer.Deferred[None]) -> None:
        """The request's handler was cancelled (Klein does that when the client goes
        before stopProducing came): stop and let go of the blobs."""
        self._stopped = True
        self._release()

    def _release(self) -> None:
        if self._warming:  # a pool thread reads through a descriptor: close after it
            self._release_after_warm = True
            return
        if not self._closed:
            self._closed = True
            self._source.close()
        if self._request.channel is not None and self._request.producer is self:
            self._request.unregisterProducer()

    def _finish(self) -> None:
        self._release()
        if self._error is not None and not self._stopped:
            self._transport.abortConnection()
            self.done.errback(self._error)
        else:
            self.done.callback(None)
