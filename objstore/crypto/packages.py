"""The stored format of an encrypted blob: authenticated packages of 64 KiB of plaintext.

A blob encrypted under a data key (one random AES-256 key per object) is the sequence of
packages 0, 1, ... n-1; package i is AES-256-GCM of the plaintext bytes
[i * 64 KiB, (i + 1) * 64 KiB), i.e. its ciphertext followed by the 16-byte tag. Every
package but the last holds exactly 64 KiB; the last one (the only one of an empty object)
holds what is left and is marked final. The nonce is the sequence number (unique per key,
and the key is never reused across objects), and the associated data binds the format, the
sequence number and the final flag, so that a package moved, swapped (from this object or
another), cut short, altered, or a blob truncated at a package boundary, is an
`InvalidPackage` error, never wrong bytes.

Offsets map without an index: logical byte x is in package x // 64 KiB, which starts at
stored offset (x // 64 KiB) * (64 KiB + 16). A read of a logical range decrypts only the
packages it covers (`DecryptingSource`). Pure apart from the `ByteSource` it reads.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from objstore.blobs.stages import ByteSource, UnitSource
from objstore.errors import ServerCondition

PACKAGE_PLAINTEXT = 64 * 1024
TAG_BYTES = 16
PACKAGE_STORED = PACKAGE_PLAINTEXT + TAG_BYTES
DATA_KEY_BYTES = 32
FORMAT = "aes256gcm-64k-v1"  # recorded in encryption_params["format"]
_AAD_PREFIX = b"objstore/" + FORMAT.encode() + b"\0"


class InvalidPackage(OSError, ServerCondition):
    """A stored package does not authenticate: the blob was altered, truncated or mixed
    (answered InternalError, logged in one line; `check --deep` reports it)."""

    def __init__(self, message: str) -> None:
        OSError.__init__(self, message)
        self.code = "InternalError"
        self.message = message


def package_count(size: int) -> int:
    """How many packages hold `size` bytes of plaintext (an empty object has one)."""
    return max(1, -(-size // PACKAGE_PLAINTEXT))


def stored_size(size: int) -> int:
    """The stored size of a blob holding `size` bytes of plaintext."""
    return size + package_count(size) * TAG_BYTES


def plaintext_size(stored: int) -> int:
    """The plaintext size of a blob of `stored` bytes (the inverse of `stored_size`);
    InvalidPackage when no plaintext size gives that length (a cut package)."""
    count = max(1, -(-stored // PACKAGE_STORED))
    size = stored - count * TAG_BYTES
    if size < 0 or stored_size(size) != stored:
        raise InvalidPackage(f"an encrypted blob of {stored} bytes is truncated")
    return size


def _nonce(seq: int) -> bytes:
    return struct.pack(">IQ", 0, seq)


def _aad(seq: int, final: bool) -> bytes:
    return _AAD_PREFIX + struct.pack(">QB", seq, 1 if final else 0)


def seal_package(cipher: AESGCM, seq: int, plaintext: bytes, final: bool) -> bytes:
    return cipher.encrypt(_nonce(seq), plaintext, _aad(seq, final))


def open_package(cipher: AESGCM, seq: int, stored: bytes | memoryview, final: bool) -> bytes:
    try:
        return cipher.decrypt(_nonce(seq), stored, _aad(seq, final))
    except InvalidTag:
        raise InvalidPackage(f"encrypted package {seq} does not authenticate "
                             "(altered, moved, truncated or from another object)") from None


class PackageEncryptor:
    """A `WriteStage`: plaintext in, packages out. Holds at most one package of plaintext
    (the last one is sealed by `finish`, marked final)."""

    def __init__(self, data_key: bytes) -> None:
        self._cipher = AESGCM(data_key)
        self._pending = bytearray()
        self._seq = 0

    def transform(self, data: bytes) -> bytes:
        pending = self._pending
        if len(pending) + len(data) <= PACKAGE_PLAINTEXT:
            pending += data
            return b""
        out = []
        view = memoryview(data)
        at = 0
        if pending:  # complete the held package (more input follows it: not the last)
            at = PACKAGE_PLAINTEXT - len(pending)
            pending += view[:at]
            out.append(self._seal(bytes(pending)))
            pending.clear()
        # Keep at least one byte back: the last package is sealed by finish(), as final.
        while len(data) - at > PACKAGE_PLAINTEXT:
            out.append(self._seal(view[at:at + PACKAGE_PLAINTEXT]))
            at += PACKAGE_PLAINTEXT
        pending += view[at:]
        return b"".join(out)

    def _seal(self, plaintext: bytes | memoryview) -> bytes:
        sealed = self._cipher.encrypt(_nonce(self._seq), plaintext, _aad(self._seq, False))
        self._seq += 1
        return sealed

    def finish(self) -> bytes:
        sealed = seal_package(self._cipher, self._seq, bytes(self._pending), True)
        self._pending = bytearray()
        self._seq += 1
        return sealed


class DecryptingSource(UnitSource):
    """The plaintext of an encrypted blob of `size` logical bytes, read by range from the
    `ByteSource` of its stored bytes; decrypts only the packages a read covers and keeps
    the last one (a streamed GET reads whole packages in order)."""

    __slots__ = ("_cipher", "_count")

    def __init__(self, source: ByteSource, data_key: bytes, size: int) -> None:
        super().__init__(source, size, PACKAGE_PLAINTEXT)
        self._cipher = AESGCM(data_key)
        self._count = package_count(size)

    def _open_units(self, first: int, last: int) -> Iterator[bytes]:
        stored_end = min(self._stored_end(last), stored_size(self._size))
        stored = memoryview(self._source.read(first * PACKAGE_STORED,
                                              stored_end - first * PACKAGE_STORED))
        at = 0
        for seq in range(first, last + 1):  # views: no copy of the ciphertext
            take = min(PACKAGE_STORED, len(stored) - at)
            yield open_package(self._cipher, seq, stored[at:at + take], seq == self._count - 1)
            at += take

    def _stored_end(self, seq: int) -> int:
        return (seq + 1) * PACKAGE_STORED

