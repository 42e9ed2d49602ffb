"""A stage stacked on the blob writer and reader: a toy, test-only chunked "cipher" (XOR
with a per-chunk key, each stored chunk prefixed by its index, so stored offsets differ
from logical ones). It proves the seam's shape: digests describe the client's bytes, the
stored file holds the transformed bytes, and a Range read through the stage reads only the
stored chunks it needs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from objstore.blobs.reader import BlobReader
from objstore.blobs.segments import Segment
from objstore.blobs.stages import ByteSource, ReadStage, WriteStage, stack_read_stages
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.blobs.writer import BlobWriter, SpoolFile
from objstore.threads import InlinePool

CHUNK = 16  # logical bytes per chunk
HEADER = 4  # the chunk index, stored before each chunk
STORED_CHUNK = CHUNK + HEADER


def _pad(index: int, length: int) -> bytes:
    return bytes((index * 31 + position) % 251 for position in range(length))


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


class XorWrite:
    """Write side: buffers input into whole chunks; `finish` stores the last partial one."""

    def __init__(self) -> None:
        self._held = b""
        self._index = 0

    def _seal(self, chunk: bytes) -> bytes:
        sealed = self._index.to_bytes(HEADER, "big") + _xor(chunk, _pad(self._index,
                                                                         len(chunk)))
        self._index += 1
        return sealed

    def transform(self, data: bytes) -> bytes:
        self._held += data
        out = []
        while len(self._held) >= CHUNK:
            out.append(self._seal(self._held[:CHUNK]))
            self._held = self._held[CHUNK:]
        return b"".join(out)

    def finish(self) -> bytes:
        held, self._held = self._held, b""
        return self._seal(held) if held else b""


def stored_size(size: int) -> int:
    full, rest = divmod(size, CHUNK)
    return full * STORED_CHUNK + (rest + HEADER if rest else 0)


class XorRead:
    """Read side: maps a logical range to the stored chunks holding it, reads those in one
    call from the source below, opens them and cuts the range out."""

    def __init__(self, inner: ByteSource, size: int) -> None:
        self._inner = inner
        self._size = size

    def read(self, offset: int, length: int) -> bytes:
        if length == 0:
            return b""
        first, last = offset // CHUNK, (offset + length - 1) // CHUNK
        start = first * STORED_CHUNK
        end = min((last + 1) * STORED_CHUNK, stored_size(self._size))
        stored = self._inner.read(start, end - start)
        plain = []
        for index in range(first, last + 1):
            sealed = stored[(index - first) * STORED_CHUNK:(index - first + 1) * STORED_CHUNK]
            assert int.from_bytes(sealed[:HEADER], "big") == index
            plain.append(_xor(sealed[HEADER:], _pad(index, len(sealed) - HEADER)))
        skip = offset - first * CHUNK
        return b"".join(plain)[skip:skip + length]

    def close(self) -> None:
        self._inner.close()


def xor_read(size: int) -> ReadStage:
    return lambda inner: XorRead(inner, size)


class CountingSource:
    """The stored bytes below the stage, recording every read."""

    def __init__(self, inner: ByteSource, reads: list[tuple[int, int]]) -> None:
        self._inner = inner
        self.reads = reads

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return self._inner.read(offset, length)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    return blobs


def write_staged(store: BlobStore, data: bytes, memory_limit: int) -> str:
    stages: list[WriteStage] = [XorWrite()]
    writer = BlobWriter(store.tmp_dir, want_sha256=True, checksum_algorithms=["crc32"],
                        memory_limit=memory_limit, hash_runner=InlinePool(), stages=stages)
    for start in range(0, len(data), 7):
        writer.write(data[start:start + 7])
    # Digests describe the client's bytes, never the stored ones.
    assert writer.length == len(data)
    assert writer.md5_hex == hashlib.md5(data).hexdigest()
    assert writer.sha256_hex == hashlib.sha256(data).hexdigest()
    with pytest.raises(RuntimeError):
        writer.read_at(0, 1)
    blob_id = new_blob_id()
    store.commit(writer.detach(), blob_id, {"kind": "test"})
    return blob_id


@pytest.mark.parametrize("memory_limit", [1024 * 1024, 32])  # kept in memory, or spilled
def test_a_staged_blob_stores_transformed_bytes_and_reads_back(store: BlobStore,
                                                               memory_limit: int) -> None:
    data = os.urandom(203)
    blob_id = write_staged(store, data, memory_limit)
    assert store.blob_size(blob_id) == stored_size(len(data))
    with open(store.blob_path(blob_id), "rb") as handle:
        assert data[:CHUNK] not in handle.read()
    reader = BlobReader([Segment(blob_id, 0, len(data))],
                        lambda b: stack_read_stages(store.open_blob(b), [xor_read(len(data))]))
    with reader:
        assert b"".join(reader.chunks(50)) == data


def test_a_range_read_through_a_stage_reads_only_the_chunks_it_needs(
        store: BlobStore) -> None:
    data = os.urandom(200)  # 12 full chunks and one of 8 bytes
    blob_id = write_staged(store, data, 1024)
    reads: list[tuple[int, int]] = []

    def open_source(blob: str) -> ByteSource:
        return stack_read_stages(CountingSource(store.open_blob(blob), reads),
                                 [xor_read(len(data))])

    with BlobReader([Segment(blob_id, 0, len(data))], open_source) as reader:
        assert reader.read(37, 50) == data[37:87]  # logical chunks 2..5
        assert reads == [(2 * STORED_CHUNK, 4 * STORED_CHUNK)]
        reads.clear()
        assert reader.read(195, 5) == data[195:]  # the short last chunk only
        assert reads == [(12 * STORED_CHUNK, 8 + HEADER)]


def test_segments_of_staged_parts_translate_each_blob_on_its_own(store: BlobStore) -> None:
    first, second = os.urandom(40), os.urandom(30)
    ids = [write_staged(store, first, 1024), write_staged(store, second, 1024)]
    sizes = {ids[0]: len(first), ids[1]: len(second)}
    reads: list[tuple[int, int]] = []

    def open_source(blob: str) -> ByteSource:
        return stack_read_stages(CountingSource(store.open_blob(blob), reads),
                                 [xor_read(sizes[blob])])

    # Object bytes 35..49: the last 5 of part 1, the first 10 of part 2.
    segments = [Segment(ids[0], 35, 5), Segment(ids[1], 0, 10)]
    with BlobReader(segments, open_source) as reader:
        assert reader.read(0, 15) == first[35:] + second[:10]
    assert reads == [(2 * STORED_CHUNK, 8 + HEADER), (0, STORED_CHUNK)]


def test_a_write_stage_tail_passes_through_the_stages_after_it(store: BlobStore) -> None:
    """Two stacked stages: the first one's held bytes are transformed by the second one
    before the second one finishes."""
    data = os.urandom(21)
    writer = BlobWriter(store.tmp_dir, stages=[XorWrite(), XorWrite()])
    writer.write(data)
    held = writer.detach()
    assert not isinstance(held, SpoolFile)
    assert len(held.data) == stored_size(stored_size(len(data)))
