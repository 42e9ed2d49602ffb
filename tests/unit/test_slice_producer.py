"""SliceProducer: slices read through an awaitable reader, pause/resume, stop, and `idle`
(what lets the owner of the source close it only after the last read). No reactor: reads
are Deferreds the test fires."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from objstore.http.slice_producer import SliceProducer


class Consumer:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


class Reads:
    """A reader whose every read waits until the test answers it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pending: list[tuple[int, int, Deferred[bytes]]] = []

    def __call__(self, offset: int, size: int) -> Deferred[bytes]:
        waiting: Deferred[bytes] = Deferred()
        self.pending.append((offset, size, waiting))
        return waiting

    def answer(self) -> None:
        offset, size, waiting = self.pending.pop(0)
        waiting.callback(self.data[offset:offset + size])


def outcome(deferred: Deferred[Any]) -> list[Any]:
    seen: list[Any] = []
    deferred.addBoth(seen.append)
    return seen


def test_slices_are_read_in_order_and_written() -> None:
    reads, consumer = Reads(b"abcdefghij"), Consumer()
    done = outcome(SliceProducer(reads, 10, slice_bytes=4).startProducing(consumer))
    for _ in range(3):
        reads.answer()
    assert consumer.written == [b"abcd", b"efgh", b"ij"] and done == [None]


def test_a_paused_producer_reads_nothing_until_resumed() -> None:
    reads, consumer = Reads(b"abcdefgh"), Consumer()
    producer = SliceProducer(reads, 8, slice_bytes=4)
    producer.startProducing(consumer)
    producer.pauseProducing()
    reads.answer()
    assert consumer.written == [b"abcd"] and reads.pending == []
    producer.resumeProducing()
    assert [offset for offset, _, _ in reads.pending] == [4]


def test_idle_waits_for_the_read_in_flight_and_a_stopped_producer_writes_nothing() -> None:
    reads, consumer = Reads(b"abcdefgh"), Consumer()
    producer = SliceProducer(reads, 8, slice_bytes=4)
    done = outcome(producer.startProducing(consumer))
    producer.stopProducing()
    idle = outcome(producer.idle())
    assert idle == []  # the read is still in flight: closing the source now would race it
    reads.answer()
    assert idle == [None] and consumer.written == [] and done == [None]
    assert outcome(producer.idle()) == [None] and reads.pending == []


def test_a_failed_read_fails_the_body_unless_the_producer_was_stopped() -> None:
    failing: Deferred[bytes] = Deferred()
    producer = SliceProducer(lambda offset, size: failing, 8)
    done = outcome(producer.startProducing(Consumer()))
    failing.errback(OSError("disk"))
    assert done and done[0].check(OSError)

    failing = Deferred()
    producer = SliceProducer(lambda offset, size: failing, 8)
    done = outcome(producer.startProducing(Consumer()))
    producer.stopProducing()
    failing.errback(OSError("closed under it"))
    assert done == [None]


def test_a_source_that_ends_early_is_an_error() -> None:
    reads = Reads(b"abc")
    done = outcome(SliceProducer(reads, 8).startProducing(Consumer()))
    reads.answer()  # b"abc"
    reads.answer()  # b"": the source ended before the declared length
    assert done and done[0].check(OSError)
