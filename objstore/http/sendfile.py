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

Reads happen on the reactor thread, inside the kernel: as with the small GET path, a blob
is expected to be in the page cache; a cold one costs the reactor the disk's time.
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

# Bytes sent in one reactor turn before the producer lets other connections run.
TURN_BYTES = 8 * 1024 * 1024
# One sendfile call asks for at most this much (the socket takes what fits).
CALL_BYTES = 4 * 1024 * 1024
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
            fd, offset, left = self._span
            if left == 0:
                self._span = None
                continue
            try:
                count = os.sendfile(self._socket_fd, fd, offset, min(left, CALL_BYTES))
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
