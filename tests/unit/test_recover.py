"""`objstore recover`'s rules on what the engine leaves on the data volume, in memory:
SQLite in a temp dir, inline pools, a real BlobStore (fsync off). A crash is staged by
making the step after a commit (removing files) do nothing, then the database is rebuilt
from the volume into a fresh one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore
from objstore.cli.check import check
from objstore.cli.recover import Scan, keep_newer_part, open_uploads, rebuild
from objstore.engine.changes import Caller
from objstore.engine.multipart import (
    ChecksumMode,
    CompletionClaims,
    MultipartService,
    RequestedPart,
)
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.engine.versioning import KeyLocks
from objstore.engine.versions import VersionService
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, PartRecord, UploadRecord
from objstore.meta.store import RowChanged, SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run

CALLER = Caller(Principal("u-alice", "alice", False, "AKALICE"))
MIB = 1024 * 1024


@dataclass
class Node:
    objects: ObjectService
    multipart: MultipartService
    store: SyncMetaStore
    blobs: BlobStore
    tmp: Path

    def body(self, data: bytes) -> BodySpool:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=64 * 1024)
        spool.write(data)
        return spool

    def put(self, key: str, data: bytes, bucket: str = "b") -> None:
        run(self.objects.put(CALLER, bucket, key, self.body(data), ObjectAttrs()))

    def upload(self, key: str, *sizes: int) -> tuple[UploadRecord, list[PartRecord]]:
        upload = run(self.multipart.create(CALLER, "b", key, ObjectAttrs(), ChecksumMode()))
        parts = [run(self.multipart.upload_part(CALLER, upload, n, self.body(os.urandom(s)), {}))
                 for n, s in enumerate(sizes, start=1)]
        return upload, parts

    def complete(self, upload: UploadRecord, parts: list[PartRecord]) -> None:
        asked = [RequestedPart(p.part_number, p.etag) for p in parts]
        run(self.multipart.complete(CALLER, upload, asked, CompletionClaims()))

    def recovered(self) -> SyncMetaStore:
        """A fresh database rebuilt from this node's data volume."""
        fresh = SyncMetaStore(create_db_engine("sqlite", str(self.tmp / "fresh.db"), None, 2))
        fresh.migrate()
        fresh.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
        fresh.create_bucket(BucketRecord("v", "u-root", "us-east-1", 1.0, "Enabled"))
        rebuild(fresh, self.blobs, ControlRecord(str(self.tmp / "data"), fsync=False),
                "us-east-1")
        return fresh


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2))
    store.migrate()
    store.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    store.create_bucket(BucketRecord("v", "u-root", "us-east-1", 1.0, "Enabled"))
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    meta = MetaStore(store, SyncDbPool())
    clock = iter(range(1000, 1_000_000)).__next__
    objects = ObjectService(meta, blobs, InlinePool(), clock=lambda: float(clock()))
    multipart = MultipartService(meta, blobs, InlinePool(), clock=lambda: float(clock()))
    yield Node(objects, multipart, store, blobs, tmp_path)
    store.close()


def crash_before_files_go(monkeypatch: pytest.MonkeyPatch, blobs: BlobStore,
                          *, upload_records: bool = False) -> None:
    """Every removal of blobs after a commit is lost, as if the process died right after
    it (and of the upload record, which a completion removes after its commit)."""
    names = ["delete", "delete_version"] + (["remove_upload_record"] if upload_records else [])
    for name in names:
        monkeypatch.setattr(blobs, name, lambda *args, **kwargs: None)


def test_a_tag_change_comes_back_with_its_stamp(node: Node) -> None:
    node.put("tagged", b"abc")
    versions = VersionService(MetaStore(node.store, SyncDbPool()), node.blobs, InlinePool(),
                              clock=lambda: 5000.0, locks=KeyLocks())
    changed = run(versions.put_tags(CALLER, "b", "tagged", None, {"team": "x"}))
    assert changed.tags_updated_at == 5000.0
    node.put("plain", b"def")
    fresh = node.recovered()
    tagged, plain = fresh.get_object("b", "tagged"), fresh.get_object("b", "plain")
    assert tagged is not None and plain is not None
    assert (tagged.tags, tagged.tags_updated_at) == ({"team": "x"}, 5000.0)
    assert plain.tags_updated_at is None
    fresh.close()


def test_open_uploads_come_back_with_their_parts(node: Node) -> None:
    upload, parts = node.upload("big", 5 * MIB, 100)
    fresh = node.recovered()
    reopened = fresh.get_upload(upload.upload_id)
    assert reopened is not None and (reopened.bucket, reopened.key) == ("b", "big")
    assert fresh.list_parts(upload.upload_id) == parts
    fresh.close()


def test_a_recovered_upload_can_be_completed(node: Node) -> None:
    upload, parts = node.upload("big", 5 * MIB, 100)
    fresh = node.recovered()
    node.store, node.multipart = fresh, MultipartService(
        MetaStore(fresh, SyncDbPool()), node.blobs, InlinePool(), clock=lambda: 5000.0)
    node.complete(upload, parts)
    record = fresh.get_object("b", "big")
    assert record is not None and [p.blob_id for p in record.parts] == [
        p.blob_id for p in parts]
    fresh.close()


def test_the_newer_of_a_part_uploaded_twice_wins(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload, _ = node.upload("k", 10)
    crash_before_files_go(monkeypatch, node.blobs)
    newer = run(node.multipart.upload_part(CALLER, upload, 1, node.body(b"second"), {}))
    fresh = node.recovered()
    assert fresh.list_parts(upload.upload_id) == [newer]
    fresh.close()


def test_an_aborted_upload_stays_aborted(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    upload, _ = node.upload("k", 10)
    crash_before_files_go(monkeypatch, node.blobs)  # its parts' files outlive the abort
    run(node.multipart.abort(CALLER, upload))
    fresh = node.recovered()
    assert fresh.get_upload(upload.upload_id) is None
    fresh.close()


def test_a_completed_upload_is_not_reopened_even_with_its_record_left(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload, parts = node.upload("k", 5 * MIB, 10, 20)
    crash_before_files_go(monkeypatch, node.blobs, upload_records=True)  # + unused part 3
    node.complete(upload, parts[:2])
    assert node.blobs.upload_record_ids() == [upload.upload_id]
    fresh = node.recovered()
    assert fresh.get_upload(upload.upload_id) is None
    record = fresh.get_object("b", "k")
    assert record is not None and len(record.parts) == 2
    fresh.close()


@pytest.mark.parametrize("multipart", [False, True])
def test_a_deleted_object_whose_files_outlived_the_delete_stays_deleted(
    node: Node, monkeypatch: pytest.MonkeyPatch, multipart: bool
) -> None:
    if multipart:
        node.complete(*node.upload("gone", 5 * MIB, 10))
    else:
        node.put("gone", b"deleted bytes")
    node.put("kept", b"kept bytes")
    crash_before_files_go(monkeypatch, node.blobs)
    run(node.objects.delete(CALLER, "b", "gone"))
    fresh = node.recovered()
    assert fresh.get_object("b", "gone") is None
    assert fresh.get_object("b", "kept") is not None
    fresh.close()


def test_a_small_write_a_crash_tore_before_its_sync_is_not_rebuilt(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """A small body's blob and sidecar are written in one sync (blobs/store.py
    `commit_bytes`); a power loss before it can leave the sidecar whole and the blob not.
    That write was never answered: recover skips it (its files are an orphan) and keeps
    the whole ones, small and spooled."""
    node.put("whole", b"whole bytes")
    node.put("spooled", os.urandom(100 * 1024))  # past the spool's memory: no check
    node.put("torn", b"the bytes that were being written")
    torn = node.store.get_object("b", "torn")
    assert torn is not None and torn.blob_id is not None
    os.truncate(node.blobs.blob_path(torn.blob_id), 3)  # the pages that reached the disk
    fresh = node.recovered()
    assert fresh.get_object("b", "torn") is None
    whole, spooled = fresh.get_object("b", "whole"), fresh.get_object("b", "spooled")
    assert whole is not None and whole.size == len(b"whole bytes")
    assert spooled is not None and spooled.size == 100 * 1024
    assert f"blob {torn.blob_id} is not the one its sidecar was written with" in (
        capsys.readouterr().err)
    fresh.close()


def test_a_delete_marker_a_crash_tore_before_its_sync_is_not_rebuilt(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """A delete marker's sidecar is created at its final name and synced once
    (`create_sidecar`); a power loss before that sync can leave part of it. That delete
    was never answered: recover skips the torn document and the version it would have
    hidden stays the latest."""
    node.put("k", b"bytes", bucket="v")
    run(node.objects.delete(CALLER, "v", "k", None))
    versions = node.store.list_versions("v", "k")
    marker = next(r for r in versions if r.is_delete_marker)
    assert marker.blob_id is not None
    path = node.blobs.sidecar_path(marker.blob_id)
    os.truncate(path, os.path.getsize(path) // 2)
    fresh = node.recovered()
    latest = fresh.get_object("v", "k")
    assert latest is not None and not latest.is_delete_marker and latest.size == 5
    assert [r.is_delete_marker for r in fresh.list_versions("v", "k")] == [False]
    assert f"unreadable sidecar of {marker.blob_id}" in capsys.readouterr().err
    fresh.close()


def test_a_version_deleted_by_id_stays_deleted(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.put("k", b"first", bucket="v")
    first = node.store.list_versions("v", "k")[0]
    node.put("k", b"second", bucket="v")
    second = node.store.get_object("v", "k")
    assert second is not None and second.version_id != first.version_id
    crash_before_files_go(monkeypatch, node.blobs)
    run(node.objects.delete(CALLER, "v", "k", first.version_id))
    fresh = node.recovered()
    assert [r.version_id for r in fresh.list_versions("v", "k")] == [second.version_id]
    fresh.close()


def test_a_delete_that_did_not_commit_keeps_its_sidecar(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.put("k", b"bytes")
    record = node.store.get_object("b", "k")
    assert record is not None and record.blob_id is not None
    original = node.store.delete_object_versions

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError("database or disk is full")

    monkeypatch.setattr(node.store, "delete_object_versions", refused)
    with pytest.raises(OSError):
        run(node.objects.delete(CALLER, "b", "k"))
    assert os.path.exists(node.blobs.sidecar_path(record.blob_id))
    monkeypatch.setattr(node.store, "delete_object_versions", original)
    fresh = node.recovered()
    assert fresh.get_object("b", "k") is not None
    fresh.close()


def test_a_delete_guarded_against_a_changed_row_keeps_the_changed_sidecar(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.put("k", b"bytes")
    record = node.store.get_object("b", "k")
    assert record is not None and record.blob_id is not None
    calls: list[int] = []
    original = node.store.delete_object_versions

    def changed_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            return [RowChanged("b/k")]  # the item's outcome: changed since it was read
        return original(*args, **kwargs)

    monkeypatch.setattr(node.store, "delete_object_versions", changed_once)
    sidecars: list[str] = []
    write_sidecar = node.blobs.write_sidecar
    monkeypatch.setattr(node.blobs, "write_sidecar",
                        lambda blob_id, data: (sidecars.append(blob_id),
                                               write_sidecar(blob_id, data)))
    run(node.objects.delete(CALLER, "b", "k"))
    assert sidecars == [record.blob_id] and len(calls) == 2  # written back, then retried
    assert node.store.get_object("b", "k") is None
    assert not os.path.exists(node.blobs.sidecar_path(record.blob_id))


def test_an_upload_refused_at_creation_leaves_no_record(node: Node) -> None:
    with pytest.raises(Exception):  # noqa: B017 - NoSuchBucket, as an S3Error
        run(node.multipart.create(CALLER, "missing", "k", ObjectAttrs(), ChecksumMode()))
    assert node.blobs.upload_record_ids() == []


def test_check_reports_and_rewrites_a_missing_upload_record(node: Node) -> None:
    upload, _ = node.upload("k", 10)
    os.unlink(node.blobs.upload_record_path(upload.upload_id))
    report = check(node.store, node.blobs, repair=False, deep=False, orphan_grace_seconds=0)
    assert report.missing_sidecars == [f"upload {upload.upload_id} of b/k"]
    check(node.store, node.blobs, repair=True, deep=False, orphan_grace_seconds=0)
    assert node.blobs.upload_record_ids() == [upload.upload_id]
    assert check(node.store, node.blobs, repair=False, deep=False,
                 orphan_grace_seconds=0).problems() == 0


def test_check_removes_the_record_of_an_upload_that_is_not_open(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload, parts = node.upload("k", 10)
    with monkeypatch.context() as patch:
        patch.setattr(node.blobs, "remove_upload_record", lambda upload_id: None)
        node.complete(upload, parts)
    report = check(node.store, node.blobs, repair=False, deep=False, orphan_grace_seconds=0)
    assert report.orphans == [f"record of upload {upload.upload_id}"]
    check(node.store, node.blobs, repair=True, deep=False, orphan_grace_seconds=0)
    assert node.blobs.upload_record_ids() == []


# -- the pure rules ---------------------------------------------------------------------


def part(upload_id: str, number: int, blob_id: str, modified: float) -> PartRecord:
    return PartRecord(upload_id, number, blob_id, 1, "e", modified)


def test_per_part_number_the_newest_sidecar_wins_whatever_the_order() -> None:
    for order in ([("old", 1.0), ("new", 2.0)], [("new", 2.0), ("old", 1.0)]):
        scan = Scan()
        for blob_id, modified in order:
            keep_newer_part(scan, part("u", 1, blob_id, modified))
        assert scan.parts[("u", 1)].blob_id == "new"
        assert scan.part_owners == {"old": "u", "new": "u"}


def test_open_uploads_skip_completed_ones_and_order_parts() -> None:
    uploads = {u: UploadRecord(u, "b", "k", 1.0) for u in ("u1", "u2", "u3")}
    parts = {("u1", 2): part("u1", 2, "b2", 1.0), ("u1", 1): part("u1", 1, "b1", 1.0),
             ("u2", 1): part("u2", 1, "c1", 1.0)}
    reopened = open_uploads(uploads, parts, completed={"u2"})
    assert [(u.upload_id, [p.part_number for p in ps]) for u, ps in reopened] == [
        ("u1", [1, 2]), ("u3", [])]


def test_recovered_usage_counters_equal_the_original(node: Node) -> None:
    node.put("one", b"abc")
    node.put("one", b"abcdef")  # an overwrite: one version counted
    node.put("two", b"x" * 100, bucket="v")
    node.put("two", b"y" * 50, bucket="v")  # versioned: both count
    upload, parts = node.upload("big", 5 * MIB, 100)
    node.complete(upload, parts)
    fresh = node.recovered()
    try:
        for bucket in ("b", "v"):
            assert fresh.bucket_usage(bucket) == node.store.bucket_usage(bucket)
        assert fresh.bucket_usage("b") == (2, 6 + 5 * MIB + 100)
        assert fresh.bucket_usage("v") == (2, 150)
        assert fresh.storage_totals()[1:] == node.store.storage_totals()[1:]
    finally:
        fresh.close()
