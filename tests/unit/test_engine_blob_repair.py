"""The read path's BlobRepair seam (engine/blob_repair.py): a GET (small or streamed, a
composite's later part included), a copy source and an UploadPartCopy source that find a
blob missing ask the repair once and read again; a failed repair or a single node keeps
today's answer (InternalError for a lost blob); a row that changed is not repaired. The
engine of test_changes.py (SQLite in a temp dir, inline pools) with a fake repair that
puts known bytes back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from twisted.internet.defer import Deferred

from objstore.blobs.store import BlobStore
from objstore.engine.blob_repair import NO_REPAIR, BlobRepair
from objstore.engine.buckets import BucketService
from objstore.engine.changes import ChangeHook
from objstore.engine.multipart import ChecksumMode, MultipartService
from objstore.engine.objects import ObjectAttrs, ObjectService, SourceChanged, VersionVanished
from objstore.errors import S3Error
from objstore.http.spool import BodySpool
from objstore.meta.records import ObjectRecord, PartRef
from objstore.meta.store import SyncMetaStore
from tests.unit.conftest import local_stores, run
from tests.unit.test_changes import CALLER

T = TypeVar("T")
COMPOSITE = "cccccccc-cccc-4ccc-8ccc-cccccccccccc"
PART_1 = "0000000a-0000-4000-8000-000000000001"
PART_2 = "0000000a-0000-4000-8000-000000000002"


class FakeRepair:
    """Puts back the bytes it was given for a blob id (and nothing else)."""

    enabled = True

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.copies: dict[str, bytes] = {}
        self.asked: list[str | None] = []

    async def repair_missing(self, record: ObjectRecord) -> bool:
        self.asked.append(record.blob_id)
        ids = [part.blob_id for part in record.parts] or [record.blob_id]
        for blob_id in ids:
            assert blob_id is not None
            if self.blobs.blob_size(blob_id) is not None:
                continue
            if blob_id not in self.copies:
                return False
            self.blobs.commit_bytes(self.copies[blob_id], blob_id, {"kind": "object"})
        return True


@dataclass
class Node:
    sql: SyncMetaStore
    blobs: BlobStore
    objects: ObjectService
    multipart: MultipartService
    repair: FakeRepair

    def put(self, key: str, data: bytes) -> ObjectRecord:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=1 << 20)
        spool.write(data)
        return run(self.objects.put(CALLER, "bkt", key, spool, ObjectAttrs()))

    def lose(self, blob_id: str | None) -> bytes:
        """Remove a blob's file; its bytes go to the fake peers."""
        assert blob_id is not None
        path = self.blobs.blob_path(blob_id)
        with open(path, "rb") as handle:
            self.repair.copies[blob_id] = handle.read()
        os.unlink(path)
        return self.repair.copies[blob_id]


def build(tmp_path: Path, repair: BlobRepair | None) -> tuple[Node, SyncMetaStore]:
    stores = local_stores(tmp_path)
    sql, meta, blobs, control = stores.sql, stores.meta, stores.blobs, stores.control
    io, clock = stores.io, lambda: 2000.0
    fake = FakeRepair(blobs)
    used = fake if repair is None else repair
    hook = ChangeHook()
    buckets = BucketService(meta, control, io, region="us-east-1", clock=clock, changes=hook)
    run(buckets.create(CALLER, "bkt", location=None, object_lock=False))
    node = Node(sql, blobs,
                ObjectService(meta, blobs, io, clock=clock, changes=hook, repair=used),
                MultipartService(meta, blobs, io, clock=clock, changes=hook, repair=used),
                fake)
    return node, sql


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    built, sql = build(tmp_path, None)
    yield built
    sql.close()


@pytest.fixture
def single(tmp_path: Path) -> Iterator[Node]:
    built, sql = build(tmp_path, NO_REPAIR)
    yield built
    sql.close()


def fired(deferred: Deferred[T]) -> T:
    """The result of a Deferred that fired already (inline pools)."""
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results and not hasattr(results[0], "raiseException")
    return results[0]  # type: ignore[no-any-return]


def composite(node: Node, first: bytes, second: bytes) -> ObjectRecord:
    """A completed multipart object of two parts, its row and files written directly."""
    for blob_id, data in ((PART_1, first), (PART_2, second)):
        node.blobs.commit_bytes(data, blob_id, {"kind": "part"})
    record = ObjectRecord(
        "bkt", "multi", "null", COMPOSITE, size=len(first) + len(second), etag="e-2",
        last_modified=1500.0,
        parts=(PartRef(1, PART_1, len(first), "a"), PartRef(2, PART_2, len(second), "b")))
    node.blobs.write_sidecar(COMPOSITE, {"kind": "object"})
    return node.sql.put_object(record).record


def test_a_missing_blob_is_repaired_then_read(node: Node) -> None:
    record = node.put("k", b"hello, world")
    node.lose(record.blob_id)
    assert run(node.objects.read_bytes(record, 0, record.size)) == b"hello, world"
    assert run(node.objects.read_bytes(record, 7, 5)) == b"world"
    assert node.repair.asked == [record.blob_id]  # the second read found it here


def test_a_repair_that_fails_keeps_the_lost_blob_answer(node: Node) -> None:
    record = node.put("k", b"data")
    node.lose(record.blob_id)
    del node.repair.copies[record.blob_id]  # no peer has it
    with pytest.raises(S3Error) as raised:
        run(node.objects.read_bytes(record, 0, record.size))
    assert raised.value.code == "InternalError"
    assert node.repair.asked == [record.blob_id]


def test_a_single_node_answers_as_before(single: Node) -> None:
    record = single.put("k", b"data")
    single.lose(record.blob_id)
    with pytest.raises(S3Error) as raised:
        run(single.objects.read_bytes(record, 0, record.size))
    assert raised.value.code == "InternalError"
    assert single.repair.asked == []


def test_a_version_replaced_meanwhile_is_looked_up_again_not_repaired(node: Node) -> None:
    old = node.put("k", b"old")
    node.put("k", b"new")  # the overwrite removed the old blob
    with pytest.raises(VersionVanished):
        run(node.objects.read_bytes(old, 0, old.size))
    assert node.repair.asked == []


def test_a_stream_repairs_a_missing_part_before_answering(node: Node) -> None:
    first, second = b"a" * 300_000, b"b" * 300_000
    record = composite(node, first, second)
    node.lose(PART_2)  # found only half-way through without the check first
    stream = run(node.objects.stream(record, 0, record.size))
    chunks = []
    while (chunk := fired(stream.next_chunk())) is not None:
        chunks.append(chunk)
    stream.close()
    assert b"".join(chunks) == first + second
    assert node.repair.asked == [COMPOSITE]


def test_a_stream_of_a_single_node_checks_nothing_first(single: Node) -> None:
    record = composite(single, b"a" * 10, b"b" * 10)
    stream = run(single.objects.stream(record, 0, record.size))
    stream.close()
    assert single.repair.asked == []


def test_a_missing_first_part_is_repaired_on_open(node: Node) -> None:
    record = composite(node, b"a" * 10, b"b" * 10)
    node.lose(PART_1)
    stream = run(node.objects.stream(record, 0, 10))  # one segment: no check first
    assert fired(stream.next_chunk()) == b"a" * 10
    stream.close()
    assert node.repair.asked == [COMPOSITE]


def test_a_copy_source_that_is_missing_is_repaired(node: Node) -> None:
    source = node.put("src", b"copy me")
    node.lose(source.blob_id)
    copied = run(node.objects.copy(CALLER, source, "bkt", "dst", ObjectAttrs()))
    assert run(node.objects.read_bytes(copied, 0, copied.size)) == b"copy me"
    assert node.repair.asked == [source.blob_id]


def test_a_copy_source_no_peer_has_is_a_changed_source_as_before(node: Node) -> None:
    source = node.put("src", b"copy me")
    node.lose(source.blob_id)
    node.repair.copies.clear()
    with pytest.raises(SourceChanged):
        run(node.objects.copy(CALLER, source, "bkt", "dst", ObjectAttrs()))


def test_a_part_copy_source_that_is_missing_is_repaired(node: Node) -> None:
    source = node.put("src", b"part bytes")
    node.lose(source.blob_id)
    upload = run(node.multipart.create(CALLER, "bkt", "big", ObjectAttrs(), ChecksumMode()))
    part = run(node.multipart.copy_part(CALLER, upload, 1, source, None))
    assert part.size == len(b"part bytes")
    assert node.repair.asked == [source.blob_id]
