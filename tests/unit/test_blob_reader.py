"""BlobReader over plain and composite segments, ChunkStream on a runner, and the GET
producer that drains it (BlobProducer): order, read-ahead, pause, stop (or a cancelled
handler) with a read in flight, a failure mid-stream."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer

from objstore.blobs.reader import ChunkStream, ReadAheadStream
from objstore.blobs.segments import Segment
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.http.producers import BlobProducer
from objstore.threads import InlinePool


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    return blobs


def put(store: BlobStore, data: bytes) -> str:
    blob_id = new_blob_id()
    store.commit_bytes(data, blob_id, {})
    return blob_id


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_reads_span_segments_and_chunks_never_do(store: BlobStore) -> None:
    a, b = put(store, b"0123456789"), put(store, b"abcdefghij")
    segments = [Segment(a, 4, 6), Segment(b, 0, 5)]
    before = _open_fds()
    with store.reader(segments) as reader:
        assert reader.length == 11
        assert reader.read(0, 11) == b"456789abcde"
        assert reader.read(5, 3) == b"9ab"
        assert reader.read(7, 0) == b""
        with pytest.raises(ValueError):
            reader.read(10, 2)
        assert list(reader.chunks(4)) == [b"4567", b"89", b"abcd", b"e"]
        assert _open_fds() == before + 1  # one blob open at a time
    assert _open_fds() == before


def test_an_opened_reader_survives_the_blob_being_unlinked(store: BlobStore) -> None:
    blob_id = put(store, b"still here")
    reader = store.reader([Segment(blob_id, 0, 10)])
    reader.open()
    store.delete(blob_id)
    assert reader.read_all() == b"still here"
    with pytest.raises(FileNotFoundError):
        store.reader([Segment(blob_id, 0, 10)]).open()


def test_a_short_blob_is_an_error(store: BlobStore) -> None:
    blob_id = put(store, b"12")
    with pytest.raises(OSError, match="shorter"):
        store.reader([Segment(blob_id, 0, 5)]).read_all()


def test_a_whole_blob_reader_takes_the_file_size(store: BlobStore) -> None:
    blob_id = put(store, b"abc")
    assert store.blob_reader(blob_id).read_all() == b"abc"


# -- the producer --------------------------------------------------------------------------


class Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abortConnection(self) -> None:  # noqa: N802
        self.aborted = True


class Channel:
    def __init__(self) -> None:
        self.transport = Transport()


class Request:
    """What BlobProducer uses of a twisted.web request; pauses itself after `pause_after`
    bytes, as a transport whose buffer filled up would."""

    def __init__(self, pause_after: int | None = None) -> None:
        self.data = bytearray()
        self.producer: Any = None
        self.channel: Channel | None = Channel()
        self.pause_after = pause_after

    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        assert streaming and self.producer is None
        self.producer = producer

    def unregisterProducer(self) -> None:  # noqa: N802
        assert self.channel is not None and self.producer is not None
        self.producer = None

    def write(self, data: bytes) -> None:
        self.data += data
        if self.pause_after is not None and len(self.data) >= self.pause_after:
            self.pause_after = None
            self.producer.pauseProducing()


class ManualRunner:
    """Runs a job when the test says so."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], Any], defer.Deferred[Any]]] = []

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
        d: defer.Deferred[Any] = defer.Deferred()
        self.jobs.append((lambda: fn(*args, **kwargs), d))
        return d

    def step(self) -> None:
        job, d = self.jobs.pop(0)
        try:
            result = job()
        except Exception as error:  # noqa: BLE001 - handed to the Deferred
            d.errback(error)
        else:
            d.callback(result)


def test_the_producer_streams_every_chunk_in_order(store: BlobStore) -> None:
    data = os.urandom(300_000)
    a, b = put(store, data[:100_000]), put(store, data[100_000:])
    reader = store.reader([Segment(a, 0, 100_000), Segment(b, 0, 200_000)])
    request = Request()
    done = BlobProducer(request, ChunkStream(reader, InlinePool(), 64 * 1024)).start()
    assert done.called and bytes(request.data) == data
    assert request.producer is None


def test_one_read_ahead_and_none_while_a_chunk_waits(store: BlobStore) -> None:
    blob_id = put(store, bytes(range(256)) * 40)  # 10240 bytes, 10 chunks of 1024
    runner = ManualRunner()
    request = Request(pause_after=2048)
    stream = ChunkStream(store.reader([Segment(blob_id, 0, 10240)]), runner, 1024)
    done = BlobProducer(request, stream).start()
    assert len(runner.jobs) == 1  # never two reads in flight
    runner.step()
    runner.step()  # the second chunk pauses the request; a third read goes ahead
    assert len(request.data) == 2048 and len(runner.jobs) == 1
    runner.step()
    assert not runner.jobs  # paused with a chunk waiting: nothing more is read
    request.producer.resumeProducing()
    while runner.jobs:
        runner.step()
    assert done.called and len(request.data) == 10240


def test_stopping_waits_for_the_read_in_flight_before_closing(store: BlobStore) -> None:
    blob_id = put(store, os.urandom(4096))
    runner = ManualRunner()
    request = Request()
    before = _open_fds()
    stream = ChunkStream(store.reader([Segment(blob_id, 0, 4096)]), runner, 1024)
    producer = BlobProducer(request, stream)
    stream._reader.open()  # as ObjectService.stream does
    done = producer.start()
    producer.stopProducing()
    assert request.producer is None  # unregistered while the channel is there
    assert not done.called and _open_fds() == before + 1  # a pool thread may be reading
    runner.step()
    assert done.called and _open_fds() == before
    assert not runner.jobs and request.data == b""


def test_a_cancelled_response_closes_the_source_once_no_read_is_in_flight(
        store: BlobStore) -> None:
    """Over TLS a lost connection may reach the producer only as the handler's
    cancellation (Klein's), never as stopProducing: the blob must still be let go."""
    blob_id = put(store, os.urandom(4096))
    runner = ManualRunner()
    request = Request()
    before = _open_fds()
    stream = ChunkStream(store.reader([Segment(blob_id, 0, 4096)]), runner, 1024)
    stream._reader.open()  # as ObjectService.stream does
    done = BlobProducer(request, stream).start()
    done.addErrback(lambda _failure: None)
    done.cancel()
    assert request.producer is None and _open_fds() == before + 1  # a read is in flight
    runner.step()
    assert _open_fds() == before and not runner.jobs


def test_a_failed_read_cuts_the_connection(store: BlobStore) -> None:
    blob_id = put(store, b"short")
    request = Request()
    stream = ChunkStream(store.reader([Segment(blob_id, 0, 50)]), InlinePool())
    done = BlobProducer(request, stream).start()
    assert request.channel is not None and request.channel.transport.aborted
    failures: list[Any] = []
    done.addErrback(failures.append)
    assert failures and failures[0].check(OSError)


def test_read_ahead_streams_every_chunk_in_order(store: BlobStore) -> None:
    data = os.urandom(300_000)
    a, b = put(store, data[:100_000]), put(store, data[100_000:])
    reader = store.reader([Segment(a, 0, 100_000), Segment(b, 0, 200_000)])
    request = Request()
    done = BlobProducer(request, ReadAheadStream(reader, InlinePool(), 64 * 1024)).start()
    assert done.called and bytes(request.data) == data
    assert request.producer is None


def test_read_ahead_holds_at_most_depth_chunks_and_stops_while_paused(
        store: BlobStore) -> None:
    """Two chunks ahead of the sending at most; a paused response (a slow client) stops
    the reading, so the server never buffers the object."""
    blob_id = put(store, bytes(range(256)) * 40)  # 10240 bytes, 10 chunks of 1024
    runner = ManualRunner()
    request = Request(pause_after=1024)
    stream = ReadAheadStream(store.reader([Segment(blob_id, 0, 10240)]), runner, 1024, 2)
    done = BlobProducer(request, stream).start()
    assert len(runner.jobs) == 1  # one read at a time
    runner.step()  # chunk 1: sent, which pauses the request; the producer asks for chunk 2
    assert len(request.data) == 1024 and len(runner.jobs) == 1
    runner.step()  # chunk 2 waits in the producer (paused); chunk 3 is read ahead
    runner.step()  # chunk 3 ready; chunk 4 read ahead
    runner.step()  # chunks 3 and 4 ready: the stream reads no further while paused
    assert not runner.jobs and len(request.data) == 1024
    request.producer.resumeProducing()  # chunks 2 to 4 go out, chunk 5 is read ahead
    assert len(request.data) == 4096 and len(runner.jobs) == 1
    while runner.jobs:
        runner.step()
    assert done.called and bytes(request.data) == bytes(range(256)) * 40


def test_closing_with_a_read_ahead_in_flight_waits_for_it(store: BlobStore) -> None:
    blob_id = put(store, os.urandom(4096))
    runner = ManualRunner()
    request = Request(pause_after=1024)
    released: list[bool] = []
    before = _open_fds()
    stream = ReadAheadStream(store.reader([Segment(blob_id, 0, 4096)]), runner, 1024,
                             release=lambda: released.append(True))
    stream._reader.open()
    producer = BlobProducer(request, stream)
    done = producer.start()
    runner.step()  # chunk 1 sent (the request pauses)
    runner.step()  # chunk 2 waits in the producer, chunk 3 is read ahead: in flight
    assert len(runner.jobs) == 1
    producer.stopProducing()
    assert done.called and _open_fds() == before + 1  # the pool may be reading the blob
    runner.step()  # the read ends: now the reader closes and the release is queued
    assert _open_fds() == before
    runner.step()
    assert released == [True] and not runner.jobs


def test_a_failed_read_ahead_reaches_the_consumer_after_the_good_chunks(
        store: BlobStore) -> None:
    blob_id = put(store, b"x" * 1500)
    request = Request()
    stream = ReadAheadStream(store.reader([Segment(blob_id, 0, 3000)]), InlinePool(), 1024)
    done = BlobProducer(request, stream).start()
    failures: list[Any] = []
    done.addErrback(failures.append)
    assert request.data == b"x" * 1024  # the first chunk went out
    assert request.channel is not None and request.channel.transport.aborted
    assert failures and failures[0].check(OSError)
