"""The S3 checksum algorithms: incremental CRC32, CRC32C, CRC64NVME, SHA-1 and SHA-256, with
digests encoded as S3 encodes x-amz-checksum-* values (base64 of the big-endian digest).

Pure and dependency-light (hashlib, zlib, awscrt's C CRCs), so every layer may use it.
"""

from __future__ import annotations

import base64
import hashlib
import zlib

from awscrt import checksums

CHECKSUM_ALGORITHMS: tuple[str, ...] = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")
_CRC_WIDTH = {"crc32": 4, "crc32c": 4, "crc64nvme": 8}


class Checksummer:
    """Incremental checksum by S3 algorithm name (case-insensitive). Raises ValueError for
    an unknown algorithm."""

    def __init__(self, algorithm: str) -> None:
        name = algorithm.lower()
        if name not in CHECKSUM_ALGORITHMS:
            raise ValueError(f"Unsupported checksum algorithm {algorithm!r}")
        self.algorithm = name
        self._crc = 0
        self._hash = hashlib.new(name) if name not in _CRC_WIDTH else None

    def update(self, data: bytes) -> None:
        if self._hash is not None:
            self._hash.update(data)
        elif self.algorithm == "crc32":
            self._crc = zlib.crc32(data, self._crc)
        elif self.algorithm == "crc32c":
            self._crc = checksums.crc32c(data, self._crc)
        else:
            self._crc = checksums.crc64nvme(data, self._crc)

    def digest(self) -> bytes:
        if self._hash is not None:
            return self._hash.digest()
        return self._crc.to_bytes(_CRC_WIDTH[self.algorithm], "big")

    def digest_b64(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")
