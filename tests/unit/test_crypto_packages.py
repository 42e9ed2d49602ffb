"""The encrypted package format (crypto/packages.py) and the local master key
(crypto/master_key.py): round trips, ranges, and every tamper case an error, never wrong
bytes."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from objstore.crypto.master_key import (
    LocalMasterKey,
    MasterKeyError,
    UnwrapError,
    key_context,
    load_or_create,
)
from objstore.crypto.packages import (
    PACKAGE_PLAINTEXT,
    PACKAGE_STORED,
    DecryptingSource,
    InvalidPackage,
    PackageEncryptor,
    stored_size,
)

P = PACKAGE_PLAINTEXT


class Bytes:
    """A ByteSource over bytes in memory."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        if offset + length > len(self.data):
            raise OSError("short")
        return self.data[offset:offset + length]

    def close(self) -> None:
        pass


def encrypt(key: bytes, plaintext: bytes, pieces: int = 7) -> bytes:
    stage = PackageEncryptor(key)
    step = max(1, len(plaintext) // pieces)
    out = [stage.transform(plaintext[i:i + step]) for i in range(0, len(plaintext), step)]
    out.append(stage.finish())
    return b"".join(out)


@pytest.mark.parametrize("size", [0, 1, P - 1, P, P + 1, 3 * P, 3 * P + 17])
def test_round_trip_and_stored_size(size: int) -> None:
    key = os.urandom(32)
    plaintext = os.urandom(size)
    stored = encrypt(key, plaintext)
    assert len(stored) == stored_size(size)
    source = DecryptingSource(Bytes(stored), key, size)
    assert source.read(0, size) == plaintext


def test_ranges_across_package_boundaries_read_only_their_packages() -> None:
    key = os.urandom(32)
    plaintext = os.urandom(5 * P + 100)
    below = Bytes(encrypt(key, plaintext))
    source = DecryptingSource(below, key, len(plaintext))
    for offset, length in [(P - 3, 6), (2 * P - 1, P + 2), (5 * P + 99, 1), (0, 1),
                           (3 * P, P), (17, 4 * P)]:
        below.reads.clear()
        assert source.read(offset, length) == plaintext[offset:offset + length]
        first, last = offset // P, (offset + length - 1) // P
        for stored_offset, stored_length in below.reads:
            assert stored_offset >= first * PACKAGE_STORED
            assert stored_offset + stored_length <= (last + 1) * PACKAGE_STORED


def test_pieces_are_the_packages_cut_to_the_range() -> None:
    """`read_pieces` (what a streamed GET writes) gives the bytes `read` gives, one piece
    per package covered, the first and last cut to the range; streamed reads in order
    open every package once."""
    key = os.urandom(32)
    plaintext = os.urandom(5 * P + 100)
    below = Bytes(encrypt(key, plaintext))
    source = DecryptingSource(below, key, len(plaintext))
    for offset, length in [(P - 3, 6), (2 * P - 1, P + 2), (5 * P + 99, 1), (0, 1),
                           (3 * P, P), (17, 4 * P), (0, 5 * P + 100)]:
        pieces = source.read_pieces(offset, length)
        assert b"".join(pieces) == plaintext[offset:offset + length]
        assert len(pieces) == (offset + length - 1) // P - offset // P + 1
    assert source.read_pieces(7, 0) == []
    streamed = DecryptingSource(Bytes(encrypt(key, plaintext)), key, len(plaintext))
    step = 3 * P // 2  # chunks that end inside a package: the next one takes it again
    got = [streamed.read_pieces(at, min(step, len(plaintext) - at))
           for at in range(0, len(plaintext), step)]
    assert b"".join(b"".join(chunk) for chunk in got) == plaintext


def _fails(stored: bytes, key: bytes, size: int, offset: int = 0, length: int | None = None
           ) -> None:
    source = DecryptingSource(Bytes(stored), key, size)
    with pytest.raises(OSError):
        source.read(offset, size - offset if length is None else length)


def test_a_flipped_byte_is_an_error() -> None:
    key, plaintext = os.urandom(32), os.urandom(3 * P)
    stored = bytearray(encrypt(key, plaintext))
    stored[PACKAGE_STORED + 5] ^= 1
    with pytest.raises(InvalidPackage):
        DecryptingSource(Bytes(bytes(stored)), key, len(plaintext)).read(P, 10)
    assert DecryptingSource(Bytes(bytes(stored)), key, len(plaintext)).read(0, P) == \
        plaintext[:P]  # the packages around it still read


def test_reordered_packages_are_an_error() -> None:
    key, plaintext = os.urandom(32), os.urandom(3 * P)
    stored = encrypt(key, plaintext)
    packages = [stored[i:i + PACKAGE_STORED] for i in range(0, len(stored), PACKAGE_STORED)]
    swapped = packages[1] + packages[0] + b"".join(packages[2:])
    _fails(swapped, key, len(plaintext))


def test_truncation_at_a_package_boundary_is_an_error() -> None:
    key, plaintext = os.urandom(32), os.urandom(3 * P)
    stored = encrypt(key, plaintext)
    # The record says 2 packages' worth: the second one was sealed as not final.
    _fails(stored[:2 * PACKAGE_STORED], key, 2 * P)
    _fails(stored[:2 * PACKAGE_STORED + 10], key, len(plaintext))


def test_a_package_from_another_object_is_an_error() -> None:
    plaintext = os.urandom(2 * P)
    key_a, key_b = os.urandom(32), os.urandom(32)
    a, b = encrypt(key_a, plaintext), encrypt(key_b, plaintext)
    mixed = a[:PACKAGE_STORED] + b[PACKAGE_STORED:]
    _fails(mixed, key_a, len(plaintext))


def test_the_wrong_key_is_an_error() -> None:
    plaintext = os.urandom(100)
    _fails(encrypt(os.urandom(32), plaintext), os.urandom(32), len(plaintext))


def test_master_key_created_private_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "private" / "master.key"
    created = load_or_create(str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = load_or_create(str(path))
    assert again.key_id == created.key_id and created.key_id.startswith("local:")
    assert path.read_text().split()[1] not in repr(created)
    data_key = os.urandom(32)
    context = key_context("bucket", "key", "v1")
    assert again.unwrap(created.key_id, created.wrap(data_key, context), context) == data_key


@pytest.mark.parametrize("content", ["", "objstore-master-key-v1 abc\n", "x" * 90,
                                     "objstore-master-key-v1 " + "0" * 63 + "g\n"])
def test_a_malformed_master_key_refuses(tmp_path: Path, content: str) -> None:
    path = tmp_path / "master.key"
    path.write_text(content)
    with pytest.raises(MasterKeyError, match="not an objstore master key"):
        load_or_create(str(path))


def test_an_unreadable_master_key_refuses(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    path.mkdir()  # a directory: reading it fails, as an unreadable file does (also as root)
    with pytest.raises(MasterKeyError, match="can not be read"):
        load_or_create(str(path))


def test_a_wrapped_key_is_bound_to_its_object_and_master() -> None:
    master = LocalMasterKey(os.urandom(32))
    data_key = os.urandom(32)
    wrapped = master.wrap(data_key, key_context("b", "k", "v1"))
    for context in (key_context("b", "k", "v2"), key_context("b", "k2", "v1"),
                    key_context("b2", "k", "v1"), b"b\0k\0v1\0"):
        with pytest.raises(UnwrapError):
            master.unwrap(master.key_id, wrapped, context)
    other = LocalMasterKey(os.urandom(32))
    with pytest.raises(UnwrapError):
        other.unwrap(master.key_id, wrapped, key_context("b", "k", "v1"))
    with pytest.raises(UnwrapError):
        other.unwrap(other.key_id, wrapped, key_context("b", "k", "v1"))


def test_the_node_refuses_to_start_on_a_malformed_master_key(tmp_path: Path) -> None:
    from objstore.config import Config, Encryption, Storage, load_config
    from objstore.crypto.keyring import master_key_path
    from objstore.iam.bootstrap import BootstrapError
    from objstore.storage_open import blob_stages

    base = load_config(None)
    config: Config = dataclasses.replace(
        base, storage=Storage(data_dir=str(tmp_path / "data")),
        encryption=Encryption(enabled=True))
    path = Path(master_key_path(config))
    assert path == tmp_path / "data" / "control" / "keys" / "master.key"
    first = blob_stages(config)
    assert path.exists() and first.key_id is not None
    assert blob_stages(config).key_id == first.key_id  # the same key at the next start
    path.write_text("garbage\n")
    with pytest.raises(BootstrapError, match="not an objstore master key"):
        blob_stages(config)
    assert blob_stages(dataclasses.replace(config, encryption=Encryption())).key_id is None


def test_admin_info_reports_the_provider_only_with_encryption() -> None:
    from objstore.admin.api import server_info

    plain = server_info(0.0, tls=False, backend="sqlite")()
    assert plain["encryption_enabled"] is False and "kms_provider" not in plain
    local = server_info(0.0, tls=False, backend="sqlite", kms_provider="local")()
    assert local["encryption_enabled"] is True and local["kms_provider"] == "local"
