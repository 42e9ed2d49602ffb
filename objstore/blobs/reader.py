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
reactor never waits on the disk for a large response. No Twisted import except through
the runner it is given.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from objstore.blobs.segments import Segment
from objstore.blobs.stages import ByteSource

if TYPE_CHECKING:
    from twisted.internet import defer

    from objstore.threads import Runner

READ_CHUNK_BYTES = 256 * 1024


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

    def next_chunk(self) -> defer.Deferred[bytes | None]:
        """The next chunk, or None after the last one."""
        return self._runner.run(next, self._chunks, None)

    def close(self) -> None:
        self._chunks.close()
        self._reader.close()
        release, self._release = self._release, None
        if release is not None:
            self._runner.run(release)
