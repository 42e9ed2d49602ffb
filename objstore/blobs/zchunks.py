"""The stored format of a compressed blob: independent zstd chunks and a trailing index.

The client's bytes are cut into chunks of 256 KiB (the last one holds what is left; an
empty object has none). Each chunk is compressed on its own (one zstd frame) and stored
compressed only when that makes it smaller; otherwise it is stored as is. After the
chunks comes the index, one 8-byte entry per chunk (its stored length, with the top bit
set for a chunk stored as is, and the CRC-32 of its stored bytes), then a fixed footer:
magic `OSZ1`, the chunk size, the logical size, the chunk count and the CRC-32 of the
index and the footer before it.

The format describes itself: a reader needs only the length of the stream (the blob
file's size, or what the encryption stage below says it holds: compression comes first
on write, so the index is encrypted with the chunks) and the record's logical size. A
Range read maps to the chunks it covers and decompresses only those (`DecompressingSource`);
a truncated or altered stream (a bad footer, an index that does not add up, a chunk whose
CRC or length is wrong) is a `CorruptChunks` error, never wrong bytes. Pure apart from the
`ByteSource` it reads; `zstandard` does the compression.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from itertools import accumulate

import zstandard

from objstore.blobs.stages import ByteSource, UnitSource
from objstore.errors import ServerCondition

CHUNK_BYTES = 256 * 1024
ALGORITHM = "zstd"  # the record's `compression`
DEFAULT_LEVEL = 3
MIN_LEVEL, MAX_LEVEL = 1, 19
MAGIC = b"OSZ1"
_ENTRY = struct.Struct(">II")  # stored length (top bit: stored as is), CRC-32
_FOOTER = struct.Struct(">4sIQII")  # magic, chunk size, logical size, count, CRC-32
FOOTER_BYTES = _FOOTER.size
_RAW = 0x8000_0000


class CorruptChunks(OSError, ServerCondition):
    """A compressed blob that does not read back (truncated, altered): InternalError,
    logged in one line; `check --deep` reports it."""

    def __init__(self, message: str) -> None:
        OSError.__init__(self, message)
        self.code = "InternalError"
        self.message = message


def chunk_count(size: int) -> int:
    return -(-size // CHUNK_BYTES)


class ChunkCompressor:
    """A `WriteStage`: the client's bytes in, chunks then (from `finish`) the index out."""

    def __init__(self, level: int = DEFAULT_LEVEL) -> None:
        self._compressor = zstandard.ZstdCompressor(level=level, write_content_size=True,
                                                    write_checksum=False)
        self._pending = bytearray()
        self._entries: list[bytes] = []
        self._size = 0

    def transform(self, data: bytes) -> bytes:
        pending = self._pending
        pending += data
        if len(pending) < CHUNK_BYTES:
            return b""
        out = []
        view = memoryview(pending)
        at = 0
        while len(pending) - at >= CHUNK_BYTES:
            out.append(self._chunk(view[at:at + CHUNK_BYTES]))
            at += CHUNK_BYTES
        view.release()
        del pending[:at]
        return b"".join(out)

    def _chunk(self, plain: bytes | memoryview) -> bytes:
        self._size += len(plain)
        packed = self._compressor.compress(plain)
        if len(packed) < len(plain):
            stored, flag = packed, 0
        else:
            stored, flag = bytes(plain), _RAW
        self._entries.append(_ENTRY.pack(len(stored) | flag, zlib.crc32(stored)))
        return stored

    def finish(self) -> bytes:
        tail = self._chunk(bytes(self._pending)) if self._pending else b""
        self._pending = bytearray()
        index = b"".join(self._entries)
        head = struct.pack(">4sIQI", MAGIC, CHUNK_BYTES, self._size, len(self._entries))
        return tail + index + head + struct.pack(">I", zlib.crc32(index + head))


class DecompressingSource(UnitSource):
    """The logical bytes of a compressed stream of `stream_size` bytes (read from the
    `ByteSource` below), expected to hold `size` bytes. Reads the footer and index once,
    then decompresses only the chunks a read covers, keeping the last one."""

    __slots__ = ("_offsets", "_entries")

    def __init__(self, source: ByteSource, stream_size: int, size: int) -> None:
        super().__init__(source, size, CHUNK_BYTES)
        count = chunk_count(size)
        index_bytes = count * _ENTRY.size
        if stream_size < FOOTER_BYTES + index_bytes:
            raise CorruptChunks(f"compressed blob of {stream_size} bytes is too short for "
                                f"its index of {count} chunks")
        tail = source.read(stream_size - FOOTER_BYTES - index_bytes, index_bytes + FOOTER_BYTES)
        index, footer = tail[:index_bytes], tail[index_bytes:]
        magic, chunk, logical, stored_count, crc = _FOOTER.unpack(footer)
        if (magic != MAGIC or chunk != CHUNK_BYTES or logical != size
                or stored_count != count or zlib.crc32(index + footer[:-4]) != crc):
            raise CorruptChunks("the index of a compressed blob is altered or truncated")
        self._entries = [_ENTRY.unpack_from(index, i * _ENTRY.size) for i in range(count)]
        lengths = [entry[0] & ~_RAW for entry in self._entries]
        self._offsets = [0, *accumulate(lengths)]
        if self._offsets[-1] != stream_size - FOOTER_BYTES - index_bytes:
            raise CorruptChunks("the chunks of a compressed blob do not add up to its index")

    def _open_units(self, first: int, last: int) -> Iterator[bytes]:
        start = self._offsets[first]
        stored = self._source.read(start, self._offsets[last + 1] - start)
        for seq in range(first, last + 1):
            begin, end = self._offsets[seq] - start, self._offsets[seq + 1] - start
            yield self._open(seq, stored[begin:end])

    def _open(self, seq: int, stored: bytes) -> bytes:
        flagged, crc = self._entries[seq]
        expected = min(CHUNK_BYTES, self._size - seq * CHUNK_BYTES)
        if zlib.crc32(stored) != crc:
            raise CorruptChunks(f"compressed chunk {seq} is altered")
        if flagged & _RAW:
            plain = stored
        else:
            try:
                plain = zstandard.ZstdDecompressor().decompress(stored,
                                                                max_output_size=expected)
            except zstandard.ZstdError as exc:
                raise CorruptChunks(f"compressed chunk {seq} does not decompress: "
                                    f"{exc}") from None
        if len(plain) != expected:
            raise CorruptChunks(f"compressed chunk {seq} holds {len(plain)} bytes, "
                                f"not {expected}")
        return plain
