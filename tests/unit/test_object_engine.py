"""ObjectService copy and conditional-write paths, in memory: SQLite in a temp dir, inline
DB and IO pools, a real BlobStore (fsync off). Composite (multipart) sources are built
directly, so the copy of a composite is tested before multipart upload exists."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from twisted.internet.defer import Deferred, ensureDeferred

from objstore.blobs.reader import ChunkStream
from objstore.blobs.sidecar import record_from_sidecar
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.engine.changes import Caller
from objstore.engine.objects import (
    BlobFiles,
    ObjectAttrs,
    ObjectService,
    SourceChanged,
    VersionVanished,
)
from objstore.errors import S3Error
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.records import ObjectRecord, PartRef, WritePrecondition
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import ManualRunner, local_stores, run

T = TypeVar("T")
ALICE = Principal("u-alice", "alice", False, "AKALICE")


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[tuple[ObjectService, SyncMetaStore, BlobStore]]:
    stores = local_stores(tmp_path, buckets=["b"])
    service = ObjectService(stores.meta, stores.blobs, stores.io, clock=lambda: 2000.0)
    yield service, stores.sql, stores.blobs
    stores.close()


def stored_blob(blobs: BlobStore, data: bytes) -> str:
    blob_id = str(uuid.uuid4())
    blobs.commit_bytes(data, blob_id, {"kind": "part"})
    return blob_id


def composite_source(blobs: BlobStore, store: SyncMetaStore, checksum_type: str) -> bytes:
    chunks = [b"a" * 1000, b"b" * 10, b"c" * 333]
    refs = tuple(PartRef(n, stored_blob(blobs, chunk), len(chunk), hashlib.md5(chunk).hexdigest(),
                         {"crc32": f"p{n}=="})
                 for n, chunk in enumerate(chunks, start=1))
    store.put_object(ObjectRecord(
        bucket="b", key="multi", version_id="null", blob_id=None, size=1343,
        etag="feed-3", last_modified=5.0, parts=refs, checksums={"crc32": "whole=="},
        checksum_type=checksum_type,
    ))
    return b"".join(chunks)


def blob_files(blobs: BlobStore) -> set[str]:
    return {info.blob_id for info in blobs.iter_blobs()}


@pytest.mark.parametrize(("checksum_type", "carried"), [
    ("COMPOSITE", {}), ("FULL_OBJECT", {"crc32": "whole=="}),
])
def test_copy_of_a_composite_is_a_plain_object(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore], checksum_type: str,
    carried: dict[str, str],
) -> None:
    service, store, blobs = parts
    content = composite_source(blobs, store, checksum_type)
    source = store.get_object("b", "multi")
    assert source is not None
    copied = run(service.copy(Caller(ALICE), source, "b", "flat", ObjectAttrs()))
    assert copied.parts == () and copied.size == len(content)
    assert copied.etag == hashlib.md5(content).hexdigest()
    assert copied.checksums == carried
    assert copied.owner_name == "alice" and copied.last_modified == 2000.0
    assert copied.blob_id is not None
    assert blobs.blob_reader(copied.blob_id).read_all() == content
    sidecar = blobs.read_sidecar(copied.blob_id)
    assert sidecar["etag"] == copied.etag  # rewritten once the MD5 was known
    assert store.get_object("b", "flat") == copied


def test_copy_of_a_plain_object_keeps_etag_and_checksums(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore],
) -> None:
    service, store, blobs = parts
    blob_id = stored_blob(blobs, b"plain bytes")
    source = store.put_object(ObjectRecord(
        bucket="b", key="src", version_id="null", blob_id=blob_id, size=11, etag="not-an-md5",
        last_modified=5.0, checksums={"sha256": "s=="}, checksum_type="FULL_OBJECT",
    )).record
    copied = run(service.copy(Caller(ALICE), source, "b", "dst", ObjectAttrs(tags={"t": "1"})))
    assert copied.etag == "not-an-md5"  # kernel copy: the bytes are not hashed again
    assert copied.checksums == {"sha256": "s=="} and copied.tags == {"t": "1"}
    assert copied.blob_id not in (None, blob_id)
    assert copied.blob_id is not None
    rebuilt = record_from_sidecar(blobs.read_sidecar(copied.blob_id))
    assert rebuilt == replace(copied, is_latest=False, seq=0)


def test_a_failed_condition_leaves_no_blob(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore],
) -> None:
    service, store, blobs = parts
    blob_id = stored_blob(blobs, b"x")
    source = store.put_object(ObjectRecord(
        bucket="b", key="src", version_id="null", blob_id=blob_id, size=1,
        etag="e", last_modified=5.0,
    )).record
    before = blob_files(blobs)
    for precondition, code in [(WritePrecondition(if_absent=True), "PreconditionFailed"),
                               (WritePrecondition(if_match_etag="other"), "PreconditionFailed")]:
        with pytest.raises(S3Error) as caught:
            run(service.copy(Caller(ALICE), source, "b", "src", ObjectAttrs(), precondition))
        assert caught.value.code == code
    with pytest.raises(S3Error) as caught:
        run(service.copy(Caller(ALICE), source, "b", "absent", ObjectAttrs(),
                         WritePrecondition(if_match_etag="e")))
    assert caught.value.code == "NoSuchKey"
    assert blob_files(blobs) == before
    assert store.get_object("b", "src") == source


def test_a_vanished_source_blob_is_reported(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore],
) -> None:
    service, store, blobs = parts
    gone = ObjectRecord(bucket="b", key="src", version_id="null", blob_id=str(uuid.uuid4()),
                        size=3, etag="e", last_modified=5.0)
    with pytest.raises(SourceChanged):
        run(service.copy(Caller(ALICE), gone, "b", "dst", ObjectAttrs()))
    assert store.get_object("b", "dst") is None


def test_copy_into_a_missing_bucket(parts: tuple[ObjectService, SyncMetaStore, BlobStore]) -> None:
    service, _, _ = parts
    source = ObjectRecord(bucket="b", key="src", version_id="null", blob_id=None, size=0,
                          etag="e", last_modified=5.0)
    with pytest.raises(S3Error) as caught:
        run(service.copy(Caller(ALICE), replace(source), "nope", "dst", ObjectAttrs()))
    assert caught.value.code == "NoSuchBucket"


def test_the_hashed_copy_is_provisional_until_its_etag_is_known(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore], monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, store, blobs = parts
    composite_source(blobs, store, "COMPOSITE")
    source = store.get_object("b", "multi")
    assert source is not None
    kinds: list[tuple[str, str]] = []
    original = blobs.write_sidecar

    def spy(blob_id: str, sidecar: dict[str, Any]) -> None:
        kinds.append((sidecar["kind"], sidecar["etag"]))
        original(blob_id, sidecar)

    monkeypatch.setattr(blobs, "write_sidecar", spy)
    copied = run(service.copy(Caller(ALICE), source, "b", "flat", ObjectAttrs()))
    # `recover` skips the provisional kind, so a crash in between leaves only an orphan
    assert kinds == [("copy-in-progress", ""), ("object", copied.etag)]


# -- reads racing writes ------------------------------------------------------------------


def plain_object(blobs: BlobStore, store: SyncMetaStore, data: bytes,
                 key: str = "k") -> ObjectRecord:
    blob_id = stored_blob(blobs, data)
    return store.put_object(ObjectRecord(
        bucket="b", key=key, version_id="null", blob_id=blob_id, size=len(data),
        etag=hashlib.md5(data).hexdigest(), last_modified=5.0,
    )).record


def drain(stream: ChunkStream) -> bytes:
    chunks = []
    while (chunk := run_deferred(stream.next_chunk())) is not None:
        chunks.append(chunk)
    return b"".join(chunks)


def run_deferred(deferred: Deferred[T]) -> T:
    async def wait() -> T:
        return await deferred
    return run(wait())


def test_a_read_of_a_version_replaced_since_its_lookup_looks_again(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore],
) -> None:
    service, store, blobs = parts
    looked_up = plain_object(blobs, store, b"old bytes")
    newer = plain_object(blobs, store, b"new bytes")
    assert looked_up.blob_id is not None and newer.blob_id != looked_up.blob_id
    blobs.delete(looked_up.blob_id)  # what the overwrite does after its commit
    with pytest.raises(VersionVanished):
        run(service.read_bytes(looked_up, 0, 9))
    with pytest.raises(VersionVanished):
        run(service.stream(looked_up, 0, 9))
    store.delete_object_version("b", "k", "null")
    with pytest.raises(VersionVanished):  # deleted: the same answer, NoSuchKey comes next
        run(service.read_bytes(looked_up, 0, 9))


def test_a_blob_missing_under_its_row_is_an_internal_error(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore],
) -> None:
    service, store, blobs = parts
    record = plain_object(blobs, store, b"bytes")
    assert record.blob_id is not None
    blobs.delete(record.blob_id)
    for read in (service.read_bytes(record, 0, 5), service.stream(record, 0, 5)):
        with pytest.raises(S3Error) as caught:
            run(read)
        assert caught.value.code == "InternalError"


def test_a_started_stream_of_a_composite_outlives_its_delete(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore],
) -> None:
    service, store, blobs = parts
    content = composite_source(blobs, store, "COMPOSITE")
    record = store.get_object("b", "multi")
    assert record is not None
    stream = run(service.stream(record, 0, record.size))
    outcome = run(service.delete(Caller(ALICE), "b", "multi"))
    assert outcome.version_id is None and store.get_object("b", "multi") is None
    assert drain(stream) == content
    assert blob_files(blobs) == {p.blob_id for p in record.parts} - {record.parts[0].blob_id}
    stream.close()
    assert blob_files(blobs) == set()
    with pytest.raises(VersionVanished):  # a read that comes after the delete
        run(service.stream(record, 0, record.size))


def test_a_stream_within_one_part_holds_only_that_blob(
    parts: tuple[ObjectService, SyncMetaStore, BlobStore],
) -> None:
    service, store, blobs = parts
    composite_source(blobs, store, "COMPOSITE")
    record = store.get_object("b", "multi")
    assert record is not None
    stream = run(service.stream(record, 1000, 10))  # part 2 only
    run(service.delete(Caller(ALICE), "b", "multi"))
    assert blob_files(blobs) == set()
    assert drain(stream) == b"b" * 10  # read through the descriptor opened before
    stream.close()


# -- small reads: on the reactor from the page cache, on the IO pool from the disk ------


class RecordingPool:
    """The inline pool, naming what it ran (what the test's thread ran itself is not)."""

    name = "recording"

    def __init__(self) -> None:
        self.ran: list[str] = []

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> Deferred[Any]:
        self.ran.append(getattr(fn, "__name__", repr(fn)))
        return InlinePool().run(fn, *args, **kwargs)


def test_a_small_read_goes_to_the_io_pool_only_when_its_bytes_are_not_cached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stores = local_stores(tmp_path, buckets=["b"])
    pool = RecordingPool()
    service = ObjectService(stores.meta, stores.blobs, pool, clock=lambda: 2000.0)
    record = plain_object(stores.blobs, stores.sql, b"0123456789")
    asked: list[tuple[int, int]] = []
    cold = [False]

    def cached(fd: int, offset: int, count: int) -> bool:
        asked.append((offset, count))
        return not cold[0]

    monkeypatch.setattr("objstore.blobs.page_cache.cached", cached)
    assert run(service.read_bytes(record, 2, 5)) == b"23456" and pool.ran == []
    cold[0] = True  # the kernel's answer itself is tested in test_page_cache.py
    assert run(service.read_bytes(record, 2, 5)) == b"23456" and pool.ran == ["read_all"]
    assert asked == [(2, 5), (2, 5)]
    stores.close()


def test_small_bodies_that_arrive_together_are_committed_in_one_call(tmp_path: Path) -> None:
    """`BlobFiles.store`: a body kept in memory alone is committed at once; the ones that
    arrive meanwhile wait and go to the pool together (one call, one sync); a spooled
    body takes its own call, at once."""
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    runner = ManualRunner()
    files = BlobFiles(blobs, runner)

    def body(data: bytes, memory_limit: int = 1024) -> BodySpool:
        spool = BodySpool(blobs.tmp_dir, memory_limit=memory_limit)
        spool.write(data)
        return spool

    ids = [new_blob_id() for _ in range(4)]
    stored = [ensureDeferred(files.store(body(b"small %d" % n), ids[n], {"key": str(n)}))
              for n in range(3)]
    assert [(fn, len(args[0])) for fn, args, _ in runner.jobs] == [
        (blobs.commit_bytes_many, 1)]
    runner.step()
    assert [(fn, len(args[0])) for fn, args, _ in runner.jobs] == [
        (blobs.commit_bytes_many, 2)]
    stored.append(ensureDeferred(files.store(body(b"spooled" * 10, memory_limit=8),
                                             ids[3], {"key": "3"})))
    assert runner.jobs[1][0] == blobs.commit
    runner.step()
    runner.step()
    assert [run(d) for d in stored] == [None] * 4
    for n, blob_id in enumerate(ids[:3]):
        assert blobs.blob_reader(blob_id).read_all() == b"small %d" % n
        assert blobs.read_sidecar(blob_id)["key"] == str(n)
    assert blobs.blob_reader(ids[3]).read_all() == b"spooled" * 10


def test_sidecars_that_arrive_together_are_created_in_one_call(tmp_path: Path) -> None:
    """`BlobFiles.store_sidecar` (delete markers): one alone at once, the ones that arrive
    meanwhile together; a sidecar that exists is replaced."""
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    runner = ManualRunner()
    files = BlobFiles(blobs, runner)
    ids = [new_blob_id() for _ in range(3)]
    stored = [ensureDeferred(files.store_sidecar(blob_id, {"key": "first"}))
              for blob_id in ids]
    stored.append(ensureDeferred(files.store_sidecar(ids[0], {"key": "again"})))
    assert [(fn, len(args[0])) for fn, args, _ in runner.jobs] == [
        (blobs.create_sidecars_many, 1)]
    runner.step()
    assert [(fn, len(args[0])) for fn, args, _ in runner.jobs] == [
        (blobs.create_sidecars_many, 3)]
    runner.step()
    assert [run(d) for d in stored] == [None] * 4
    assert [blobs.read_sidecar(blob_id)["key"] for blob_id in ids] == [
        "again", "first", "first"]
