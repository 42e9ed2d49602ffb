"""SendfileProducer over a real twisted TCP transport (a `tcp.Connection` on one end of a
socket pair, its reactor a MemoryReactorClock the test drives): the head goes first, the body
follows in order across a full socket and several blobs, the bytes are counted, a client
that leaves, a short blob and a cancelled handler all release the blobs; and
`body_producer`'s choice between it and BlobProducer."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock

from objstore.blobs.reader import ChunkStream, ReadAheadStream
from objstore.blobs.segments import Segment
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.http import sendfile as sendfile_module
from objstore.http.producers import BlobProducer, body_producer
from objstore.http.sendfile import WARM_BYTES, SendfileProducer, sendfile_transport
from objstore.threads import InlinePool

HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    return blobs


def put(store: BlobStore, data: bytes) -> str:
    blob_id = new_blob_id()
    store.commit_bytes(data, blob_id, {})
    return blob_id


def blob_fds(store: BlobStore) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(os.path.join(store.data_dir, "blobs")):
                count += 1
        except OSError:
            pass
    return count


class Site:
    sendfile = True


class Channel:
    """The HTTP channel between the transport and the request's producer: the
    transport's producer, passing pause/resume/stop on, as twisted.web's does."""

    def __init__(self) -> None:
        self.site = Site()
        self.transport: Any = None
        self.producer: Any = None

    def pauseProducing(self) -> None:  # noqa: N802
        if self.producer is not None:
            self.producer.pauseProducing()

    def resumeProducing(self) -> None:  # noqa: N802
        if self.producer is not None:
            self.producer.resumeProducing()

    def stopProducing(self) -> None:  # noqa: N802
        if self.producer is not None:
            self.producer.stopProducing()


class Request:
    """What the producers use of a twisted.web request: the head is written through the
    transport on the first write, as `Request.write` does."""

    def __init__(self, channel: Channel) -> None:
        self.channel: Channel | None = channel
        self.producer: Any = None
        self.sentLength = 0
        self.startedWriting = False

    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        assert streaming and self.producer is None and self.channel is not None
        self.producer = self.channel.producer = producer

    def unregisterProducer(self) -> None:  # noqa: N802
        assert self.channel is not None
        self.producer = self.channel.producer = None

    def write(self, data: bytes) -> None:
        assert self.channel is not None
        if not self.startedWriting:
            self.startedWriting = True
            self.channel.transport.write(HEAD)
        self.sentLength += len(data)
        if data:
            self.channel.transport.write(data)


class Connection:
    """A server transport on one end of a socket pair (small buffers: the socket fills
    up), the client on the other."""

    def __init__(self) -> None:
        server, self.client = socket.socketpair()
        for sock in (server, self.client):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.client.setblocking(False)
        self.reactor = MemoryReactorClock()
        self.transport = tcp.Connection(server, Protocol(), reactor=self.reactor)
        self.transport.connected = 1
        self.channel = Channel()
        self.channel.transport = self.transport
        self.transport.registerProducer(self.channel, True)
        self.request = Request(self.channel)
        self.received = bytearray()

    def run(self, done: Any, limit: int = 100_000) -> None:
        """Let the transport write when it asked to, and the client read, until `done`."""
        for _ in range(limit):
            if done.called:
                return
            self.turns(1)
        raise AssertionError("the response did not end")

    def turns(self, count: int, *, read: bool = True) -> None:
        """`count` times: the transport writes if it asked to, then (unless not `read`)
        the client reads what arrived."""
        for _ in range(count):
            if self.transport in self.reactor.getWriters():
                self.transport.doWrite()
            if read:
                self.read()

    def read(self) -> None:
        while True:
            try:
                chunk = self.client.recv(1024 * 1024)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.received += chunk

    def close(self) -> None:
        self.client.close()
        self.transport.socket.close()


def aborted(connection: Connection) -> bool:
    """Whether the transport was aborted (its connectionLost is scheduled)."""
    return bool(connection.transport._aborting)


@pytest.fixture
def connection() -> Any:
    conn = Connection()
    yield conn
    conn.close()


def test_head_then_every_byte_in_order_across_blobs(store: BlobStore,
                                                    connection: Connection) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    a, b = put(store, data[:1_000_000]), put(store, data[1_000_000:])
    reader = store.reader([Segment(a, 10, 999_990), Segment(b, 0, len(data) - 1_000_000)])
    stream = ChunkStream(reader, InlinePool())
    transport = sendfile_transport(connection.request)
    assert transport is connection.transport
    producer = SendfileProducer(connection.request, stream, transport)
    done = producer.start()
    # The head is still in the transport's buffer: no body byte may go before it.
    assert not done.called and connection.transport.producerPaused
    connection.read()
    assert bytes(connection.received) == b""
    connection.run(done)
    assert bytes(connection.received) == HEAD + data[10:]
    assert connection.request.sentLength == len(data) - 10
    assert connection.request.producer is None and blob_fds(store) == 0
    assert not connection.transport.disconnecting


def test_pause_and_resume(store: BlobStore, connection: Connection) -> None:
    data = os.urandom(2 * 1024 * 1024)
    stream = ChunkStream(store.reader([Segment(put(store, data), 0, len(data))]),
                         InlinePool())
    producer = SendfileProducer(connection.request, stream, connection.transport)
    done = producer.start()
    producer.pauseProducing()  # the channel paused the response before the head went
    connection.read()
    assert connection.received == b"" and not done.called
    producer.resumeProducing()
    connection.run(done)
    assert bytes(connection.received) == HEAD + data


class HeldRequest(Request):
    """A request whose head is held ([audit] strict): the first write keeps its bytes."""

    held = True

    def write(self, data: bytes) -> None:
        if self.held:
            return
        super().write(data)


def test_no_byte_before_a_held_head(store: BlobStore, connection: Connection) -> None:
    data = os.urandom(1024 * 1024)
    stream = ChunkStream(store.reader([Segment(put(store, data), 0, len(data))]),
                         InlinePool())
    request = HeldRequest(connection.channel)
    producer = SendfileProducer(request, stream, connection.transport)
    done = producer.start()
    producer.resumeProducing()  # resumed (by the channel) while the head is still held
    connection.turns(20)
    assert connection.received == b"" and not done.called
    request.held = False
    request.write(b"")  # the head goes, then the request resumes its producer
    producer.resumeProducing()
    connection.run(done)
    assert bytes(connection.received) == HEAD + data


def test_a_client_that_leaves_stops_it_quietly(store: BlobStore,
                                               connection: Connection) -> None:
    data = os.urandom(4 * 1024 * 1024)
    stream = ChunkStream(store.reader([Segment(put(store, data), 0, len(data))]),
                         InlinePool())
    producer = SendfileProducer(connection.request, stream, connection.transport)
    done = producer.start()
    connection.transport.doWrite()
    assert not done.called and blob_fds(store) == 1
    connection.client.close()  # the peer is gone: the next send fails with EPIPE
    producer.resumeProducing()
    assert done.called and aborted(connection)  # not waited for a read to see it
    results: list[Any] = []
    done.addBoth(results.append)
    assert results == [None] and blob_fds(store) == 0
    assert connection.request.producer is None
    assert 0 < connection.request.sentLength < len(data)


def test_stop_producing_mid_body_releases_the_blob(store: BlobStore,
                                                   connection: Connection) -> None:
    data = os.urandom(4 * 1024 * 1024)
    stream = ChunkStream(store.reader([Segment(put(store, data), 0, len(data))]),
                         InlinePool())
    done = SendfileProducer(connection.request, stream, connection.transport).start()
    connection.transport.doWrite()
    connection.channel.stopProducing()  # the transport lost its connection
    results: list[Any] = []
    done.addBoth(results.append)
    assert results == [None] and blob_fds(store) == 0
    assert connection.request.producer is None


def test_a_short_blob_cuts_the_connection(store: BlobStore,
                                          connection: Connection) -> None:
    blob_id = put(store, b"x" * 1000)
    stream = ChunkStream(store.reader([Segment(blob_id, 0, 5000)]), InlinePool())
    done = SendfileProducer(connection.request, stream, connection.transport).start()
    connection.run(done)
    failures: list[Any] = []
    done.addErrback(failures.append)
    assert failures and failures[0].check(OSError)
    assert aborted(connection) and blob_fds(store) == 0


def test_a_cancelled_handler_releases_the_blob(store: BlobStore,
                                               connection: Connection) -> None:
    data = os.urandom(4 * 1024 * 1024)
    stream = ChunkStream(store.reader([Segment(put(store, data), 0, len(data))]),
                         InlinePool())
    done = SendfileProducer(connection.request, stream, connection.transport).start()
    connection.transport.doWrite()
    done.cancel()  # Klein cancels the handler when the connection goes
    done.addErrback(lambda _failure: None)
    assert blob_fds(store) == 0 and connection.request.producer is None


# -- the choice ----------------------------------------------------------------------------


def test_plain_streams_on_tcp_are_sent_with_sendfile(store: BlobStore,
                                                     connection: Connection) -> None:
    blob_id = put(store, b"y" * 300_000)

    def stream() -> ChunkStream:
        return ChunkStream(store.reader([Segment(blob_id, 0, 300_000)]), InlinePool())

    assert isinstance(body_producer(connection.request, stream()), SendfileProducer)
    staged = ReadAheadStream(store.reader([Segment(blob_id, 0, 300_000)]), InlinePool())
    assert isinstance(body_producer(connection.request, staged), BlobProducer)
    connection.channel.site.sendfile = False
    assert isinstance(body_producer(connection.request, stream()), BlobProducer)
    connection.channel.site.sendfile = True
    connection.transport.disconnecting = True
    assert isinstance(body_producer(connection.request, stream()), BlobProducer)


def test_other_transports_keep_python_reads(store: BlobStore) -> None:
    blob_id = put(store, b"z" * 300_000)
    channel = Channel()
    channel.transport = object()  # TLS, or a test's fake transport
    request = Request(channel)
    stream = ChunkStream(store.reader([Segment(blob_id, 0, 300_000)]), InlinePool())
    assert sendfile_transport(request) is None
    assert isinstance(body_producer(request, stream), BlobProducer)


class HeldWarmUps:
    """A ChunkStream whose blob is cold (the page-cache question answers "not cached"
    outside the ranges warmed so far: the kernel's own answer is tested in
    test_page_cache.py) and whose warm-ups wait for the test (`finish_warm_up`)."""

    def __init__(self, stream: ChunkStream, monkeypatch: pytest.MonkeyPatch) -> None:
        self._stream = stream
        self.asked: list[tuple[int, int, int]] = []
        self.pending: list[defer.Deferred[None]] = []
        self.warmed: list[tuple[int, int]] = []
        monkeypatch.setattr(sendfile_module.page_cache, "cached", self.cached)

    def cached(self, fd: int, offset: int, count: int) -> bool:
        return any(start <= offset and offset + count <= end for start, end in self.warmed)

    def file_spans(self) -> Any:
        return self._stream.file_spans()

    def warm(self, fd: int, offset: int, count: int) -> defer.Deferred[None]:
        self.asked.append((fd, offset, count))
        self.pending.append(defer.Deferred())
        return self.pending[-1]

    def finish_warm_up(self) -> None:
        fd, offset, count = self.asked[len(self.asked) - len(self.pending)]
        self.warmed.append((offset, offset + count))
        self.pending.pop(0).callback(None)

    def close(self) -> None:
        self._stream.close()


def stream_of(store: BlobStore, data: bytes) -> ChunkStream:
    return ChunkStream(store.reader([Segment(put(store, data), 0, len(data))]),
                       InlinePool())


def test_a_cold_blob_is_read_in_off_the_reactor_before_it_is_sent(
        store: BlobStore, connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(3 * 1024 * 1024)
    source = HeldWarmUps(stream_of(store, data), monkeypatch)
    done = SendfileProducer(connection.request, source, connection.transport).start()
    connection.turns(50)  # the head goes; no body byte while the warm-up waits
    assert bytes(connection.received) == HEAD and not done.called
    assert [(offset, count) for _, offset, count in source.asked] == [(0, len(data))]
    source.finish_warm_up()
    connection.run(done)
    assert bytes(connection.received) == HEAD + data
    assert source.pending == [] and len(source.asked) == 1  # warm now: no second ask


def test_a_client_leaving_during_a_warm_up_closes_the_blob_after_it(
        store: BlobStore, connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(1024 * 1024)
    source = HeldWarmUps(stream_of(store, data), monkeypatch)
    producer = SendfileProducer(connection.request, source, connection.transport)
    done = producer.start()
    connection.turns(10, read=False)
    assert source.pending, "no warm-up was asked"
    producer.stopProducing()
    assert blob_fds(store) == 1 and not done.called  # a pool thread may be reading it
    source.finish_warm_up()
    assert done.called and blob_fds(store) == 0
    assert connection.request.producer is None


def test_a_cold_blob_keeps_one_window_warming_ahead_and_a_stop_waits_for_it(
        store: BlobStore, connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a blob was found cold, the next window is read in while this one is sent
    (one job at a time, never past the span); a stop while that job runs ends the
    response once it is over, and only then closes the blob."""
    size = WARM_BYTES + WARM_BYTES // 2
    data = os.urandom(size)
    source = HeldWarmUps(stream_of(store, data), monkeypatch)
    producer = SendfileProducer(connection.request, source, connection.transport)
    done = producer.start()
    connection.turns(10, read=False)
    source.finish_warm_up()  # the first window is in: it is sent, the next one asked
    assert [(offset, count) for _, offset, count in source.asked] == [
        (0, WARM_BYTES), (WARM_BYTES, size - WARM_BYTES)]
    connection.turns(20)
    assert len(connection.received) > len(HEAD)  # sending went on meanwhile
    producer.stopProducing()
    assert not done.called and blob_fds(store) == 1
    source.finish_warm_up()
    assert done.called and blob_fds(store) == 0


def test_a_cold_blob_is_never_sent_past_the_bytes_warmed(
        store: BlobStore, connection: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket takes pieces of any size, so a piece may start anywhere in the warmed
    window: none reaches past its end while the next window is still being read in
    (the kernel would read those bytes from the disk on the reactor thread)."""
    size = WARM_BYTES + WARM_BYTES // 2
    data = os.urandom(size)
    source = HeldWarmUps(stream_of(store, data), monkeypatch)
    calls: list[tuple[int, int]] = []
    real_sendfile = os.sendfile

    def sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        calls.append((offset, count))
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(sendfile_module.os, "sendfile", sendfile)
    producer = SendfileProducer(connection.request, source, connection.transport)
    done = producer.start()
    connection.turns(10, read=False)
    source.finish_warm_up()  # [0, WARM_BYTES) is in; the rest is asked, and held
    connection.turns(400)
    assert calls and len(connection.received) == len(HEAD) + WARM_BYTES
    assert all(offset + count <= WARM_BYTES for offset, count in calls)
    assert any(offset % (1024 * 1024) for offset, _ in calls)  # pieces did not align
    source.finish_warm_up()
    connection.run(done)
    assert bytes(connection.received) == HEAD + data
