"""Reading object bytes: the one way to get at what a blob holds.

`BlobReader` covers a logical range of an object as its planned segments (segments.py: one
for a plain object, one per part for a composite), and offers `read(offset, length)` and
chunk iteration over it. It opens each blob through a callable that returns a `ByteSource`
(stages.py): `BlobStore.open_blob`, the blob file itself, for a plain record; for a staged
one, the opener blobs/factory.py gives for the record's plan (a decrypting source wrapped
around that file), so the reader, the GET producer, the archive stream, checksums and
`check --deep` do not change when a stage is stacked.

At most one blob is open at a time: moving to another segment closes the previous blob.
`open()` opens the first blob at once: a blob deleted after that still reads through the
open descriptor. A reader that spans several blobs (parts) is opened under a pin that keeps
the others too (`BlobStore.pin_parts`), so that once a GET has started answering, a
concurrent delete of the key can not remove its bytes.

Everything here is blocking. Small reads may run on the calling (reactor) thread: a blob
is normally in the page cache and a pool round trip costs more than a 256 KiB read.
`ChunkStream` runs each chunk of a large range on a runner (the IO pool) instead, so the
reactor never waits on the disk for a large response. `ReadAheadStream` does the same for
a staged object (encrypted, compressed), whose chunks cost CPU to open: larger chunks (one
pool job opens 16 packages), and up to two of them opened ahead of the consumer, so the
pool decrypts the next megabyte while the reactor sends this one. It holds at most
`depth` chunks (ready or being read): a consumer that stops taking chunks (a paused
response, a slow client) stops the reading, so memory stays bounded per response. Both
read only the range they were given (a Range GET opens only the packages it covers). From
Twisted only Deferreds, besides the runner it is given.
"""

from __future__ import annotations

import bisect
import os
from collections import deque
from collections.abc import Callable, Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from twisted.internet import defer
from twisted.python.failure import Failure

from objstore.blobs import page_cache
from objstore.blobs.segments import Segment
from objstore.blobs.stages import ByteSource

if TYPE_CHECKING:
    from objstore.threads import Runner

READ_CHUNK_BYTES = 256 * 1024
STAGED_CHUNK_BYTES = 1024 * 1024  # one pool job of a staged stream: 16 packages, 4 zstd chunks
STAGED_DEPTH = 2  # chunks of a staged stream ready or being read, at most

# What a stream hands its consumer: bytes, or the pieces of one chunk (a staged read's
# packages, written one by one rather than joined into a copy first: `ReadAheadStream`).
Chunk = bytes | list[bytes]


class BlobFile:
    """One blob file open for reading; its stored bytes are its logical bytes (no stage).
    Opening costs one system call and nothing else (no stat): it is on the small-GET path."""

    __slots__ = ("blob_id", "_fd")

    def __init__(self, blob_id: str, path: str) -> None:
        self.blob_id = blob_id
        self._fd: int | None = os.open(path, os.O_RDONLY)  # FileNotFoundError when gone

    def read(self, offset: int, length: int) -> bytes:
        fd = self.fileno()
        data = os.pread(fd, length, offset)
        if len(data) == length:
            return data
        pieces = [data]
        got = len(data)
        while got < length:
            more = os.pread(fd, length - got, offset + got)
            if not more:
                raise OSError(f"blob {self.blob_id} is shorter than its recorded size")
            pieces.append(more)
            got += len(more)
        return b"".join(pieces)

    def size(self) -> int:
        """The stored size (one fstat)."""
        return os.fstat(self.fileno()).st_size

    def fileno(self) -> int:
        """The descriptor, for the kernel-copy fast path (`BlobStore.copy_segments`)."""
        if self._fd is None:
            raise ValueError(f"blob {self.blob_id} is closed")
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> BlobFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class BlobReader:
    """Bytes [0, length) of the concatenation of `segments`, each read from the source
    `open_source(blob_id)` returns. Not thread-safe: one caller at a time (a producer
    never overlaps its pool calls); close it when done."""

    __slots__ = ("_segments", "_starts", "length", "_open_source", "_blob_id", "_source")

    def __init__(self, segments: Sequence[Segment],
                 open_source: Callable[[str], ByteSource]) -> None:
        self._segments = segments
        starts = []
        total = 0
        for segment in segments:
            starts.append(total)
            total += segment.length
        self._starts = starts
        self.length = total
        self._open_source = open_source
        self._blob_id: str | None = None
        self._source: ByteSource | None = None

    def open(self) -> None:
        """Open the first blob now (FileNotFoundError when it is gone already)."""
        if self._segments:
            self._source_of(self._segments[0].blob_id)

    def read(self, offset: int, length: int) -> bytes:
        """Exactly `length` bytes from `offset` (reader coordinates)."""
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ValueError(f"bytes {offset}+{length} are outside the {self.length} read")
        if length == 0:
            return b""
        index = bisect.bisect_right(self._starts, offset) - 1
        pieces = []
        while length > 0:
            segment = self._segments[index]
            within = offset - self._starts[index]
            count = min(length, segment.length - within)
            source = self._source_of(segment.blob_id)
            pieces.append(source.read(segment.offset + within, count))
            offset += count
            length -= count
            index += 1
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def in_page_cache(self) -> bool | None:
        """Whether reading everything needs no disk read: the one plain blob file of a
        single-segment reader (opened here, kept open for the read) asked for its range
        (blobs/page_cache.py). None when that can not be told (several segments, a staged
        source): the caller decides as before."""
        if len(self._segments) != 1:
            return None
        segment = self._segments[0]
        fileno = getattr(self._source_of(segment.blob_id), "fileno", None)
        if fileno is None:
            return None
        return page_cache.cached(fileno(), segment.offset, segment.length)

    def read_all(self) -> bytes:
        """Everything, then close (a small object's bytes, or a slice)."""
        try:
            return self.read(0, self.length)
        finally:
            self.close()

    def chunks(self, chunk_bytes: int = READ_CHUNK_BYTES) -> Generator[bytes, None, None]:
        """Everything in order, in chunks of at most `chunk_bytes` that never span two
        segments (no joining)."""
        for segment in self._segments:
            offset, left = segment.offset, segment.length
            while left > 0:
                count = min(chunk_bytes, left)
                data = self._source_of(segment.blob_id).read(offset, count)
                offset += count
                left -= count
                yield data

    def piece_chunks(self, chunk_bytes: int = READ_CHUNK_BYTES
                     ) -> Generator[list[bytes], None, None]:
        """As `chunks`, each chunk as the pieces its source holds it in (a staged
        source's packages or zstd chunks, `UnitSource.read_pieces`): not joined."""
        for segment in self._segments:
            offset, left = segment.offset, segment.length
            while left > 0:
                count = min(chunk_bytes, left)
                source = self._source_of(segment.blob_id)
                read_pieces = getattr(source, "read_pieces", None)
                yield (read_pieces(offset, count) if read_pieces is not None
                       else [source.read(offset, count)])
                offset += count
                left -= count

    def file_spans(self) -> Generator[tuple[int, int, int], None, None]:
        """Everything in order as (descriptor, offset, count) spans of the blob files, for
        a kernel copy (`os.sendfile`, http/sendfile.py): one span per segment, each blob
        opened when its span is reached. TypeError when a source is not a plain file (a
        staged one holds stored bytes, not the object's)."""
        for segment in self._segments:
            fileno = getattr(self._source_of(segment.blob_id), "fileno", None)
            if fileno is None:
                raise TypeError("a staged blob can not be copied by the kernel")
            yield fileno(), segment.offset, segment.length

    def _source_of(self, blob_id: str) -> ByteSource:
        if self._blob_id == blob_id and self._source is not None:
            return self._source
        self.close()
        self._source = self._open_source(blob_id)
        self._blob_id = blob_id
        return self._source

    def close(self) -> None:
        source, self._source, self._blob_id = self._source, None, None
        if source is not None:
            source.close()

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class ChunkStream:
    """A reader's chunks, each read by a job on `runner` (the IO pool): what a streamed
    response pulls. Callers never have two `next_chunk` calls in flight, and `close` only
    when none is (a pool thread may be reading through the open blob). `release` (a
    hold on the blobs, see `BlobStore.pin_parts`) runs on the runner once closed."""

    def __init__(self, reader: BlobReader, runner: Runner,
                 chunk_bytes: int = READ_CHUNK_BYTES, *,
                 release: Callable[[], None] | None = None) -> None:
        self.length = reader.length
        self._reader = reader
        self._chunks = reader.chunks(chunk_bytes)
        self._runner = runner
        self._release = release

    def next_chunk(self) -> defer.Deferred[Chunk | None]:
        """The next chunk, or None after the last one."""
        return self._runner.run(next, self._chunks, None)

    def file_spans(self) -> Generator[tuple[int, int, int], None, None]:
        """The same bytes as (descriptor, offset, count) spans, for a consumer that copies
        them itself (`BlobReader.file_spans`), instead of `next_chunk`; the next blob is
        opened on the calling thread (one open call). Close the stream after, as ever."""
        return self._reader.file_spans()

    def warm(self, fd: int, offset: int, count: int) -> defer.Deferred[None]:
        """Bring `count` bytes at `offset` of one of `file_spans`' descriptors into the
        page cache, on the runner (blobs/page_cache.py): before a kernel copy on the
        reactor thread of bytes that are not there. No `close` while it runs."""
        return self._runner.run(page_cache.warm, fd, offset, count)

    def close(self) -> None:
        self._chunks.close()
        self._reader.close()
        release, self._release = self._release, None
        if release is not None:
            self._runner.run(release)


class ReadAheadStream:
    """A reader's chunks, read by jobs on `runner` ahead of the consumer: at most `depth`
    chunks are held (ready, or one being read), and a new read starts whenever one is
    taken. A chunk is a list of pieces (`BlobReader.piece_chunks`: a staged source's
    packages, never joined into one copy; the GET producer writes each). The same
    contract as `ChunkStream` for its consumer (never two `next_chunk` calls in flight);
    `close` may come while a read-ahead job runs: the reader is then
    closed (and `release` run) once that job is over, never under a pool thread."""

    def __init__(self, reader: BlobReader, runner: Runner,
                 chunk_bytes: int = STAGED_CHUNK_BYTES, depth: int = STAGED_DEPTH, *,
                 release: Callable[[], None] | None = None) -> None:
        if depth < 1:
            raise ValueError("a read-ahead stream holds at least one chunk")
        self.length = reader.length
        self._reader = reader
        self._chunks = reader.piece_chunks(chunk_bytes)
        self._runner = runner
        self._depth = depth
        self._release = release
        self._ready: deque[list[bytes] | None] = deque()  # None: the end
        self._reading = False
        self._ended = False  # the end (or an error) was read: nothing more to read
        self._error: Failure | None = None  # the Failure of the read that failed
        self._waiter: defer.Deferred[Chunk | None] | None = None
        self._closing = False

    def next_chunk(self) -> defer.Deferred[Chunk | None]:
        """The next chunk (its pieces), or None after the last one."""
        if self._ready:
            chunk = self._ready.popleft()
            self._read_ahead()
            return defer.succeed(chunk)
        if self._error is not None:
            return defer.fail(self._error)
        waiter: defer.Deferred[Chunk | None] = defer.Deferred()
        self._waiter = waiter
        self._read_ahead()  # an inline runner fires `waiter` before this returns
        return waiter

    def _read_ahead(self) -> None:
        if (self._reading or self._ended or self._closing
                or len(self._ready) + 1 > self._depth):
            return
        self._reading = True
        self._runner.run(next, self._chunks, None).addCallbacks(self._got, self._failed)

    def _got(self, chunk: list[bytes] | None) -> None:
        self._reading = False
        if self._closing:
            self._close_now()
            return
        if chunk is None:
            self._ended = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.callback(chunk)
        else:
            self._ready.append(chunk)
        self._read_ahead()

    def _failed(self, failure: Failure) -> None:
        self._reading = False
        self._ended = True
        if self._closing:
            self._close_now()
            return
        self._error = failure
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.errback(failure)

    def close(self) -> None:
        self._closing = True
        self._ready.clear()
        if not self._reading:
            self._close_now()

    def _close_now(self) -> None:
        self._chunks.close()
        self._reader.close()
        release, self._release = self._release, None
        if release is not None:
            self._runner.run(release)
