"""MultipartService in memory: SQLite in a temp dir, inline DB and IO pools, a real
BlobStore (fsync off). Covers the blob side of every operation (sidecars, no rewrite of
part bytes, which blobs go when), the races the store resolves, and that `objstore check`
and `objstore recover` understand what a completion leaves on disk."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from objstore.blobs.sidecar import record_from_sidecar
from objstore.blobs.store import BlobStore
from objstore.cli.check import check
from objstore.cli.recover import insert_objects, scan_sidecars
from objstore.engine.changes import Caller
from objstore.engine.multipart import (
    COMPOSITE,
    FULL_OBJECT,
    ChecksumMode,
    CompletionClaims,
    MultipartService,
    RequestedPart,
)
from objstore.engine.objects import ObjectAttrs
from objstore.errors import S3Error
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import (
    BucketRecord,
    ObjectRecord,
    PartRecord,
    PutResult,
    UploadRecord,
    WritePrecondition,
)
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import fails, local_stores, run

ALICE = Principal("u-alice", "alice", False, "AKALICE")
CALLER = Caller(ALICE)
MIB = 1024 * 1024


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


class HookedMeta(MetaStore):
    """A MetaStore that can run a hook just before complete_upload (to stage a race)."""

    before_complete: Any = None

    def complete_upload(self, upload_id: str, record: ObjectRecord,
                        precondition: WritePrecondition | None = None,
                        usage_check: Any = None) -> Deferred[PutResult]:
        hook, self.before_complete = self.before_complete, None
        if hook is not None:
            hook()
        return super().complete_upload(upload_id, record, precondition, usage_check)


@dataclass
class World:
    service: MultipartService
    meta: HookedMeta
    store: SyncMetaStore
    blobs: BlobStore
    tmp: Path

    def body(self, data: bytes) -> BodySpool:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=64 * 1024,
                          checksum_algorithms=["crc32"])
        spool.write(data)
        return spool

    def create(self, key: str = "k", mode: ChecksumMode = ChecksumMode()) -> UploadRecord:
        return run(self.service.create(Caller(ALICE), "b", key, ObjectAttrs(content_type="text/x"),
                                       mode))

    def put(self, upload: UploadRecord, number: int, data: bytes,
            claimed: dict[str, str] | None = None) -> PartRecord:
        return run(self.service.upload_part(CALLER, upload, number, self.body(data), claimed or {}))

    def data_files(self) -> set[str]:
        return {i.blob_id for i in self.blobs.iter_blobs() if i.size >= 0}

    def sidecar_only(self) -> set[str]:
        return {i.blob_id for i in self.blobs.iter_blobs() if i.size < 0}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    stores = local_stores(tmp_path, buckets=["b"])
    store, blobs = stores.sql, stores.blobs
    meta = HookedMeta(store, SyncDbPool())
    ticks = iter(range(2000, 100000))
    service = MultipartService(meta, blobs, InlinePool(), clock=lambda: float(next(ticks)))
    yield World(service, meta, store, blobs, tmp_path)
    store.close()


def asked(part: PartRecord, **checksums: str) -> RequestedPart:
    return RequestedPart(part.part_number, f'"{part.etag}"', checksums)


# -- parts ------------------------------------------------------------------------------


def test_a_part_is_a_blob_with_a_part_sidecar(world: World) -> None:
    upload = world.create()
    data = os.urandom(200 * 1024)  # spilled to a spool file, renamed into place
    part = world.put(upload, 7, data)
    assert part.etag == hashlib.md5(data).hexdigest() and part.size == len(data)
    assert world.blobs.blob_reader(part.blob_id).read_all() == data
    sidecar = world.blobs.read_sidecar(part.blob_id)
    assert (sidecar["kind"], sidecar["upload_id"], sidecar["part_number"]) == (
        "part", upload.upload_id, 7)
    assert world.store.list_parts(upload.upload_id) == [part]


def test_replacing_a_part_deletes_the_old_blob_after_commit(world: World) -> None:
    upload = world.create()
    first = world.put(upload, 1, b"first")
    second = world.put(upload, 1, b"second")
    assert world.data_files() == {second.blob_id}
    assert world.store.list_parts(upload.upload_id) == [second]
    assert first.blob_id not in world.data_files()


def test_the_uploads_checksum_is_computed_when_not_sent(world: World) -> None:
    upload = world.create(mode=ChecksumMode("crc32", COMPOSITE))
    part = world.put(upload, 1, b"abc")
    assert part.checksums == {"crc32": crc32_b64(b"abc")}
    assert world.blobs.read_sidecar(part.blob_id)["checksums"] == part.checksums


def test_a_part_checksum_of_another_algorithm_is_refused(world: World) -> None:
    upload = world.create(mode=ChecksumMode("sha256", COMPOSITE))
    error = fails(world.service.upload_part(CALLER, upload, 1, world.body(b"x"), {"crc32": "x"}))
    assert error.code == "InvalidRequest" and "mismatch" in error.message
    assert world.data_files() == set()


def test_a_part_for_an_upload_that_vanished_leaves_nothing(world: World) -> None:
    upload = world.create()
    world.store.delete_upload(upload.upload_id)
    error = fails(world.service.upload_part(CALLER, upload, 1, world.body(b"late"), {}))
    assert error.code == "NoSuchUpload"
    assert world.data_files() == set()


def test_copy_part_of_a_range_across_a_composite(world: World) -> None:
    source_upload = world.create("src")
    a, b = os.urandom(5 * MIB), os.urandom(1000)
    parts = [world.put(source_upload, 1, a), world.put(source_upload, 2, b)]
    source = run(world.service.complete(CALLER, source_upload, [asked(p) for p in parts],
                                        CompletionClaims()))
    upload = world.create("dst", ChecksumMode("crc32", FULL_OBJECT))
    start, length = 5 * MIB - 10, 510
    copied = run(world.service.copy_part(CALLER, upload, 3, source, (start, length)))
    expected = (a + b)[start:start + length]
    assert copied.etag == hashlib.md5(expected).hexdigest() and copied.size == length
    assert copied.checksums == {"crc32": crc32_b64(expected)}
    assert world.blobs.blob_reader(copied.blob_id).read_all() == expected
    sidecar = world.blobs.read_sidecar(copied.blob_id)
    assert (sidecar["etag"], sidecar["checksums"]) == (copied.etag, copied.checksums)
    whole = run(world.service.copy_part(CALLER, upload, 4, source, None))
    assert whole.size == source.size


# -- completion -------------------------------------------------------------------------


def test_complete_references_parts_without_rewriting_them(world: World) -> None:
    upload = world.create()
    datas = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(10)]
    parts = [world.put(upload, n, d) for n, d in enumerate(datas, start=1)]
    unlisted = world.put(upload, 9, b"never listed")
    files_before = world.data_files()
    record = run(world.service.complete(CALLER, upload, [asked(p) for p in parts],
                                        CompletionClaims()))
    assert world.data_files() == files_before - {unlisted.blob_id}  # no byte rewritten
    assert world.sidecar_only() == {record.blob_id}
    assert record_from_sidecar(world.blobs.read_sidecar(str(record.blob_id))) == \
        record.__class__(**{**record.__dict__, "is_latest": False, "seq": 0})
    assert [p.blob_id for p in record.parts] == [p.blob_id for p in parts]
    assert record.size == sum(map(len, datas)) and record.etag.endswith("-3")
    assert (record.owner_name, record.content_type) == ("alice", "text/x")
    assert world.store.get_upload(upload.upload_id) is None
    assert fails(world.service.upload(
        "b", "k", upload.upload_id)).code == "NoSuchUpload"


def test_a_refused_completion_changes_nothing(world: World) -> None:
    upload = world.create()
    parts = [world.put(upload, 1, b"tiny"), world.put(upload, 2, b"last")]
    error = fails(world.service.complete(CALLER, upload, [asked(p) for p in parts],
                                         CompletionClaims()))
    assert error.code == "EntityTooSmall"
    assert world.sidecar_only() == set()
    assert world.store.list_parts(upload.upload_id) == parts


def test_a_failed_precondition_keeps_the_upload(world: World) -> None:
    world.store.put_object(ObjectRecord("b", "k", "null", None, 0, "e", 1.0,
                                        is_delete_marker=False))
    upload = world.create()
    part = world.put(upload, 1, b"data")
    error = fails(world.service.complete(CALLER, upload, [asked(part)], CompletionClaims(),
                                         WritePrecondition(if_absent=True)))
    assert (error.code, error.status) == ("PreconditionFailed", 412)
    error = fails(world.service.complete(CALLER, upload, [asked(part)], CompletionClaims(),
                                         WritePrecondition(if_match_etag="nope")))
    assert error.code == "PreconditionFailed"
    assert world.sidecar_only() == set()
    world.store.delete_object_version("b", "k", "null")
    error = fails(world.service.complete(CALLER, upload, [asked(part)], CompletionClaims(),
                                         WritePrecondition(if_match_etag="e")))
    assert (error.code, error.status) == ("NoSuchKey", 404)
    assert world.store.list_parts(upload.upload_id) == [part]


def test_a_part_replaced_during_completion_is_reread(world: World) -> None:
    upload = world.create()
    part = world.put(upload, 1, b"same bytes")
    replacement: list[PartRecord] = []
    world.meta.before_complete = lambda: replacement.append(world.put(upload, 1, b"same bytes"))
    record = run(world.service.complete(CALLER, upload, [asked(part)], CompletionClaims()))
    assert [p.blob_id for p in record.parts] == [replacement[0].blob_id]
    assert world.data_files() == {replacement[0].blob_id}


def test_a_part_replaced_with_other_bytes_during_completion(world: World) -> None:
    upload = world.create()
    part = world.put(upload, 1, b"old bytes")
    world.meta.before_complete = lambda: world.put(upload, 1, b"new bytes")
    assert fails(world.service.complete(CALLER, upload, [asked(part)], CompletionClaims())).code \
        == "InvalidPart"
    assert world.sidecar_only() == set()
    assert world.store.get_object("b", "k") is None


def test_an_abort_during_completion_wins_cleanly(world: World) -> None:
    upload = world.create()
    part = world.put(upload, 1, b"bytes")
    world.meta.before_complete = lambda: run(world.service.abort(CALLER, upload))
    assert fails(world.service.complete(CALLER, upload, [asked(part)], CompletionClaims())).code \
        == "NoSuchUpload"
    assert world.data_files() == set() and world.sidecar_only() == set()
    assert world.store.get_object("b", "k") is None


def test_a_completion_whose_commit_was_retried_keeps_its_sidecar(world: World) -> None:
    """A lost connection during COMMIT re-runs the transaction, which then finds the upload
    gone: the object it stored is this completion's, and its sidecar must stay."""
    upload = world.create()
    part = world.put(upload, 1, b"bytes")
    original = world.store.complete_upload

    def commit_then_fail(upload_id: str, record: ObjectRecord,
                         precondition: WritePrecondition | None = None,
                         usage_check: Any = None) -> PutResult:
        original(upload_id, record, precondition, usage_check)
        return original(upload_id, record, precondition, usage_check)

    world.store.complete_upload = commit_then_fail  # type: ignore[method-assign]
    record = run(world.service.complete(CALLER, upload, [asked(part)], CompletionClaims()))
    assert world.sidecar_only() == {record.blob_id}
    assert world.store.get_object("b", "k") == record


def test_full_object_checksum_and_claims(world: World) -> None:
    upload = world.create(mode=ChecksumMode("crc32", FULL_OBJECT))
    datas = [os.urandom(5 * MIB), b"tail"]
    parts = [world.put(upload, n, d, {"crc32": crc32_b64(d)})
             for n, d in enumerate(datas, start=1)]
    whole = crc32_b64(b"".join(datas))
    wrong = CompletionClaims(checksums={"crc32": crc32_b64(b"other")})
    assert fails(world.service.complete(CALLER, upload, [asked(p) for p in parts], wrong)).code \
        == "BadDigest"
    claims = CompletionClaims(checksums={"crc32": whole}, checksum_type="FULL_OBJECT",
                              object_size=5 * MIB + 4)
    record = run(world.service.complete(CALLER, upload, [asked(p) for p in parts], claims))
    assert (record.checksums, record.checksum_type) == ({"crc32": whole}, "FULL_OBJECT")


def test_abort_deletes_the_part_blobs(world: World) -> None:
    upload = world.create()
    world.put(upload, 1, b"a")
    world.put(upload, 2, b"b")
    run(world.service.abort(CALLER, upload))
    assert world.data_files() == set()
    assert world.store.get_upload(upload.upload_id) is None


# -- listing uploads --------------------------------------------------------------------


def test_list_uploads_groups_before_the_cut(world: World) -> None:
    ids = {}
    for key in ["a/1", "a/2", "a/3", "b", "c/x/1", "c/y", "d"]:
        ids[key] = world.create(key).upload_id
    second_b = world.create("b").upload_id

    def listing(**kw: Any) -> Any:
        args = dict(prefix="", delimiter="", key_marker="", upload_id_marker="",
                    max_uploads=1000)
        args.update(kw)
        return run(world.service.list_uploads("b", **args))

    page = listing(delimiter="/", max_uploads=3)
    assert page.common_prefixes == ["a/"] and [u.key for u in page.uploads] == ["b", "b"]
    assert page.is_truncated
    assert (page.next_key_marker, page.next_upload_id_marker) == ("b", second_b)
    page = listing(delimiter="/", key_marker="b", upload_id_marker=second_b)
    assert page.common_prefixes == ["c/"] and [u.key for u in page.uploads] == ["d"]
    assert not page.is_truncated
    page = listing(delimiter="/", key_marker="a/")  # a NextKeyMarker that was a group
    assert page.common_prefixes == ["c/"]
    page = listing(prefix="c/", delimiter="/")
    assert page.common_prefixes == ["c/x/"] and [u.key for u in page.uploads] == ["c/y"]
    page = listing(key_marker="b", upload_id_marker=ids["b"])
    assert [u.upload_id for u in page.uploads][:1] == [second_b]
    assert listing(max_uploads=0).uploads == [] and not listing(max_uploads=0).is_truncated
    everything = listing(max_uploads=1)
    assert everything.is_truncated and [u.key for u in everything.uploads] == ["a/1"]


def test_list_uploads_of_a_missing_bucket(world: World) -> None:
    error = fails(world.service.list_uploads("nope", prefix="", delimiter="", key_marker="",
                                             upload_id_marker="", max_uploads=10))
    assert error.code == "NoSuchBucket"


# -- check and recover ------------------------------------------------------------------


def test_check_counts_open_and_completed_uploads_as_referenced(world: World) -> None:
    done = world.create("done")
    run(world.service.complete(CALLER, done, [asked(world.put(done, 1, b"x"))], CompletionClaims()))
    world.put(world.create("open"), 1, b"y")
    report = check(world.store, world.blobs, repair=False, deep=True, orphan_grace_seconds=0)
    assert report.problems() == 0, report
    report = check(world.store, world.blobs, repair=True, deep=False, orphan_grace_seconds=0)
    assert report.repaired == 0
    assert len(world.data_files()) == 2 and len(world.sidecar_only()) == 1


def test_recover_rebuilds_a_completed_multipart_object(world: World, tmp_path: Path) -> None:
    upload = world.create()
    datas = [os.urandom(5 * MIB), b"end"]
    parts = [world.put(upload, n, d) for n, d in enumerate(datas, start=1)]
    record = run(world.service.complete(CALLER, upload, [asked(p) for p in parts],
                                        CompletionClaims()))
    fresh = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "fresh.db"), None, 2))
    fresh.migrate()
    fresh.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    assert insert_objects(fresh, world.blobs, scan_sidecars(world.blobs).winners)[0] == 1
    rebuilt = fresh.get_object("b", "k")
    assert rebuilt is not None
    assert rebuilt.__class__(**{**rebuilt.__dict__, "seq": record.seq}) == record
    fresh.close()


def test_completion_on_a_versioned_bucket_adds_a_version(world: World) -> None:
    world.store.put_object(ObjectRecord("b", "k", "v-old", "old-blob", 1, "e", 1.0))
    world.store.update_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0,
                                           versioning="Enabled"))
    upload = world.create()
    record = run(world.service.complete(CALLER, upload, [asked(world.put(upload, 1, b"x"))],
                                        CompletionClaims()))
    assert record.version_id not in ("null", "v-old") and record.is_latest
    assert [v.version_id for v in world.store.list_versions("b")] == [record.version_id,
                                                                      "v-old"]


# -- a client that goes away during a commit ---------------------------------------------


def test_shielded_work_finishes_after_the_request_is_cancelled() -> None:
    from objstore.http.shield import shielded

    gate: Deferred[str] = Deferred()
    finished: list[str] = []

    async def commit() -> str:
        value = await gate
        finished.append(value)
        return value

    request = Deferred.fromCoroutine(shielded(commit()))
    outcomes: list[Any] = []
    request.addBoth(outcomes.append)
    request.cancel()  # the client disconnected
    assert outcomes and outcomes[0].check(Exception) is not None
    assert finished == []
    gate.callback("committed")
    assert finished == ["committed"]  # the work ran to its end regardless


def test_shielded_passes_results_and_errors_through() -> None:
    from objstore.http.shield import shielded

    async def ok() -> int:
        return 7

    async def refused() -> int:
        raise S3Error("NoSuchUpload")

    assert run(shielded(ok())) == 7
    assert fails(shielded(refused())).code == "NoSuchUpload"
