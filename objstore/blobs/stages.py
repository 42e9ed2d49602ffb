"""The shapes of the stages that can be stacked on blob bytes: what a writer does to a body
on its way into a blob file, and what a reader does to a blob's bytes on their way out.

Nothing here transforms anything. Which stages a blob gets is its `StagePlan` (plan.py),
and blobs/factory.py is the one place that turns a plan into these stages (SSE-S3:
crypto/packages.py); a plain blob has none and is stored exactly as the client sent it.
The shapes let compression and encryption plug in without a second write or read path:

* A `WriteStage` turns chunks of the client's bytes into the bytes stored, in order
  (`transform` per chunk, `finish` for whatever it still holds). The writer computes every
  digest the client can check (MD5, SHA-256, x-amz-checksum-*) on the bytes BEFORE the
  first stage, so an ETag or a checksum always describes the plaintext. Stages are listed
  in the order they apply on write: compress, then encrypt.
* A `ByteSource` is the logical bytes of one blob, read by (offset, length). A `ReadStage`
  wraps a source of stored bytes into a source of logical bytes: given a logical range, it
  decides which stored bytes it needs (a chunked cipher or compressor maps the range to the
  chunks that hold it, plus whatever index it keeps), reads only those from the source
  below, and transforms them. Read stages are listed in the order they apply on read:
  decrypt, then decompress. A reader never sees stored offsets, so a Range request reads
  only the chunks it needs.

Segments (segments.py) and object records always speak logical offsets and sizes.
No I/O and no Twisted here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol


class ByteSource(Protocol):
    """The logical bytes of one blob. Blocking (the IO pool, or inline for small reads)."""

    def read(self, offset: int, length: int) -> bytes:
        """Exactly `length` bytes from `offset`; OSError when the blob is shorter."""
        ...

    def close(self) -> None: ...


class BlobSource(ByteSource, Protocol):
    """A blob file's stored bytes, which also knows its stored length."""

    def size(self) -> int: ...


# A read stage wraps the source below it (stored bytes) into a source of logical bytes.
ReadStage = Callable[[ByteSource], ByteSource]


class WriteStage(Protocol):
    """Transforms a body's bytes, in order, before they reach the blob file."""

    def transform(self, data: bytes) -> bytes:
        """The stored bytes for the next chunk of input (may be empty while it buffers)."""
        ...

    def finish(self) -> bytes:
        """The stored bytes still held once the input has ended."""
        ...


def stack_read_stages(source: ByteSource, stages: Sequence[ReadStage]) -> ByteSource:
    """`source` (stored bytes) seen through `stages`, the first one nearest the file."""
    for stage in stages:
        source = stage(source)
    return source


def finish_write_stages(stages: Sequence[WriteStage]) -> bytes:
    """What the stages still hold at the end of the input: each stage's tail passes through
    the stages after it before they finish in turn."""
    pending = b""
    for stage in stages:
        pending = (stage.transform(pending) if pending else b"") + stage.finish()
    return pending


def apply_write_stages(stages: Sequence[WriteStage], data: bytes) -> bytes:
    for stage in stages:
        data = stage.transform(data)
    return data


class UnitSource:
    """A `ByteSource` of logical bytes stored in units of `unit` logical bytes, each opened
    on its own (encrypted packages, compressed chunks): a read reads the stored bytes of
    the units its range covers at once and opens only those, and the last unit opened is
    kept (a streamed read asks for it again). Subclasses say how a run of units is read
    and opened (`_open_units`)."""

    __slots__ = ("_source", "_size", "_unit", "_cached_seq", "_cached")

    def __init__(self, source: ByteSource, size: int, unit: int) -> None:
        self._source = source
        self._size = size
        self._unit = unit
        self._cached_seq = -1
        self._cached = b""

    def read(self, offset: int, length: int) -> bytes:
        pieces = self.read_pieces(offset, length)
        if not pieces:
            return b""
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def read_pieces(self, offset: int, length: int) -> list[bytes]:
        """The bytes `read` gives, as the units' own bytes (the first and the last cut to
        the range) instead of one joined copy: a streamed GET writes them as they are."""
        if offset < 0 or length < 0 or offset + length > self._size:
            raise OSError(f"bytes {offset}+{length} are outside the {self._size} stored")
        if length == 0:
            return []
        first = offset // self._unit
        last = (offset + length - 1) // self._unit
        pieces = []
        seq = first
        if seq == self._cached_seq:
            pieces.append(self._cached)
            seq += 1
        if seq <= last:
            for plain in self._open_units(seq, last):
                pieces.append(plain)
                self._cached_seq, self._cached = seq, plain
                seq += 1
        skip = offset - first * self._unit
        if len(pieces) == 1:
            return [pieces[0][skip:skip + length]]
        pieces[0] = pieces[0][skip:]  # the whole unit (no copy) when the range starts on it
        pieces[-1] = pieces[-1][:offset + length - last * self._unit]
        return pieces

    def _open_units(self, first: int, last: int) -> Iterator[bytes]:
        """The logical bytes of units `first` to `last`, in order (one read below)."""
        raise NotImplementedError

    def close(self) -> None:
        self._cached = b""
        self._source.close()
