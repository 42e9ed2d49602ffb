"""The engine asks its WriteGate before every local object write (put, copy, delete, part,
part copy, completion) with the bytes it brings: a refusal changes nothing and reports no
change; reads never ask. The engine
of test_changes.py (SQLite in a temp dir, inline pools) with a gate the test closes."""

from __future__ import annotations

import pytest

from objstore.engine.buckets import BucketService
from objstore.engine.changes import ChangeHook
from objstore.engine.multipart import (
    ChecksumMode,
    CompletionClaims,
    MultipartService,
    RequestedPart,
)
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.errors import S3Error
from tests.unit.conftest import LocalStores, run
from tests.unit.test_changes import CALLER, Engine, Recording


class Gate:
    def __init__(self) -> None:
        self.closed = False
        self.full = False  # the capacity guard (a peer is full): any write with bytes
        self.asked: list[int] = []
        self.held: list[int] = []

    def check_write(self, size_bytes: int, *, held_bytes: int = 0) -> None:
        self.asked.append(size_bytes)
        self.held.append(held_bytes)
        if self.closed:
            raise S3Error("ServiceUnavailable", "gate closed")
        if self.full and size_bytes > 0:
            raise S3Error("InsufficientStorage")


@pytest.fixture
def gated(stores: LocalStores) -> tuple[Engine, Gate]:
    meta, blobs, control = stores.meta, stores.blobs, stores.control
    io, clock = stores.io, lambda: 2000.0
    sink, gate = Recording(), Gate()
    hook = ChangeHook([sink])
    buckets = BucketService(meta, control, io, region="us-east-1", clock=clock, changes=hook)
    engine = Engine(sink, blobs, buckets, None,  # type: ignore[arg-type]
                    ObjectService(meta, blobs, io, clock=clock, changes=hook, gate=gate),
                    MultipartService(meta, blobs, io, clock=clock, changes=hook, gate=gate),
                    None, None, None, control,  # type: ignore[arg-type]
                    BucketService(meta, control, io, region="us-east-1", clock=clock,
                                  changes=hook, restamp_on_repeat=True))
    run(buckets.create(CALLER, "bkt", location=None, object_lock=False))
    return engine, gate


def exists(engine: Engine, key: str) -> bool:
    try:
        run(engine.objects.lookup("bkt", key))
    except S3Error as error:
        assert error.code == "NoSuchKey"
        return False
    return True


def refused(coroutine: object) -> S3Error:
    with pytest.raises(S3Error) as raised:
        run(coroutine)  # type: ignore[arg-type]
    return raised.value


def test_put_asks_with_its_size_and_a_refusal_writes_nothing(
        gated: tuple[Engine, Gate]) -> None:
    engine, gate = gated
    run(engine.objects.put(CALLER, "bkt", "k", engine.body(b"data"), ObjectAttrs()))
    assert gate.asked == [4]
    gate.closed = True
    before = len(engine.sink.changes)
    assert refused(engine.objects.put(CALLER, "bkt", "k2", engine.body(b"x"),
                                      ObjectAttrs())).code == "ServiceUnavailable"
    assert not exists(engine, "k2")
    assert len(engine.sink.changes) == before
    assert not list(engine.blobs.iter_blobs())[1:]  # only k's blob


def test_copy_and_delete_ask_and_reads_do_not(gated: tuple[Engine, Gate]) -> None:
    engine, gate = gated
    source = run(engine.objects.put(CALLER, "bkt", "k", engine.body(b"data"), ObjectAttrs()))
    gate.closed = True
    assert refused(engine.objects.copy(CALLER, source, "bkt", "k2", ObjectAttrs())).status == 503
    assert refused(engine.objects.delete(CALLER, "bkt", "k")).status == 503
    assert gate.asked == [4, 4, 0]
    assert exists(engine, "k")  # reads keep working
    assert gate.asked == [4, 4, 0]


def test_a_completion_asks_before_committing(gated: tuple[Engine, Gate]) -> None:
    engine, gate = gated
    upload = run(engine.multipart.create(CALLER, "bkt", "big", ObjectAttrs(), ChecksumMode()))
    part = run(engine.multipart.upload_part(CALLER, upload, 1, engine.body(b"part"), {}))
    gate.closed = True
    assert refused(engine.multipart.complete(
        CALLER, upload, [RequestedPart(1, part.etag)], CompletionClaims())).status == 503
    assert not exists(engine, "big")
    gate.closed = False
    run(engine.multipart.complete(CALLER, upload, [RequestedPart(1, part.etag)],
                                  CompletionClaims()))
    assert exists(engine, "big")


def test_a_part_and_a_part_copy_count_their_bytes(gated: tuple[Engine, Gate]) -> None:
    engine, gate = gated
    source = run(engine.objects.put(CALLER, "bkt", "src", engine.body(b"0123456789"),
                                    ObjectAttrs()))
    upload = run(engine.multipart.create(CALLER, "bkt", "big", ObjectAttrs(), ChecksumMode()))
    gate.asked.clear()
    run(engine.multipart.upload_part(CALLER, upload, 1, engine.body(b"part"), {}))
    run(engine.multipart.copy_part(CALLER, upload, 2, source, (2, 5)))
    assert gate.asked == [4, 5]
    gate.full = True
    blobs_before = len(list(engine.blobs.iter_blobs()))
    before = len(engine.sink.changes)
    assert refused(engine.multipart.upload_part(
        CALLER, upload, 3, engine.body(b"more"), {})).status == 507
    assert refused(engine.multipart.copy_part(CALLER, upload, 4, source, None)).status == 507
    assert len(list(engine.blobs.iter_blobs())) == blobs_before  # nothing stored
    assert len(engine.sink.changes) == before
    parts, _ = run(engine.multipart.list_parts(upload, 0, 100))
    assert [part.part_number for part in parts] == [1, 2]


def test_a_completion_counts_its_size_held_here(gated: tuple[Engine, Gate]) -> None:
    engine, gate = gated
    upload = run(engine.multipart.create(CALLER, "bkt", "big", ObjectAttrs(), ChecksumMode()))
    one = run(engine.multipart.upload_part(CALLER, upload, 1, engine.body(b"x" * 6), {}))
    gate.asked.clear()
    gate.held.clear()
    gate.full = True  # the smallest node (a peer) has no room for the object
    assert refused(engine.multipart.complete(
        CALLER, upload, [RequestedPart(1, one.etag)], CompletionClaims())).status == 507
    assert not exists(engine, "big")
    # The gate first, then the capacity: the parts are here, only the peers need room.
    assert (gate.asked, gate.held) == ([0, 6], [0, 6])
    gate.full = False
    run(engine.multipart.complete(CALLER, upload, [RequestedPart(1, one.etag)],
                                  CompletionClaims()))
    assert exists(engine, "big")
