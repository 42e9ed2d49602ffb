"""A batch delete's withdrawal manifest (blobs/manifests.py): its format, the file rules of
BlobStore (write, read, settle, the full-volume fallback) and what DeleteObjects (engine
`delete_many`), `objstore check` and `recover` make of one. SQLite in a temp dir, inline
pools, a real BlobStore (fsync off); a kill is staged by leaving the files as the step it
stopped left them."""

from __future__ import annotations

import errno
import json
import os
import time
from typing import Any

import pytest

from objstore.blobs import store as store_module
from objstore.blobs.manifests import WithdrawnVersion, encode_manifest, parse_manifest
from objstore.blobs.store import BlobStore, is_valid_blob_id, new_blob_id
from objstore.cli.check import check, resolve_withdrawn
from objstore.engine.objects import DeleteOutcome, DeleteRequest
from objstore.meta.records import ObjectRecord
from tests.unit.conftest import run
from tests.unit.test_deletes_in_doubt import CALLER, Node, stored
from tests.unit.test_deletes_in_doubt import blobs as blobs  # noqa: F401 - fixtures
from tests.unit.test_deletes_in_doubt import node as node  # noqa: F401


def version_of(blob_id: str, key: str = "k", parts: tuple[str, ...] = ()) -> WithdrawnVersion:
    return WithdrawnVersion(blob_id, "b", key, "null", parts)


# -- the format ----------------------------------------------------------------------------
def test_a_manifest_reads_back_as_written() -> None:
    versions = [version_of(new_blob_id(), "clé ✓"), version_of(new_blob_id(), "c",
                                                               (new_blob_id(),))]
    data = encode_manifest("b", versions)
    assert parse_manifest(data, is_valid_blob_id) == versions


def test_a_torn_manifest_does_not_parse() -> None:
    data = encode_manifest("b", [version_of(new_blob_id()) for _ in range(3)])
    for torn in (data[:-1], data[: len(data) // 2], b"", data[:-5] + b"\0" * 5):
        with pytest.raises(ValueError):
            parse_manifest(torn, is_valid_blob_id)


def test_ids_that_are_not_blob_ids_never_become_paths() -> None:
    good = new_blob_id()
    data = json.dumps({"format": 1, "bucket": "b", "versions": [
        ["../../etc/passwd", "k", "null", []], [good, "k", "null", ["../x", good]]]})
    assert parse_manifest(data.encode(), is_valid_blob_id) == [
        WithdrawnVersion(good, "b", "k", "null", (good,))]
    with pytest.raises(ValueError):
        parse_manifest(b'{"format": 1, "bucket": "b", "versions": [["a", "k"]]}',
                       is_valid_blob_id)


# -- the file rules ------------------------------------------------------------------------
def test_withdrawal_by_manifest_leaves_the_sidecars_in_place(blobs: BlobStore) -> None:
    first, second = stored(blobs), stored(blobs)
    name = blobs.withdraw_versions("b", [version_of(first), version_of(second)])
    assert name is not None and blobs.manifest_names() == [name]
    assert os.path.exists(blobs.sidecar_path(first)) and blobs.withdrawn_ids() == []
    assert blobs.manifest_blob_ids() == {first, second}
    blobs.drop_manifest(name)
    assert blobs.manifest_names() == [] and blobs.manifest_blob_ids() == set()


def test_a_full_volume_withdraws_each_sidecar_instead(
        blobs: BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = stored(blobs), stored(blobs)

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "write_all", full)
    assert blobs.withdraw_versions("b", [version_of(first), version_of(second)]) is None
    assert blobs.manifest_names() == []
    assert blobs.withdrawn_ids() == sorted([first, second])  # and nothing else there
    assert len(os.listdir(blobs.withdrawn_root)) == 2


def test_a_manifest_that_fails_otherwise_is_removed_and_raises(
        blobs: BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    first = stored(blobs)

    def failing(fd: int, data: bytes) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_module, "write_all", failing)
    with pytest.raises(OSError):
        blobs.withdraw_versions("b", [version_of(first)])
    assert os.listdir(blobs.withdrawn_root) == []
    assert os.path.exists(blobs.sidecar_path(first))


def test_removing_a_batch_s_version_leaves_nothing_and_looks_for_no_withdrawn_sidecar(
        blobs: BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    blob_id = stored(blobs)
    unlinked: list[str] = []
    real_unlink = os.unlink
    monkeypatch.setattr(os, "unlink", lambda path: (unlinked.append(str(path)),
                                                    real_unlink(path))[1])
    blobs.delete_version(blob_id, sidecar_withdrawn=False)
    assert unlinked == [blobs.sidecar_path(blob_id), blobs.blob_path(blob_id)]
    assert list(blobs.iter_blobs()) == []


def test_settling_a_manifest_keeps_what_rows_hold_and_removes_the_rest(
        blobs: BlobStore) -> None:
    kept, gone, unknown = stored(blobs), stored(blobs), stored(blobs)
    parts = (stored(blobs, kind="part"), stored(blobs, kind="part"))
    composite = new_blob_id()
    blobs.write_sidecar(composite, {"kind": "object", "key": "c"})
    whole = blobs.withdraw_versions("b", [version_of(kept), version_of(gone),
                                          version_of(composite, "c", parts)])
    in_doubt = blobs.withdraw_versions("b", [version_of(unknown)])
    verdicts = {kept: True, gone: False, composite: False, unknown: None}
    asked: list[dict[str, Any]] = []
    settled = blobs.settle_withdrawn(
        lambda blob_id, ident: (asked.append(ident), verdicts[blob_id])[1])
    assert settled.put_back == [kept] and settled.finished == [gone, composite]
    assert settled.unresolved == [unknown]
    assert asked[0] == {"kind": "object", "bucket": "b", "key": "k", "version_id": "null"}
    assert os.path.exists(blobs.sidecar_path(kept)) and blobs.blob_size(kept) == 5
    assert blobs.blob_size(gone) is None and not os.path.exists(blobs.sidecar_path(gone))
    assert all(blobs.blob_size(part) is None for part in parts)
    assert not os.path.exists(blobs.sidecar_path(composite))
    assert whole not in blobs.manifest_names() and blobs.manifest_names() == [in_doubt]


def test_settling_drops_a_torn_manifest_and_leaves_a_young_one(blobs: BlobStore) -> None:
    young = stored(blobs)
    kept = blobs.withdraw_versions("b", [version_of(young)])
    torn = blobs.withdraw_versions("b", [version_of(stored(blobs))])
    assert kept is not None and torn is not None
    with open(blobs.manifest_path(torn), "r+b") as handle:
        handle.truncate(10)
    os.utime(blobs.manifest_path(torn), (0, 0))
    asked: list[str] = []
    settled = blobs.settle_withdrawn(lambda blob_id, _i: asked.append(blob_id) or False,
                                     older_than=time.time() - 3600)
    assert asked == [] and settled.torn == [torn] and blobs.manifest_names() == [kept]
    assert blobs.manifest_blob_ids() == {young}


# -- DeleteObjects, check and recover ------------------------------------------------------
def put_keys(node: Node, count: int) -> list[ObjectRecord]:
    return [node.put(f"k{n}", f"bytes {n}".encode()) for n in range(count)]


def delete_all(node: Node, records: list[ObjectRecord]) -> list[Any]:
    return run(node.objects.delete_many(CALLER, "b", [DeleteRequest(r.key)
                                                      for r in records]))


def test_a_batch_delete_writes_one_manifest_and_leaves_nothing(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    records = put_keys(node, 3)
    written: list[str | None] = []
    withdraw = node.blobs.withdraw_versions
    monkeypatch.setattr(node.blobs, "withdraw_versions", lambda bucket, versions: (
        written.append(withdraw(bucket, versions)), written[-1])[1])
    monkeypatch.setattr(node.blobs, "withdraw_sidecars", None)  # never by renames
    assert delete_all(node, records) == [DeleteOutcome(None)] * 3
    assert len(written) == 1 and written[0] is not None
    assert os.listdir(node.blobs.withdrawn_root) == [] and list(node.blobs.iter_blobs()) == []
    assert node.findings() == ([], [], [])


def test_a_batch_delete_killed_before_its_commit_is_in_doubt_then_kept_whole(
        node: Node) -> None:
    records = put_keys(node, 3)
    ids = [r.blob_id for r in records]
    node.blobs.withdraw_versions("b", [version_of(r.blob_id or "", r.key)
                                       for r in records])  # what the kill left
    assert sorted(node.findings()[0]) == sorted(ids)
    assert node.recovered_keys() == []  # in doubt: deleted for recover, never torn
    settled = resolve_withdrawn(node.store, node.blobs)  # the next start
    assert sorted(settled.put_back) == sorted(ids) and node.blobs.manifest_names() == []
    assert node.findings() == ([], [], [])
    assert sorted(node.recovered_keys()) == ["k0", "k1", "k2"]


def test_a_batch_delete_killed_after_its_commit_is_finished(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    records = put_keys(node, 3)
    for step in ("delete_version", "drop_manifest"):  # the removal never ran
        monkeypatch.setattr(node.blobs, step, lambda *args, **kwargs: None)
    delete_all(node, records)
    monkeypatch.undo()
    assert len(node.blobs.manifest_names()) == 1
    assert node.recovered_keys() == []
    settled = resolve_withdrawn(node.store, node.blobs)
    assert sorted(settled.finished) == sorted(r.blob_id for r in records)
    assert os.listdir(node.blobs.withdrawn_root) == [] and list(node.blobs.iter_blobs()) == []
    assert node.findings() == ([], [], [])


def test_check_repair_settles_only_manifests_older_than_the_grace(node: Node) -> None:
    record = node.put("k", b"kept bytes")
    node.blobs.withdraw_versions("b", [version_of(record.blob_id or "")])
    young = check(node.store, node.blobs, repair=True, deep=False, orphan_grace_seconds=3600)
    assert young.problems() == 0 and len(node.blobs.manifest_names()) == 1
    old = check(node.store, node.blobs, repair=True, deep=False, orphan_grace_seconds=0)
    assert old.repaired == 1 and node.findings() == ([], [], [])
    assert node.blobs.manifest_names() == [] and node.recovered_keys() == ["k"]


def test_a_batch_delete_that_did_not_commit_leaves_every_key_whole(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    records = put_keys(node, 3)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError("database or disk is full")

    monkeypatch.setattr(node.store, "delete_object_versions", refused)
    assert all(isinstance(outcome, OSError) for outcome in delete_all(node, records))
    assert os.listdir(node.blobs.withdrawn_root) == []
    assert all(os.path.exists(node.blobs.sidecar_path(r.blob_id or "")) for r in records)
    monkeypatch.undo()
    assert node.findings() == ([], [], []) and len(node.recovered_keys()) == 3


def test_a_batch_delete_that_committed_but_failed_to_answer_removes_the_files(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    records = put_keys(node, 3)
    original = node.store.delete_object_versions

    def committed_then_lost(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise OSError("connection lost after the commit")

    monkeypatch.setattr(node.store, "delete_object_versions", committed_then_lost)
    delete_all(node, records)
    assert os.listdir(node.blobs.withdrawn_root) == [] and list(node.blobs.iter_blobs()) == []


def test_a_batch_delete_on_a_full_volume_withdraws_each_sidecar(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    records = put_keys(node, 3)

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "write_all", full)
    assert delete_all(node, records) == [DeleteOutcome(None)] * 3
    assert os.listdir(node.blobs.withdrawn_root) == [] and list(node.blobs.iter_blobs()) == []


def test_a_failed_fallback_puts_back_the_sidecars_it_moved(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    records = put_keys(node, 3)
    moved = records[0].blob_id or ""
    write_all = store_module.write_all

    def full(fd: int, data: bytes) -> int:  # no room for the manifest, but for a sidecar
        if data.startswith(b'{"format":1,"bucket"'):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_all(fd, data)

    def part_way(blob_ids: Any) -> None:
        node.blobs.withdraw_sidecar(moved)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_module, "write_all", full)
    monkeypatch.setattr(node.blobs, "withdraw_sidecars", part_way)
    assert all(isinstance(outcome, OSError) for outcome in delete_all(node, records))
    monkeypatch.undo()
    assert os.listdir(node.blobs.withdrawn_root) == []
    assert node.findings() == ([], [], []) and len(node.recovered_keys()) == 3


def test_a_batch_delete_whose_withdrawal_fails_removes_no_row(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    records = put_keys(node, 3)

    def failing(bucket: str, versions: Any) -> str:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(node.blobs, "withdraw_versions", failing)
    assert all(isinstance(outcome, OSError) for outcome in delete_all(node, records))
    monkeypatch.undo()
    assert os.listdir(node.blobs.withdrawn_root) == []
    assert node.findings() == ([], [], []) and len(node.recovered_keys()) == 3
