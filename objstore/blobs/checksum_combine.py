"""Checksums and ETags of multipart objects, computed from their parts' digests alone.

A completed multipart object references its parts' blobs, so its whole-object values must
come from the per-part values without reading a byte:

* the ETag: hex(md5(binary md5 of part 1 || part 2 || ...)) + "-N";
* a COMPOSITE checksum: base64(H(raw digest of part 1 || part 2 || ...)) + "-N", with H the
  upload's algorithm;
* a FULL_OBJECT checksum (CRC algorithms only): the CRC of the concatenated bytes, obtained
  by combining the part CRCs and lengths in GF(2) (awscrt's combine functions, the same C
  code the AWS SDKs use).

Pure functions, except `blob_checksum` and `spool_checksum`, which read their bytes back
(blocking: IO pool only; a blob through a `BlobReader`, like every read of object bytes).
Nothing here imports Twisted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

from objstore.blobs.store import BlobStore
from objstore.checksums import Checksummer, crc_functions

READ_CHUNK_BYTES = 1024 * 1024

_CRC_WIDTH = {"crc32": 4, "crc32c": 4, "crc64nvme": 8}
_HASHES = ("sha1", "sha256")

CRC_ALGORITHMS = frozenset(_CRC_WIDTH)
ALGORITHMS = frozenset(_CRC_WIDTH) | frozenset(_HASHES)


class ChecksumValueError(ValueError):
    """A stored or claimed digest is not valid base64 of the algorithm's width."""


def composite_etag(md5_hexes: Sequence[str]) -> str:
    """The multipart ETag (without quotes) of parts with these hex MD5 ETags, in order."""
    try:
        joined = b"".join(bytes.fromhex(h) for h in md5_hexes)
    except ValueError:
        raise ChecksumValueError("a part ETag is not a hex MD5") from None
    return f"{hashlib.md5(joined).hexdigest()}-{len(md5_hexes)}"


def raw_digest(algorithm: str, value_b64: str) -> bytes:
    """The bytes of a base64 digest, checked against the algorithm's width."""
    try:
        raw = base64.b64decode(value_b64, validate=True)
    except (binascii.Error, ValueError):
        raise ChecksumValueError(f"not base64: {value_b64!r}") from None
    if len(raw) != _width(algorithm):
        raise ChecksumValueError(f"{algorithm} digest of {len(raw)} bytes")
    return raw


def composite_checksum(algorithm: str, part_values_b64: Sequence[str]) -> str:
    """base64(H(concat(raw part digests))) + "-N" for a COMPOSITE multipart checksum."""
    joined = b"".join(raw_digest(algorithm, v) for v in part_values_b64)
    if algorithm in _CRC_WIDTH:
        width, (crc, _) = _CRC_WIDTH[algorithm], crc_functions(algorithm)
        digest = crc(joined, 0).to_bytes(width, "big")
    else:
        digest = hashlib.new(algorithm, joined).digest()
    return f"{_b64(digest)}-{len(part_values_b64)}"


def full_object_crc(algorithm: str, parts: Sequence[tuple[str, int]]) -> str:
    """The CRC of the concatenation of parts given as (base64 CRC, length in bytes)."""
    if algorithm not in _CRC_WIDTH:
        raise ValueError(f"{algorithm} has no full-object combination")
    width, (_, combine) = _CRC_WIDTH[algorithm], crc_functions(algorithm)
    combined = 0
    for index, (value_b64, length) in enumerate(parts):
        value = int.from_bytes(raw_digest(algorithm, value_b64), "big")
        combined = value if index == 0 else combine(combined, value, length)
    return _b64(combined.to_bytes(width, "big"))


class ReadableBody(Protocol):
    """A spooled request body as the checksum reader needs it."""

    def seek(self, offset: int, whence: int = 0) -> int: ...

    def read(self, size: int = -1) -> bytes: ...


def blob_checksum(blobs: BlobStore, blob_id: str, algorithm: str,
                  size: int | None = None) -> str:
    """The base64 checksum of a stored blob's bytes (`size`: from its record, else the
    file's)."""
    with blobs.blob_reader(blob_id, size) as reader:
        return chunks_checksum(algorithm, reader.chunks(READ_CHUNK_BYTES))


def spool_checksum(body: ReadableBody, algorithm: str) -> str:
    """The base64 checksum of a spooled request body read as a file."""
    body.seek(0)
    return chunks_checksum(algorithm, iter(lambda: body.read(READ_CHUNK_BYTES), b""))


def chunks_checksum(algorithm: str, chunks: Iterable[bytes]) -> str:
    summer = Checksummer(algorithm)
    for chunk in chunks:
        summer.update(chunk)
    return summer.digest_b64()


def _width(algorithm: str) -> int:
    if algorithm in _CRC_WIDTH:
        return _CRC_WIDTH[algorithm]
    if algorithm in _HASHES:
        return hashlib.new(algorithm).digest_size
    raise ValueError(f"unknown checksum algorithm {algorithm!r}")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
