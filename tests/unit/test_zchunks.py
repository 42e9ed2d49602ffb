"""The compressed blob format (blobs/zchunks.py) on bytes in memory, and the factory's
compression stage (blobs/factory.py) with SSE-S3 stacked on it in a real blob store:
round trips, ranges across chunk boundaries, chunks that do not shrink stored as is, and
truncated or altered stored bytes read as an error, never as wrong bytes."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from objstore.blobs.factory import BlobStages
from objstore.blobs.plan import SSE_S3, StagePlan, plan_of
from objstore.blobs.segments import Segment
from objstore.blobs.sidecar import record_from_sidecar, record_to_sidecar
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.blobs.zchunks import (
    CHUNK_BYTES,
    FOOTER_BYTES,
    ChunkCompressor,
    CorruptChunks,
    DecompressingSource,
)
from objstore.crypto.master_key import LocalMasterKey
from objstore.crypto.packages import plaintext_size, stored_size
from objstore.meta.records import ObjectRecord

C = CHUNK_BYTES


class Memory:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        if offset + length > len(self.data):
            raise OSError("short")
        return self.data[offset:offset + length]

    def close(self) -> None:
        pass


def _compressible(size: int) -> bytes:
    line = b"objstore compresses what the client sends, chunk by chunk. "
    return (line * (size // len(line) + 1))[:size]


def _compress(data: bytes, piece: int = 70_000, level: int = 3) -> bytes:
    stage = ChunkCompressor(level)
    out = [stage.transform(data[at:at + piece]) for at in range(0, len(data), piece)]
    return b"".join(out) + stage.finish()


def _source(stored: bytes, size: int) -> DecompressingSource:
    return DecompressingSource(Memory(stored), len(stored), size)


@pytest.mark.parametrize("size", [0, 1, C - 1, C, C + 1, 3 * C + 17])
def test_round_trip(size: int) -> None:
    data = _compressible(size)
    stored = _compress(data)
    if size > 1000:
        assert len(stored) < size // 10
    assert _source(stored, size).read(0, size) == data


def test_ranges_across_chunk_boundaries_read_only_the_chunks_they_cover() -> None:
    data = _compressible(4 * C + 99) + os.urandom(C)  # the last chunks do not shrink
    stored = _compress(data)
    for offset, length in [(C - 5, 10), (2 * C - 1, C + 2), (0, 1), (4 * C, C + 99),
                           (len(data) - 3, 3), (3 * C + 7, 0)]:
        memory = Memory(stored)
        source = DecompressingSource(memory, len(stored), len(data))
        index_reads = len(memory.reads)
        assert source.read(offset, length) == data[offset:offset + length]
        assert len(memory.reads) <= index_reads + 1
        read = sum(n for _, n in memory.reads[index_reads:])
        assert read <= (length // C + 2) * C + 64


def test_incompressible_chunks_are_stored_as_is() -> None:
    data = os.urandom(2 * C + 10)
    stored = _compress(data)
    count = 3
    assert len(stored) == len(data) + count * 8 + FOOTER_BYTES
    assert stored[:C] == data[:C]
    assert _source(stored, len(data)).read(C - 3, C + 6) == data[C - 3:2 * C + 3]


@pytest.mark.parametrize("where", ["chunk", "raw-chunk", "index", "footer"])
def test_an_altered_byte_is_an_error(where: str) -> None:
    data = _compressible(2 * C) + os.urandom(C)
    stored = bytearray(_compress(data))
    index_at = len(stored) - FOOTER_BYTES - 3 * 8
    at = {"chunk": 10, "raw-chunk": index_at - 5, "index": index_at + 2,
          "footer": len(stored) - 6}[where]
    stored[at] ^= 0x20
    with pytest.raises(CorruptChunks):
        _source(bytes(stored), len(data)).read(0, len(data))


@pytest.mark.parametrize("cut", [1, 8, FOOTER_BYTES, 1000])
def test_a_truncated_stream_is_an_error(cut: int) -> None:
    data = _compressible(3 * C)
    stored = _compress(data)
    with pytest.raises(CorruptChunks):
        _source(stored[:-cut], len(data)).read(0, len(data))


def test_a_record_of_another_size_does_not_read() -> None:
    stored = _compress(_compressible(C + 5))
    with pytest.raises(CorruptChunks):
        _source(stored, C + 4)


def test_plaintext_size_inverts_stored_size() -> None:
    for size in [0, 1, 65536, 65537, 10 * 65536 + 3]:
        assert plaintext_size(stored_size(size)) == size
    with pytest.raises(OSError):
        plaintext_size(stored_size(65536) + 1)


# -- the stage in a blob store, alone and under SSE-S3 ------------------------------------

@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(str(tmp_path / "data"), fsync=False,
                      stages=BlobStages(LocalMasterKey(os.urandom(32))))
    blobs.prepare()
    return blobs


def _write(store: BlobStore, plan: StagePlan, data: bytes) -> ObjectRecord:
    writer = store.stages.writer(store.tmp_dir, plan)
    for start in range(0, len(data), 50_000):
        writer.write(data[start:start + 50_000])
    writer.end()
    record = ObjectRecord(bucket="b", key="k", version_id="v1", blob_id=new_blob_id(),
                          size=writer.length, etag=writer.md5_hex, last_modified=1.0)
    fields = writer.stage_fields(record.bucket, record.key, record.version_id)
    assert fields is not None
    record = dataclasses.replace(record, **fields)
    assert record.blob_id is not None
    store.commit(writer.detach(), record.blob_id, record_to_sidecar(record))
    writer.close()
    return record


def _read(store: BlobStore, record: ObjectRecord, offset: int, length: int) -> bytes:
    assert record.blob_id is not None
    with store.reader([Segment(record.blob_id, offset, length)], record) as reader:
        return b"".join(reader.chunks(100_000))


MARKER = b"COMPRESS-MARKER-91ab"


@pytest.mark.parametrize("encrypted", [False, True])
def test_compressed_then_encrypted_round_trip(store: BlobStore, encrypted: bool) -> None:
    data = MARKER + _compressible(5 * C + 123)
    plan = StagePlan(compression="zstd", compression_level=5,
                     encryption=SSE_S3 if encrypted else None,
                     key_id=store.stages.key_id if encrypted else None)
    record = _write(store, plan, data)
    assert record.etag == hashlib.md5(data).hexdigest() and record.size == len(data)
    assert record.compression == "zstd"
    assert (record.encryption_algorithm == SSE_S3) is encrypted
    assert record.blob_id is not None
    blob_size = store.blob_size(record.blob_id)
    assert blob_size is not None and blob_size < len(data) // 10
    assert plan_of(record_from_sidecar(store.read_sidecar(record.blob_id))) == plan_of(record)
    assert _read(store, record, 0, len(data)) == data
    for offset, length in [(C - 1, 2), (2 * C + 5, 2 * C), (len(data) - 1, 1)]:
        assert _read(store, record, offset, length) == data[offset:offset + length]
    if encrypted:
        found = [p for p in Path(store.data_dir).rglob("*")
                 if p.is_file() and MARKER in p.read_bytes()]
        assert found == []


@pytest.mark.parametrize("encrypted", [False, True])
def test_an_altered_stored_byte_reads_as_an_error(store: BlobStore, encrypted: bool) -> None:
    data = _compressible(3 * C)
    plan = StagePlan(compression="zstd", encryption=SSE_S3 if encrypted else None,
                     key_id=store.stages.key_id if encrypted else None)
    record = _write(store, plan, data)
    assert record.blob_id is not None
    path = store.blob_path(record.blob_id)
    stored = bytearray(Path(path).read_bytes())
    stored[20] ^= 0x01
    Path(path).write_bytes(bytes(stored))
    with pytest.raises(OSError):
        _read(store, record, 0, len(data))
