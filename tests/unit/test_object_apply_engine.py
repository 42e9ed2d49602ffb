"""The receive side of replication (engine/replication_apply.py), in memory: SQLite in a
temp dir, inline DB and IO pools, a real BlobStore (fsync off). The durability order (blob
and sidecar before the row), the ack's has_blob, the files of rows that lose, replicated
deletes, validation, and the change hook told with the peer's caller."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from objstore.blobs.sidecar import record_from_sidecar
from objstore.blobs.store import BlobStore
from objstore.blobs.writer import BlobWriter
from objstore.convergence.ack import Ack
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind, Origin
from objstore.engine.replication_apply import FutureStamps, ReplicationApply
from objstore.errors import S3Error
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.object_apply_queries import ApplyResult
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord, PartRef
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run

PEER = Caller(Principal("u-root", "root", True, ""), origin=Origin.PEER,
              operation="Cluster::ApplyObject")
V1 = "11111111-1111-4111-8111-111111111111"
V2 = "22222222-2222-4222-8222-222222222222"
BLOB_A = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
BLOB_B = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
PART_1 = "0000000a-0000-4000-8000-000000000001"
DATA = b"abc"


class Recorder:
    def __init__(self) -> None:
        self.changes: list[Change] = []

    def committed(self, change: Change) -> None:
        self.changes.append(change)


@dataclass
class Node:
    service: ReplicationApply
    store: SyncMetaStore
    blobs: BlobStore
    seen: Recorder

    def body(self, data: bytes = DATA) -> BlobWriter:
        writer = BlobWriter(self.blobs.tmp_dir)
        writer.write(data)
        return writer

    def apply(self, record: ObjectRecord, data: bytes | None = None) -> Ack:
        body = None if data is None else self.body(data)
        return run(self.service.apply_replicated(PEER, record, body))

    def has_files(self, blob_id: str) -> tuple[bool, bool]:
        return (os.path.exists(self.blobs.blob_path(blob_id)),
                os.path.exists(self.blobs.sidecar_path(blob_id)))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2),
                          clock=lambda: 1000.0)
    store.migrate()
    store.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    seen = Recorder()
    service = ReplicationApply(MetaStore(store, SyncDbPool()), blobs, InlinePool(),
                               clock=lambda: 1000.0, changes=ChangeHook([seen]))
    yield Node(service, store, blobs, seen)
    store.close()


def row(version_id: str = V1, *, at: float = 10.0, blob: str | None = BLOB_A,
        **fields: object) -> ObjectRecord:
    values: dict[str, object] = {"size": len(DATA), "etag": "e", **fields}
    return ObjectRecord("b", "k", version_id, blob, last_modified=at,
                        **values)  # type: ignore[arg-type]


def test_blob_and_sidecar_are_durable_before_the_row(node: Node) -> None:
    order: list[tuple[bool, bool]] = []
    apply = node.store.apply_replicated_object

    def spying(record: ObjectRecord) -> ApplyResult:
        order.append(node.has_files(BLOB_A))
        return apply(record)

    node.store.apply_replicated_object = spying  # type: ignore[method-assign]
    assert node.apply(row(), DATA) == Ack(applied=True, has_blob=True)
    assert order == [(True, True)]
    assert node.blobs.blob_reader(BLOB_A).read_all() == DATA
    rebuilt = record_from_sidecar(node.blobs.read_sidecar(BLOB_A))
    assert rebuilt == replace(row(), is_latest=False)
    stored = node.store.get_object("b", "k", V1)
    assert stored is not None and stored.blob_id == BLOB_A  # verbatim


def test_the_hook_sees_the_change_with_the_peer_caller(node: Node) -> None:
    node.apply(row(), DATA)
    [change] = node.seen.changes
    assert change.kind is ChangeKind.OBJECT_WRITTEN and change.caller is PEER
    assert change.record == node.store.get_object("b", "k", V1)
    locked = row(retention_mode="GOVERNANCE", retain_until_date=50.0, lock_updated_at=20.0)
    node.apply(locked)  # the bytes are here already: only the sidecar is rewritten
    assert node.seen.changes[-1].kind is ChangeKind.LOCK_CHANGED
    assert node.blobs.read_sidecar(BLOB_A)["retention_mode"] == "GOVERNANCE"


def test_a_row_without_its_bytes_is_stored_and_says_so(node: Node) -> None:
    assert node.apply(row()) == Ack(applied=True, has_blob=False)
    assert node.store.get_object("b", "k", V1) is not None
    assert node.has_files(BLOB_A) == (False, False)
    # the same row again, now with its bytes: stored, no new seq, and the ack says so
    seq = node.store.max_seq()
    assert node.apply(row(), DATA) == Ack(applied=True, has_blob=True)
    assert node.has_files(BLOB_A) == (True, True) and node.store.max_seq() == seq
    assert len(node.seen.changes) == 1  # the identical row changed nothing


def test_markers_and_composites_are_sidecar_only(node: Node) -> None:
    marker = row(V2, at=20.0, blob=BLOB_B, size=0, etag="", is_delete_marker=True)
    assert node.apply(marker) == Ack(applied=True, has_blob=True)
    assert node.has_files(BLOB_B) == (False, True)
    assert node.seen.changes[-1].kind is ChangeKind.DELETE_MARKER_WRITTEN
    composite = row(at=5.0, parts=(PartRef(1, PART_1, 3, "p"),), etag="x-1")
    # has_blob for a composite: its sidecar is present (the parts travel on their own)
    assert node.apply(composite) == Ack(applied=True, has_blob=True)
    assert node.has_files(BLOB_A) == (False, True)
    with pytest.raises(S3Error) as refused:
        node.apply(replace(composite, last_modified=6.0), DATA)
    assert refused.value.code == "InvalidRequest"


def test_a_losing_row_leaves_no_file_and_is_not_counted(node: Node) -> None:
    # The sender's write is not the winning row here: its ack must not count toward the
    # sender's quorum (applied: false), though this node holds a newer row's bytes.
    node.apply(row(at=10.0), DATA)
    seq = node.store.max_seq()
    assert node.apply(row(at=9.0, blob=BLOB_B), DATA) == Ack(applied=False, has_blob=True)
    assert node.apply(row(at=10.0), DATA) == Ack(applied=True, has_blob=True)  # identical
    assert node.has_files(BLOB_B) == (False, False)
    assert node.store.max_seq() == seq and len(node.seen.changes) == 1


def test_a_newer_row_removes_the_replaced_blob(node: Node) -> None:
    node.apply(row(at=10.0), DATA)
    node.apply(row(at=11.0, blob=BLOB_B), b"xyz")
    assert node.has_files(BLOB_A) == (False, False)
    assert node.has_files(BLOB_B) == (True, True)


def test_a_row_that_loses_a_race_has_its_files_settled(node: Node) -> None:
    # a newer row commits between the engine's look and its transaction
    apply = node.store.apply_replicated_object

    def raced(record: ObjectRecord) -> ApplyResult:
        apply(row(at=30.0, blob=PART_1))
        return apply(record)

    node.store.apply_replicated_object = raced  # type: ignore[method-assign]
    ack = node.apply(row(at=10.0, blob=BLOB_B), DATA)
    assert ack == Ack(applied=False, has_blob=False)  # the winner's bytes are not here
    assert node.has_files(BLOB_B) == (False, False)


def test_a_replicated_delete_removes_the_row_and_its_files(node: Node) -> None:
    node.apply(row(), DATA)
    ack = run(node.service.apply_replicated_delete(PEER, "b", "k", V1, 10.0))
    assert ack == Ack(applied=True, has_blob=True)
    assert node.store.get_object("b", "k", V1) is None
    assert node.has_files(BLOB_A) == (False, False)
    change = node.seen.changes[-1]
    assert change.kind is ChangeKind.VERSION_DELETED and change.caller is PEER
    assert change.record is not None and change.record.blob_id == BLOB_A
    assert change.deleted_at == 10.0  # the peer's stamp, as its tombstone here holds it
    # the row arriving again stays deleted (it lost: not counted), with no file left
    assert node.apply(row(), DATA) == Ack(applied=False, has_blob=True)
    assert node.has_files(BLOB_A) == (False, False)


def test_a_delete_older_than_the_row_keeps_row_and_sidecar(node: Node) -> None:
    node.apply(row(at=20.0), DATA)
    ack = run(node.service.apply_replicated_delete(PEER, "b", "k", V1, 10.0))
    assert ack == Ack(applied=False, has_blob=True)  # the deletion lost here
    assert node.store.get_object("b", "k", V1) is not None
    assert node.has_files(BLOB_A) == (True, True)


@pytest.mark.parametrize("record", [
    row(blob="not-a-uuid"),
    row(blob=BLOB_A.upper()),  # kept verbatim, so only the canonical form is accepted
    row(blob="../../etc/passwd"),
    row(parts=(PartRef(1, "../x", 3, "p"),)),
    row(blob=None),
    row(at=float("nan")),
    row(version_id="not a version"),
])
def test_an_invalid_row_is_refused_and_changes_nothing(node: Node, record: ObjectRecord
                                                       ) -> None:
    with pytest.raises(S3Error) as refused:
        node.apply(record, None if record.parts else DATA)
    assert refused.value.code == "InvalidArgument"
    assert node.store.max_seq() == 0 and node.seen.changes == []
    assert list(node.blobs.iter_blobs()) == []


def test_a_change_stamped_too_far_ahead_is_refused_and_counted(node: Node) -> None:
    """Clock 1000, max_clock_ahead_seconds 300: a row or deletion stamped beyond 1300 is
    refused before anything is written, and counted; at the limit it applies."""
    future = FutureStamps()
    guarded = ReplicationApply(MetaStore(node.store, SyncDbPool()), node.blobs, InlinePool(),
                               clock=lambda: 1000.0, changes=ChangeHook([node.seen]),
                               max_clock_ahead_seconds=300.0, future=future)
    for record in (row(at=4600.0), row(at=10.0, lock_updated_at=4600.0)):
        with pytest.raises(S3Error) as refused:
            run(guarded.apply_replicated(PEER, record, node.body()))
        assert refused.value.code == "InvalidArgument"
    with pytest.raises(S3Error):
        run(guarded.apply_replicated_delete(PEER, "b", "k", V1, 1300.5))
    assert future.refused == 3
    assert node.store.max_seq() == 0 and node.seen.changes == []
    assert list(node.blobs.iter_blobs()) == []
    ack = run(guarded.apply_replicated(PEER, row(at=1300.0), node.body()))
    assert ack == Ack(applied=True, has_blob=True) and future.refused == 3


def test_a_missing_bucket_is_no_such_bucket(node: Node) -> None:
    with pytest.raises(S3Error) as refused:
        node.apply(replace(row(), bucket="nobucket"), DATA)
    assert refused.value.code == "NoSuchBucket"
    with pytest.raises(S3Error) as refused:
        run(node.service.apply_replicated_delete(PEER, "nobucket", "k", V1, 1.0))
    assert refused.value.code == "NoSuchBucket"


def test_bytes_that_disagree_with_the_row_are_refused(node: Node) -> None:
    with pytest.raises(S3Error) as refused:
        node.apply(row(), b"longer than the row says")
    assert refused.value.code == "InvalidRequest"
    assert node.store.get_object("b", "k", V1) is None


MD5_OF_DATA = "900150983cd24fb0d6963f7d28e17f72"  # MD5 of b"abc"


def test_a_row_sent_with_its_bytes_stores_them_under_the_rows_sidecar(node: Node) -> None:
    """The small-blob path of POST /cluster/v1/object (cluster/wire.py): one sidecar
    write, the row's own, never the provisional one the blob route writes first."""
    record = row(etag=MD5_OF_DATA)
    ack = run(node.service.apply_replicated_bytes(PEER, record, DATA))
    assert ack == Ack(applied=True, has_blob=True)
    assert node.blobs.blob_reader(BLOB_A).read_all() == DATA
    assert record_from_sidecar(node.blobs.read_sidecar(BLOB_A)) == replace(
        record, is_latest=False)
    assert node.seen.changes[-1].caller is PEER
    again = run(node.service.apply_replicated_bytes(PEER, record, DATA))  # a retry
    assert again == Ack(applied=True, has_blob=True)


@pytest.mark.parametrize("sent, code", [
    (b"abd", "BadDigest"),  # same length, not the bytes of the ETag
    (b"abcd", "InvalidRequest"),  # not the row's size
])
def test_bytes_sent_in_the_row_must_be_the_rows(node: Node, sent: bytes, code: str) -> None:
    with pytest.raises(S3Error) as refused:
        run(node.service.apply_replicated_bytes(PEER, row(etag=MD5_OF_DATA), sent))
    assert refused.value.code == code
    assert node.store.get_object("b", "k", V1) is None
    assert node.has_files(BLOB_A) == (False, False)
    assert os.listdir(node.blobs.tmp_dir) == []


def test_bytes_of_an_encrypted_row_are_not_held_to_the_etag(node: Node) -> None:
    """A stored (encrypted or compressed) blob's bytes are not the client's: the ETag is
    the client bytes' MD5, so only the row rules apply to them."""
    record = row(etag=MD5_OF_DATA, compression="zstd", size=99)
    assert run(node.service.apply_replicated_bytes(PEER, record, b"zzz")).has_blob
    assert node.blobs.blob_reader(BLOB_A).read_all() == b"zzz"


def test_only_a_peer_caller_applies(node: Node) -> None:
    client = Caller(PEER.principal)
    with pytest.raises(ValueError):
        run(node.service.apply_replicated(client, row(), None))


def test_an_expired_delete_of_nothing_held_is_not_recorded(node: Node) -> None:
    """Past the tombstone grace (clock 1000, grace 100), a deletion of a version held
    neither as a row nor as a tombstone records nothing and tells no one; one of a row
    held here still removes it."""
    graced = ReplicationApply(MetaStore(node.store, SyncDbPool()), node.blobs, InlinePool(),
                              clock=lambda: 1000.0, changes=ChangeHook([node.seen]),
                              tombstone_grace_seconds=100.0)
    assert run(graced.apply_replicated_delete(PEER, "b", "k", V2, 10.0)) == Ack(
        applied=True, has_blob=True)
    assert node.store.get_tombstone("object", f"b:{V2}:k") is None
    assert node.seen.changes == []
    node.apply(row(), DATA)
    run(graced.apply_replicated_delete(PEER, "b", "k", V1, 10.0))
    assert node.store.get_object("b", "k", V1) is None
    assert node.store.get_tombstone("object", f"b:{V1}:k") is not None
    assert node.seen.changes[-1].kind is ChangeKind.VERSION_DELETED


def test_a_row_sent_after_its_blob_must_match_its_size(node: Node) -> None:
    """The blob route stores the bytes first; the row that follows without them is held
    to the same rule as bytes sent with it (row_rules.blob_problem): 4 EiB for 3 bytes is
    refused, nothing is applied; the true size is then accepted."""
    run(node.service.store_blob(PEER, BLOB_A, node.body()))
    with pytest.raises(S3Error) as refused:
        node.apply(row(size=2 ** 62))
    assert refused.value.code == "InvalidRequest" and "3 bytes" in refused.value.message
    assert node.store.get_object("b", "k", V1) is None
    assert node.apply(row()) == Ack(applied=True, has_blob=True)
    assert node.store.get_object("b", "k", V1).size == len(DATA)


@pytest.mark.parametrize("fields", [{"at": 1e18}, {"at": -1e15}, {"size": 10 ** 30},
                                    {"legal_hold_status": "MAYBE"}], ids=str)
def test_rows_the_row_rules_refuse_are_invalid_arguments(node: Node,
                                                         fields: dict[str, Any]) -> None:
    with pytest.raises(S3Error) as refused:
        node.apply(row(**fields), DATA)
    assert refused.value.code == "InvalidArgument"
    assert node.store.get_object("b", "k", V1) is None


@pytest.mark.parametrize("stamp", [1e18, 253402300800.0, -1e15])
def test_a_deletion_stamped_outside_1970_to_9999_is_refused(node: Node, stamp: float) -> None:
    with pytest.raises(S3Error) as refused:
        run(node.service.apply_replicated_delete(PEER, "b", "k", V1, stamp))
    assert refused.value.code == "InvalidArgument"


# -- many rows at once (anti-entropy's batch) -------------------------------------------


def test_a_batch_stores_files_before_its_one_transaction_and_answers_each_row(
        node: Node) -> None:
    """Files of every row durable before the single row transaction; each row answered:
    its ack, or its own error (an invalid blob id, a missing bucket) without stopping the
    others; the change hook told of each applied row."""
    transactions: list[list[tuple[bool, bool]]] = []
    apply_many = node.store.apply_replicated_objects

    def spying(records: list[ObjectRecord]) -> list[ApplyResult | Exception]:
        transactions.append([node.has_files(r.blob_id) for r in records if r.blob_id])
        return apply_many(records)

    node.store.apply_replicated_objects = spying  # type: ignore[method-assign]
    node.apply(replace(row(V2, blob=BLOB_B), key="held"), DATA)
    items: list[tuple[ObjectRecord, BlobWriter | None]] = [
        (row(V1, blob=BLOB_A), node.body()),  # new, with its bytes
        (replace(row(V2, blob=BLOB_B), key="held"), None),  # identical: nothing
        (replace(row(V1, blob="not-a-uuid"), key="bad"), None),
        (replace(row(V1, blob=PART_1), bucket="missing"), None),
        (replace(row(V1, blob=None, size=0), key="marker", is_delete_marker=True), None),
    ]
    answers = run(node.service.apply_replicated_rows(PEER, items))
    assert answers[0] == Ack(applied=True, has_blob=True)
    assert answers[1] == Ack(applied=True, has_blob=True)
    assert isinstance(answers[2], S3Error) and answers[2].code == "InvalidArgument"
    assert isinstance(answers[3], S3Error) and answers[3].code == "NoSuchBucket"
    assert answers[4] == Ack(applied=True, has_blob=True)
    assert transactions == [[(True, True), (True, True)]]  # one, after the files
    assert node.store.get_object("b", "k", V1) is not None
    assert node.store.get_object("b", "marker", V1) is not None
    applied = [c.record.key for c in node.seen.changes if c.record is not None]
    assert applied == ["held", "k", "marker"]  # "held" by the single apply before
    assert all(c.caller is PEER for c in node.seen.changes)
