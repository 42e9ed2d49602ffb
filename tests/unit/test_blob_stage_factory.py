"""The one factory of blob writers and readers (blobs/factory.py) with a real blob store in
a temporary directory: an SSE-S3 plan writes packages (no plaintext in the spool or the
blob), the record's fields read it back through the decrypting stage, ranges across package
boundaries included; copies pass through a reader and a writer; the identity plan adds
nothing."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from objstore.blobs import writer as writer_module
from objstore.blobs.factory import BlobStages, StagesUnavailable, stored_bytes_writer
from objstore.blobs.plan import (
    IDENTITY,
    SSE_S3,
    StagePlan,
    plan_document,
    plan_from_document,
    plan_of,
)
from objstore.blobs.segments import Segment, plan_segments
from objstore.blobs.sidecar import record_from_sidecar, record_to_sidecar
from objstore.blobs.store import BlobStore, new_blob_id
from objstore.blobs.writer import BlobWriter
from objstore.crypto.master_key import LocalMasterKey
from objstore.crypto.packages import PACKAGE_PLAINTEXT, stored_size
from objstore.http.spool import BodySpool
from objstore.meta.records import ObjectRecord, PartRef
from tests.unit.conftest import ManualRunner

P = PACKAGE_PLAINTEXT
MARKER = b"PLAINTEXT-MARKER-7f3c"


def _body(size: int) -> bytes:
    filler = os.urandom(size)
    return (MARKER + filler)[:size] if size >= len(MARKER) else filler


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(str(tmp_path / "data"), fsync=False,
                      stages=BlobStages(LocalMasterKey(os.urandom(32))))
    blobs.prepare()
    return blobs


def _write(store: BlobStore, writer: BlobWriter, data: bytes, piece: int = 10_000
           ) -> ObjectRecord:
    for start in range(0, len(data), piece):
        writer.write(data[start:start + piece])
    writer.end()
    record = ObjectRecord(bucket="b", key="dir/k", version_id="v1", blob_id=new_blob_id(),
                          size=writer.length, etag=writer.md5_hex, last_modified=1.0,
                          owner_id="o", owner_name="o")
    fields = writer.stage_fields(record.bucket, record.key, record.version_id)
    if fields is not None:
        record = dataclasses.replace(record, **fields)
    assert record.blob_id is not None
    store.commit(writer.detach(), record.blob_id, record_to_sidecar(record))
    writer.close()
    return record


@pytest.mark.parametrize("size", [0, 100, P, 3 * P + 5, 2 * 1024 * 1024 + 3])
def test_sse_s3_round_trip_never_stores_plaintext(store: BlobStore, size: int) -> None:
    data = _body(size)
    writer = store.stages.writer(store.tmp_dir, StagePlan(encryption=SSE_S3,
                                                          key_id=store.stages.key_id))
    record = _write(store, writer, data)
    assert record.etag == hashlib.md5(data).hexdigest() and record.size == size
    assert record.encryption_algorithm == SSE_S3
    assert record.encryption_key_id == store.stages.key_id
    assert set(record.encryption_params) == {"format", "wrapped_key"}
    assert record.blob_id is not None
    assert store.blob_size(record.blob_id) == stored_size(size)
    assert _files_containing(Path(store.data_dir), MARKER) == []
    # the sidecar carries the plan, so `recover` rebuilds a readable record
    rebuilt = record_from_sidecar(store.read_sidecar(record.blob_id))
    assert plan_of(rebuilt) == plan_of(record)
    assert rebuilt.encryption_params == record.encryption_params
    with store.reader([Segment(record.blob_id, 0, size)], rebuilt) as reader:
        assert b"".join(reader.chunks()) == data


def test_ranges_across_package_boundaries(store: BlobStore) -> None:
    data = _body(4 * P + 321)
    writer = store.stages.writer(store.tmp_dir, StagePlan(encryption=SSE_S3))
    record = _write(store, writer, data, piece=P - 7)
    assert record.blob_id is not None
    for start, length in [(P - 1, 2), (P, P), (P - 10, 2 * P + 20), (4 * P + 320, 1),
                          (0, len(data)), (3, 5)]:
        reader = store.reader([Segment(record.blob_id, start, length)], record)
        assert reader.read_all() == data[start:start + length]


def test_a_record_moved_to_another_version_does_not_read(store: BlobStore) -> None:
    data = _body(1000)
    record = _write(store, store.stages.writer(store.tmp_dir, StagePlan(encryption=SSE_S3)),
                    data)
    assert record.blob_id is not None
    moved = dataclasses.replace(record, version_id="v2")
    with pytest.raises(OSError):
        store.reader([Segment(record.blob_id, 0, 1000)], moved).read_all()


def test_a_copy_of_an_encrypted_object_passes_through_reader_and_writer(store: BlobStore
                                                                          ) -> None:
    data = _body(2 * P + 9)
    source = _write(store, store.stages.writer(store.tmp_dir, StagePlan(encryption=SSE_S3)),
                    data)
    assert source.blob_id is not None
    copy_id = new_blob_id()
    segments = [Segment(source.blob_id, 0, source.size)]
    assert store.copy_segments(segments, copy_id, {"kind": "object"}, want_md5=False,
                               source=source) is None
    with store.blob_reader(copy_id) as reader:  # the copy's plan: identity (stored as sent)
        assert reader.read_all() == data
    part_id = new_blob_id()
    md5 = store.copy_segments([Segment(source.blob_id, P - 1, P + 2)], part_id,
                              {"kind": "part"}, want_md5=True, source=source)
    assert md5 == hashlib.md5(data[P - 1:2 * P + 1]).hexdigest()


def test_identity_plan_is_a_bare_writer_and_reader(store: BlobStore) -> None:
    writer = store.stages.writer(store.tmp_dir, IDENTITY)
    assert type(writer) is BlobWriter and writer.plan is IDENTITY
    record = _write(store, writer, b"hello")
    assert record.encryption_algorithm is None and record.encryption_params == {}
    assert store.stages.opener(record, store.open_blob) == store.open_blob
    assert stored_bytes_writer(store.tmp_dir).stage_fields("b", "k", "v") is None


def test_no_master_key_refuses_encryption_both_ways(store: BlobStore, tmp_path: Path) -> None:
    record = _write(store, store.stages.writer(store.tmp_dir, StagePlan(encryption=SSE_S3)),
                    b"secret")
    keyless = BlobStages()
    with pytest.raises(StagesUnavailable):
        keyless.writer(str(tmp_path), StagePlan(encryption=SSE_S3))
    with pytest.raises(StagesUnavailable):
        keyless.opener(record, store.open_blob)


def test_a_spool_encrypts_as_bytes_arrive_and_an_empty_one_restages(store: BlobStore
                                                                    ) -> None:
    plan = StagePlan(encryption=SSE_S3, key_id=store.stages.key_id)
    spool = BodySpool(store.tmp_dir, memory_limit=1000, stages=store.stages, plan=plan)
    data = _body(3 * P)
    for start in range(0, len(data), 4096):
        spool.write(data[start:start + 4096])
    assert spool.writer.path is not None  # spilled to the disk: as packages only
    assert _files_containing(Path(store.tmp_dir), MARKER) == []
    spool.finish_decoding()
    assert spool.md5_hex == hashlib.md5(data).hexdigest()
    spool.close()
    empty = BodySpool(store.tmp_dir, stages=store.stages)
    empty.restage(plan)
    assert empty.writer.plan == plan
    empty.finish_decoding()
    assert empty.stage_fields("b", "k", "v")["encryption_algorithm"] == SSE_S3  # type: ignore[index]
    full = BodySpool(store.tmp_dir, stages=store.stages)
    full.write(b"x")
    with pytest.raises(RuntimeError):
        full.restage(plan)


def test_rewrapped_key_reads_the_same_stored_bytes_as_another_object(store: BlobStore
                                                                     ) -> None:
    data = _body(2 * P + 1)
    source = _write(store, store.stages.writer(store.tmp_dir, StagePlan(encryption=SSE_S3)),
                    data)
    assert source.blob_id is not None
    fields = store.stages.rewrapped(source, "other-bucket", "copy", "v9")
    assert fields is not None
    assert fields["encryption_params"]["wrapped_key"] != \
        source.encryption_params["wrapped_key"]
    copy = dataclasses.replace(source, bucket="other-bucket", key="copy", version_id="v9",
                               **fields)
    with store.reader([Segment(source.blob_id, 0, copy.size)], copy) as reader:
        assert reader.read_all() == data
    assert store.stages.rewrapped(
        dataclasses.replace(source, encryption_algorithm=None, encryption_params={}),
        "b", "k", "v") is None


def _write_part(store: BlobStore, plan: StagePlan, data: bytes, upload_id: str
                ) -> PartRef:
    writer = store.stages.writer(store.tmp_dir, plan)
    writer.write(data)
    writer.end()
    blob_id = new_blob_id()
    fields = writer.stage_fields("b", "dir/k", upload_id, blob_id) or {}
    params = dict(fields.get("encryption_params") or {})
    if params:
        params["key_id"] = fields["encryption_key_id"]
    store.commit(writer.detach(), blob_id, {"kind": "part"})
    return PartRef(1, blob_id, len(data), hashlib.md5(data).hexdigest(),
                   encryption_params=params)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_an_encrypted_composite_reads_back_through_each_parts_key(
        store: BlobStore, compression: str | None) -> None:
    """Each part has its own data key, bound to the upload, then rebound to the version
    by the completion (`composite_fields`); a read crossing the part boundary reads both;
    a part key moved to another part does not open."""
    plan = StagePlan(compression=compression, encryption=SSE_S3,
                     key_id=store.stages.key_id)
    first, second = _body(P + 11), _body(2 * P + 5)
    parts = [_write_part(store, plan, first, "up1"),
             dataclasses.replace(_write_part(store, plan, second, "up1"), part_number=2)]
    fields = store.stages.composite_fields(plan, "b", "dir/k", "up1", "v9", parts)
    record = ObjectRecord(bucket="b", key="dir/k", version_id="v9", blob_id=new_blob_id(),
                          size=len(first) + len(second), etag="x-2", last_modified=1.0,
                          **fields)
    whole = first + second
    segments = plan_segments(record, 0, record.size)
    with store.reader(segments, record) as reader:
        assert b"".join(reader.chunks(50_000)) == whole
    start = len(first) - 7
    with store.reader(plan_segments(record, start, 20), record) as reader:
        assert b"".join(reader.chunks(50_000)) == whole[start:start + 20]
    swapped = dataclasses.replace(record, parts=(
        dataclasses.replace(record.parts[0], encryption_params=record.parts[1].encryption_params),
        record.parts[1]))
    with pytest.raises(OSError), store.reader(plan_segments(swapped, 0, 10), swapped) as reader:
        b"".join(reader.chunks(10))
    with pytest.raises(OSError):  # still bound to the upload: not rebound to another one
        store.stages.composite_fields(plan, "b", "dir/k", "other-upload", "v9", parts)


def test_a_plan_document_round_trips_and_junk_is_the_identity() -> None:
    plan = StagePlan(compression="zstd", encryption=SSE_S3, key_id="local:ab",
                     compression_level=5)
    assert plan_from_document(plan_document(plan)) == plan
    assert plan_from_document(plan_document(IDENTITY)) is IDENTITY
    for junk in (None, [], "x", {"encryption": 3}, {"compression_level": "9"}):
        assert plan_from_document(junk).compression_level is None
    assert plan_from_document({"encryption": 3}) is IDENTITY


def test_a_large_staged_body_goes_through_the_ordered_pipeline(
        store: BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the memory limit a staged body is hashed, encrypted and written by pool jobs,
    one at a time and in order; the connection is paused while too much waits; the digests
    are ready (and the body can be handed over) only once the pipeline has drained."""
    monkeypatch.setattr(writer_module, "PIPELINE_HIGH_BYTES", 3 * P)
    monkeypatch.setattr(writer_module, "PIPELINE_LOW_BYTES", P)
    runner = ManualRunner()
    pressure: list[bool] = []
    plan = StagePlan(encryption=SSE_S3, key_id=store.stages.key_id)
    writer = store.stages.writer(store.tmp_dir, plan, hash_runner=runner,
                                 memory_limit=P, want_sha256=True, pressure=pressure.append)
    data = _body(6 * P + 123)
    for start in range(0, len(data), P // 2):
        writer.write(data[start:start + P // 2])
    assert len(runner.jobs) == 1 and pressure == [True]  # one job at a time
    writer.end()
    ready = writer.digests_ready()
    assert not ready.called
    with pytest.raises(RuntimeError):
        writer.detach()
    while runner.jobs:
        runner.step()
    assert ready.called and pressure == [True, False]
    assert writer.md5_hex == hashlib.md5(data).hexdigest()
    assert writer.sha256_hex == hashlib.sha256(data).hexdigest()
    assert _files_containing(Path(store.tmp_dir), MARKER) == []
    record = ObjectRecord(bucket="b", key="dir/k", version_id="v1", blob_id=new_blob_id(),
                          size=len(data), etag=writer.md5_hex, last_modified=1.0)
    record = dataclasses.replace(record, **(writer.stage_fields("b", "dir/k", "v1") or {}))
    assert record.blob_id is not None
    store.commit(writer.detach(), record.blob_id, record_to_sidecar(record))
    with store.reader(plan_segments(record, 0, record.size), record) as reader:
        assert b"".join(reader.chunks(P)) == data


def test_closing_a_body_while_a_pipeline_job_runs_waits_for_it(store: BlobStore) -> None:
    runner = ManualRunner()
    plan = StagePlan(encryption=SSE_S3, key_id=store.stages.key_id)
    writer = store.stages.writer(store.tmp_dir, plan, hash_runner=runner, memory_limit=P)
    writer.write(_body(3 * P))
    writer.write(_body(P))
    writer.close()  # the job owns the spool until it ends
    while runner.jobs:
        runner.step()
    assert list(Path(store.tmp_dir).iterdir()) == []
