"""The S3 checksum algorithms: incremental CRC32, CRC32C, CRC64NVME, SHA-1 and SHA-256, with
digests encoded as S3 encodes x-amz-checksum-* values (base64 of the big-endian digest).

Pure and dependency-light (hashlib, zlib, awscrt's C CRCs), so every layer may use it.
awscrt is imported when a CRC-32C or CRC-64/NVME is first asked for (`crc_functions`): its
C library takes ~60-100 ms to load, which every process start paid for an algorithm few
requests name.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable
from functools import cache

CHECKSUM_ALGORITHMS: tuple[str, ...] = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")
_CRC_WIDTH = {"crc32": 4, "crc32c": 4, "crc64nvme": 8}


@cache
def crc_functions(algorithm: str) -> tuple[Callable[[bytes, int], int],
                                           Callable[[int, int, int], int]]:
    """(crc(data, previous), combine(crc1, crc2, length2)) of a CRC algorithm by its
    lower-case name; KeyError for another name."""
    from awscrt import checksums

    return {
        "crc32": (checksums.crc32, checksums.combine_crc32),
        "crc32c": (checksums.crc32c, checksums.combine_crc32c),
        "crc64nvme": (checksums.crc64nvme, checksums.combine_crc64nvme),
    }[algorithm]


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
        # CRC-32 from zlib (the same function as awscrt's); never called for a hash
        self._crc_of: Callable[[bytes, int], int] = (
            crc_functions(name)[0] if name in ("crc32c", "crc64nvme") else zlib.crc32)

    def update(self, data: bytes) -> None:
        if self._hash is not None:
            self._hash.update(data)
        else:
            self._crc = self._crc_of(data, self._crc)

    def digest(self) -> bytes:
        if self._hash is not None:
            return self._hash.digest()
        return self._crc.to_bytes(_CRC_WIDTH[self.algorithm], "big")

    def digest_b64(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")
