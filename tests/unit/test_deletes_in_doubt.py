"""A permanent delete's withdrawn sidecar (`deleting/`) and how a delete left in doubt is
resolved: the file rules of BlobStore (withdraw, reinstate, put back, settle) and what the
engine, `objstore check` and `recover` make of them. SQLite in a temp dir, inline pools, a
real BlobStore (fsync off); a kill is staged by leaving the files as the step it stopped
left them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.cli.check import check, resolve_withdrawn
from objstore.cli.recover import rebuild
from objstore.engine.changes import Caller
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run

CALLER = Caller(Principal("u-alice", "alice", False, "AKALICE"))


# -- the file rules ------------------------------------------------------------------------
@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    store = BlobStore(str(tmp_path / "data"), fsync=False)
    store.prepare()
    return store


def stored(blobs: BlobStore, data: bytes = b"bytes", **sidecar: Any) -> str:
    blob_id = new_blob_id()
    blobs.commit_bytes(data, blob_id, {"kind": "object", "bucket": "b", "key": "k",
                                       "version_id": "null", **sidecar})
    return blob_id


def test_withdrawal_moves_the_sidecar_aside_and_keeps_the_bytes(blobs: BlobStore) -> None:
    blob_id = stored(blobs)
    blobs.withdraw_sidecar(blob_id)
    assert not os.path.exists(blobs.sidecar_path(blob_id))
    assert blobs.withdrawn_ids() == [blob_id]
    assert blobs.read_withdrawn(blob_id)["key"] == "k"
    assert blobs.blob_size(blob_id) == 5
    assert [(i.blob_id, i.has_sidecar) for i in blobs.iter_blobs()] == [(blob_id, False)]


def test_withdrawing_a_missing_sidecar_does_nothing(blobs: BlobStore) -> None:
    blobs.withdraw_sidecar(new_blob_id())
    assert blobs.withdrawn_ids() == []


def test_reinstating_writes_the_row_s_sidecar_and_drops_the_withdrawn_one(
        blobs: BlobStore) -> None:
    blob_id = stored(blobs)
    blobs.withdraw_sidecar(blob_id)
    blobs.reinstate_sidecar(blob_id, {"kind": "object", "key": "from the row"})
    assert blobs.read_sidecar(blob_id)["key"] == "from the row"
    assert blobs.withdrawn_ids() == []


def test_putting_back_restores_the_sidecar_but_never_over_one_in_place(
        blobs: BlobStore) -> None:
    blob_id = stored(blobs)
    blobs.withdraw_sidecar(blob_id)
    blobs.put_back_withdrawn(blob_id)
    assert blobs.read_sidecar(blob_id)["key"] == "k" and blobs.withdrawn_ids() == []
    blobs.withdraw_sidecar(blob_id)
    blobs.write_sidecar(blob_id, {"kind": "object", "key": "newer"})
    blobs.put_back_withdrawn(blob_id)
    assert blobs.read_sidecar(blob_id)["key"] == "newer" and blobs.withdrawn_ids() == []


def test_removing_the_version_s_files_ends_its_withdrawal(blobs: BlobStore) -> None:
    blob_id = stored(blobs)
    blobs.withdraw_sidecar(blob_id)
    blobs.delete_version(blob_id)
    assert blobs.withdrawn_ids() == [] and list(blobs.iter_blobs()) == []


def test_settling_puts_back_what_a_row_holds_and_removes_the_rest(blobs: BlobStore) -> None:
    kept, gone, unknown = stored(blobs), stored(blobs), stored(blobs)
    parts = [stored(blobs, kind="part"), stored(blobs, kind="part")]
    composite = new_blob_id()
    blobs.write_sidecar(composite, {"kind": "object", "parts": [
        {"blob_id": part, "size": 5} for part in parts]})
    for blob_id in (kept, gone, unknown, composite):
        blobs.withdraw_sidecar(blob_id)
    verdicts = {kept: True, gone: False, unknown: None, composite: False}
    settled = blobs.settle_withdrawn(lambda blob_id, _sidecar: verdicts[blob_id])
    assert settled.put_back == [kept]
    assert sorted(settled.finished) == sorted([gone, composite])
    assert settled.unresolved == [unknown]
    assert os.path.exists(blobs.sidecar_path(kept))
    assert blobs.blob_size(gone) is None and blobs.blob_size(kept) == 5
    assert all(blobs.blob_size(part) is None for part in parts)
    assert blobs.withdrawn_ids() == [unknown]


def test_settling_leaves_young_and_unreadable_withdrawals(blobs: BlobStore) -> None:
    young, torn = stored(blobs), new_blob_id()
    blobs.withdraw_sidecar(young)
    with open(blobs.withdrawn_path(torn), "wb") as handle:
        handle.write(b"{not json")
    asked: list[str] = []
    settled = blobs.settle_withdrawn(lambda blob_id, _s: asked.append(blob_id) or False,
                                     older_than=time.time() - 3600)
    assert asked == [] and settled.unresolved == []  # neither is old enough
    settled = blobs.settle_withdrawn(lambda blob_id, _s: asked.append(blob_id) or False)
    assert asked == [young] and settled.unresolved == [torn]


# -- the engine, check and recover ---------------------------------------------------------
@dataclass
class Node:
    objects: ObjectService
    store: SyncMetaStore
    blobs: BlobStore
    tmp: Path

    def put(self, key: str, data: bytes) -> ObjectRecord:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=64 * 1024)
        spool.write(data)
        run(self.objects.put(CALLER, "b", key, spool, ObjectAttrs()))
        record = self.store.get_object("b", key)
        assert record is not None and record.blob_id is not None
        return record

    def findings(self) -> tuple[list[str], list[str], list[str]]:
        report = check(self.store, self.blobs, repair=False, deep=False,
                       orphan_grace_seconds=0)
        return report.deletes_in_doubt, report.missing_sidecars, report.orphans

    def recovered_keys(self) -> list[str]:
        fresh = SyncMetaStore(create_db_engine("sqlite", str(self.tmp / "fresh.db"), None, 2))
        fresh.migrate()
        fresh.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
        rebuild(fresh, self.blobs, ControlRecord(str(self.tmp / "data"), fsync=False),
                "us-east-1")
        keys = [record.key for record in fresh.iter_objects()]
        fresh.close()
        return keys


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2))
    store.migrate()
    store.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    clock = iter(range(1000, 1_000_000)).__next__
    objects = ObjectService(MetaStore(store, SyncDbPool()), blobs, InlinePool(),
                            clock=lambda: float(clock()))
    yield Node(objects, store, blobs, tmp_path)
    store.close()


def test_a_delete_killed_before_its_commit_is_in_doubt_then_kept_whole(node: Node) -> None:
    record = node.put("k", b"kept bytes")
    assert record.blob_id is not None
    node.blobs.withdraw_sidecar(record.blob_id)  # what the kill left
    assert node.findings() == ([record.blob_id], [], [])
    assert node.recovered_keys() == []  # in doubt: deleted for recover, never torn
    settled = resolve_withdrawn(node.store, node.blobs)  # the next start
    assert settled.put_back == [record.blob_id]
    assert node.findings() == ([], [], [])
    assert node.recovered_keys() == ["k"]


def test_a_delete_killed_after_its_commit_is_finished(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    record = node.put("k", b"deleted bytes")
    assert record.blob_id is not None
    monkeypatch.setattr(node.blobs, "delete_version", lambda *args, **kwargs: None)
    run(node.objects.delete(CALLER, "b", "k"))
    monkeypatch.undo()
    assert node.blobs.withdrawn_ids() == [record.blob_id]
    assert node.recovered_keys() == []
    assert resolve_withdrawn(node.store, node.blobs).finished == [record.blob_id]
    assert node.blobs.blob_size(record.blob_id) is None
    assert node.findings() == ([], [], [])


def test_check_repair_resolves_only_deletes_older_than_the_grace(node: Node) -> None:
    record = node.put("k", b"kept bytes")
    assert record.blob_id is not None
    node.blobs.withdraw_sidecar(record.blob_id)
    young = check(node.store, node.blobs, repair=True, deep=False, orphan_grace_seconds=3600)
    assert young.problems() == 0 and node.blobs.withdrawn_ids() == [record.blob_id]
    old = check(node.store, node.blobs, repair=True, deep=False, orphan_grace_seconds=0)
    assert old.repaired == 1 and node.findings() == ([], [], [])
    assert node.blobs.read_sidecar(record.blob_id)["key"] == "k"


def test_a_delete_that_did_not_commit_leaves_nothing_withdrawn(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    record = node.put("k", b"bytes")

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError("database or disk is full")

    monkeypatch.setattr(node.store, "delete_object_versions", refused)
    with pytest.raises(OSError):
        run(node.objects.delete(CALLER, "b", "k"))
    assert node.blobs.withdrawn_ids() == []
    assert record.blob_id is not None and os.path.exists(
        node.blobs.sidecar_path(record.blob_id))


def test_a_delete_that_committed_but_failed_to_answer_removes_the_files(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    record = node.put("k", b"bytes")
    original = node.store.delete_object_versions

    def committed_then_lost(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise OSError("connection lost after the commit")

    monkeypatch.setattr(node.store, "delete_object_versions", committed_then_lost)
    with pytest.raises(OSError):
        run(node.objects.delete(CALLER, "b", "k"))
    assert record.blob_id is not None
    assert node.blobs.withdrawn_ids() == [] and node.blobs.blob_size(record.blob_id) is None
