"""Whole-object ETags and checksums of multipart objects, computed from part digests only,
checked against the same values computed over the concatenated bytes."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import zlib
from pathlib import Path

import pytest
from awscrt import checksums

from objstore.blobs import checksum_combine as combine
from objstore.blobs.store import BlobStore
from objstore.http.spool import BodySpool

CRCS = {
    "crc32": lambda data: zlib.crc32(data).to_bytes(4, "big"),
    "crc32c": lambda data: checksums.crc32c(data).to_bytes(4, "big"),
    "crc64nvme": lambda data: checksums.crc64nvme(data).to_bytes(8, "big"),
}
HASHES = {
    "sha1": lambda data: hashlib.sha1(data).digest(),
    "sha256": lambda data: hashlib.sha256(data).digest(),
}
DIGESTS = {**CRCS, **HASHES}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def chunks(seed: int, sizes: list[int]) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(size) for size in sizes]


def test_composite_etag_is_md5_of_binary_part_md5s() -> None:
    parts = [b"a" * 10, b"b" * 20, b""]
    md5s = [hashlib.md5(p).hexdigest() for p in parts]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert combine.composite_etag(md5s) == f"{expected}-3"


def test_composite_etag_known_value() -> None:
    md5s = [hashlib.md5(b"hello").hexdigest(), hashlib.md5(b"world").hexdigest()]
    assert combine.composite_etag(md5s) == "065947336a2f2a95ba8899f3675c3be6-2"


def test_composite_etag_refuses_non_hex() -> None:
    with pytest.raises(combine.ChecksumValueError):
        combine.composite_etag(["not-hex"])


@pytest.mark.parametrize("algorithm", sorted(DIGESTS))
def test_composite_checksum_hashes_the_raw_part_digests(algorithm: str) -> None:
    digest = DIGESTS[algorithm]
    parts = chunks(1, [1000, 7, 0, 4096])
    values = [b64(digest(p)) for p in parts]
    expected = b64(digest(b"".join(digest(p) for p in parts)))
    assert combine.composite_checksum(algorithm, values) == f"{expected}-4"


@pytest.mark.parametrize("algorithm", sorted(CRCS))
@pytest.mark.parametrize("sizes", [[1], [0], [5, 0, 3], [1 << 20, 17, 1 << 16], [0, 0]])
def test_full_object_crc_equals_crc_of_the_concatenation(algorithm: str, sizes: list[int]
                                                          ) -> None:
    crc = CRCS[algorithm]
    parts = chunks(len(sizes), sizes)
    combined = combine.full_object_crc(algorithm, [(b64(crc(p)), len(p)) for p in parts])
    assert combined == b64(crc(b"".join(parts)))


@pytest.mark.parametrize("algorithm", sorted(CRCS))
def test_full_object_crc_of_many_large_parts_without_their_bytes(algorithm: str) -> None:
    # 100 parts of 10 MiB of zeros, combined from a single part's CRC and lengths alone:
    # the result must equal the CRC of 1000 MiB of zeros computed incrementally.
    crc_fn = {"crc32": lambda d, c: zlib.crc32(d, c), "crc32c": checksums.crc32c,
              "crc64nvme": checksums.crc64nvme}[algorithm]
    width = 8 if algorithm == "crc64nvme" else 4
    block = bytes(10 << 20)
    one = crc_fn(block, 0)
    running = 0
    for _ in range(100):
        running = crc_fn(block, running)
    parts = [(b64(one.to_bytes(width, "big")), len(block))] * 100
    assert combine.full_object_crc(algorithm, parts) == b64(running.to_bytes(width, "big"))


@pytest.mark.parametrize("algorithm", sorted(HASHES))
def test_full_object_is_refused_for_hashes(algorithm: str) -> None:
    with pytest.raises(ValueError):
        combine.full_object_crc(algorithm, [(b64(HASHES[algorithm](b"x")), 1)])


@pytest.mark.parametrize(("algorithm", "value"), [
    ("crc32", "AAAA"),  # 3 bytes
    ("crc32", "not base64!"),
    ("crc64nvme", b64(b"1234")),  # a CRC32-sized value
    ("sha256", b64(b"short")),
])
def test_digests_of_the_wrong_width_are_refused(algorithm: str, value: str) -> None:
    with pytest.raises(combine.ChecksumValueError):
        combine.composite_checksum(algorithm, [value])


@pytest.mark.parametrize("algorithm", sorted(DIGESTS))
@pytest.mark.parametrize("size", [0, 100, 3 * 1024 * 1024 + 5])
def test_blob_and_spool_checksums(tmp_path: Path, algorithm: str, size: int) -> None:
    data = os.urandom(size)
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    blob_id = "6f1e0b7e-2f53-4e0b-9d5c-0a1b2c3d4e5f"
    blobs.commit_bytes(data, blob_id, {"kind": "part"})
    assert combine.blob_checksum(blobs, blob_id, algorithm) == b64(DIGESTS[algorithm](data))
    spool = BodySpool(blobs.tmp_dir, memory_limit=1024)
    spool.write(data)
    assert combine.spool_checksum(spool, algorithm) == b64(DIGESTS[algorithm](data))
    spool.close()
