"""BlobStore, BodySpool and sidecars on a real temporary directory."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from objstore.blobs.control import ControlRecord
from objstore.blobs.digests import GIL_RELEASE_BYTES, KEEP_GIL_BYTES, update_keeping_gil
from objstore.blobs.sidecar import record_from_sidecar, record_to_sidecar
from objstore.blobs.store import BlobStore, is_valid_blob_id, new_blob_id
from objstore.blobs.writer import SpoolFile
from objstore.http.spool import BodySpool
from objstore.meta.records import ObjectRecord, PartRef


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(str(tmp_path / "data"))
    blobs.prepare()
    return blobs


def test_blob_ids_must_be_canonical_uuids(store: BlobStore) -> None:
    assert is_valid_blob_id(new_blob_id())
    blob_id = new_blob_id()
    other_spellings = [blob_id.upper(), "{" + blob_id + "}", "urn:uuid:" + blob_id,
                       blob_id.replace("-", ""), blob_id + "\n", " " + blob_id,
                       blob_id[:-1] + "g", blob_id[:8] + "-" + blob_id[9:] + "0"]
    for bad in ["../../etc/passwd", "x", "", "a" * 36, *other_spellings]:
        assert not is_valid_blob_id(bad)
        with pytest.raises(ValueError):
            store.blob_path(bad)
    assert not is_valid_blob_id(None)  # type: ignore[arg-type]


def test_small_body_stays_in_memory_and_commits(store: BlobStore) -> None:
    spool = BodySpool(store.tmp_dir, want_sha256=True, checksum_algorithms=["crc32"])
    spool.write(b"hello ")
    spool.write(b"world")
    assert spool.in_memory and spool.length == 11
    assert spool.md5_hex == hashlib.md5(b"hello world").hexdigest()
    assert spool.sha256_hex == hashlib.sha256(b"hello world").hexdigest()
    assert spool.checksum_b64("crc32") == "DUoRhQ=="
    blob_id = new_blob_id()
    store.commit(spool.detach(), blob_id, {"bucket": "b"})
    with store.blob_reader(blob_id) as reader:
        assert reader.read(6, 5) == b"world"
    assert store.read_sidecar(blob_id)["bucket"] == "b"
    assert os.listdir(store.tmp_dir) == []


def test_large_body_spills_and_is_renamed_not_copied(store: BlobStore) -> None:
    spool = BodySpool(store.tmp_dir, memory_limit=1024)
    payload = os.urandom(10_000)
    for i in range(0, len(payload), 777):
        spool.write(payload[i : i + 777])
    assert not spool.in_memory
    spool.seek(0)
    assert spool.read() == payload  # twisted.web reads small bodies back
    held = spool.detach()
    assert isinstance(held, SpoolFile)
    inode = os.fstat(held.fd).st_ino
    blob_id = new_blob_id()
    store.commit(held, blob_id, {"k": 1})
    assert os.stat(store.blob_path(blob_id)).st_ino == inode
    assert store.blob_reader(blob_id).read_all() == payload
    spool.close()  # after detach: must not delete the committed blob
    assert store.blob_size(blob_id) == len(payload)


def test_spool_close_removes_its_file(store: BlobStore) -> None:
    spool = BodySpool(store.tmp_dir, memory_limit=10)
    spool.write(b"x" * 100)
    path = spool.writer.path
    assert path and os.path.exists(path)
    spool.close()
    assert not os.path.exists(path)


def test_spool_over_the_limit_keeps_nothing(store: BlobStore) -> None:
    spool = BodySpool(store.tmp_dir, max_length=10, memory_limit=4)
    spool.write(b"x" * 8)
    spool.write(b"x" * 8)
    assert spool.too_large
    assert os.listdir(store.tmp_dir) == []


def test_prepare_sweeps_leftover_spools(store: BlobStore) -> None:
    Path(store.tmp_dir, "left.spool").write_bytes(b"x")
    assert store.prepare() == 1
    assert os.listdir(store.tmp_dir) == []


def test_delete_and_iter(store: BlobStore) -> None:
    ids = sorted(new_blob_id() for _ in range(5))
    for blob_id in ids:
        store.commit_bytes(b"abc", blob_id, {})
    assert sorted(info.blob_id for info in store.iter_blobs()) == ids
    store.delete(ids[0])
    store.delete(ids[0])  # idempotent
    assert sorted(info.blob_id for info in store.iter_blobs()) == ids[1:]


def test_sidecar_round_trip() -> None:
    record = ObjectRecord(
        "bkt", "a/b", "null", new_blob_id(), 3, "etag", 1700000000.123456,
        user_metadata={"m": "v"}, tags={"t": "1"}, retention_mode="GOVERNANCE",
        parts=(PartRef(1, new_blob_id(), 3, "e1"),), seq=42,
    )
    back = record_from_sidecar(record_to_sidecar(record))
    assert back.seq == 0 and not back.is_latest
    assert back == ObjectRecord(**{**record.__dict__, "seq": 0, "is_latest": False})


def test_sidecar_is_the_record_as_asdict_gives_it() -> None:
    record = ObjectRecord(
        "bkt", "k", "v1", new_blob_id(), 3, "etag", 1.5, user_metadata={"m": "v"},
        checksums={"crc32": "AAAA"}, encryption_params={"nested": {"list": [1, {"a": 2}]}},
        parts=(PartRef(1, new_blob_id(), 3, "e1", {"crc32": "BBBB"}),), seq=7,
    )
    expected = dataclasses.asdict(record)
    del expected["seq"], expected["is_latest"]
    sidecar = record_to_sidecar(record)
    assert sidecar == {**expected, "kind": "object"}
    assert list(sidecar) == [*expected, "kind"]
    sidecar["user_metadata"]["m"] = "changed"
    sidecar["encryption_params"]["nested"]["list"].append(3)
    assert record.user_metadata == {"m": "v"}
    assert record.encryption_params == {"nested": {"list": [1, {"a": 2}]}}


def test_control_record(tmp_path: Path) -> None:
    control = ControlRecord(str(tmp_path))
    control.prepare()
    control.write("buckets", "photos", {"name": "photos"})
    control.write("buckets", "a/b?", {"name": "odd"})
    assert dict(control.items("buckets")) == {"a/b?": {"name": "odd"},
                                              "photos": {"name": "photos"}}
    control.remove("buckets", "photos")
    control.remove("buckets", "photos")
    assert [k for k, _ in control.items("buckets")] == ["a/b?"]


def test_segments_of_plain_and_composite_objects() -> None:
    from objstore.blobs.segments import Segment, part_span, plan_segments

    plain = ObjectRecord("b", "k", "null", "blob", 10, "e", 0.0)
    assert plan_segments(plain, 2, 5) == [Segment("blob", 2, 5)]
    parts = tuple(PartRef(i + 1, f"p{i + 1}", 4, "e") for i in range(3))  # 12 bytes
    composite = ObjectRecord("b", "k", "null", "c", 12, "e-3", 0.0, parts=parts)
    assert plan_segments(composite, 0, 12) == [Segment("p1", 0, 4), Segment("p2", 0, 4),
                                               Segment("p3", 0, 4)]
    assert plan_segments(composite, 3, 6) == [Segment("p1", 3, 1), Segment("p2", 0, 4),
                                              Segment("p3", 0, 1)]
    assert plan_segments(composite, 8, 4) == [Segment("p3", 0, 4)]
    assert part_span(composite, 2) == (4, 4) and part_span(composite, 4) is None
    assert part_span(plain, 1) == (0, 10)


def test_copy_segments_with_and_without_md5(store: BlobStore) -> None:
    from objstore.blobs.segments import Segment

    a, b = new_blob_id(), new_blob_id()
    store.commit_bytes(b"0123456789", a, {})
    store.commit_bytes(b"abcdef", b, {})
    copy = new_blob_id()
    digest = store.copy_segments([Segment(a, 5, 5), Segment(b, 0, 3)], copy, {"k": 1},
                                 want_md5=True)
    assert store.blob_reader(copy).read_all() == b"56789abc"
    assert digest == hashlib.md5(b"56789abc").hexdigest()
    plain = new_blob_id()
    assert store.copy_segments([Segment(a, 0, 10)], plain, {}, want_md5=False) is None
    assert store.blob_reader(plain, 10).read_all() == b"0123456789"
    assert store.read_sidecar(copy)["k"] == 1


@pytest.mark.parametrize("size", [0, 1, 2047, 2048, 4096, 4095 * 3 + 7, 32 * 1024,
                                  32 * 1024 + 1, 200_000])
def test_updating_a_digest_in_pieces_that_keep_the_gil_gives_the_same_digest(
        size: int) -> None:
    data = os.urandom(size)
    for algorithm in ("md5", "sha256"):
        whole, pieces = hashlib.new(algorithm, data), hashlib.new(algorithm)
        update_keeping_gil(pieces, data)
        assert pieces.hexdigest() == whole.hexdigest()


def test_only_a_small_buffer_is_fed_in_pieces_below_the_gil_release_size() -> None:
    class Recording:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def update(self, data: bytes | memoryview) -> None:
            self.sizes.append(len(data))

    small, large = Recording(), Recording()
    update_keeping_gil(small, b"x" * 10_000)
    update_keeping_gil(large, b"x" * (KEEP_GIL_BYTES + 1))
    assert sum(small.sizes) == 10_000 and max(small.sizes) < GIL_RELEASE_BYTES
    assert large.sizes == [KEEP_GIL_BYTES + 1]  # long enough to hash off the GIL
