"""Master key versions (crypto/master_key.py): rotation appends a version that wraps from
then on while every older one still unwraps what it wrapped; the key ids (never a key)
enter the cluster fingerprint, so nodes holding other keys are config drift."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from objstore.cluster.auth import canonical_config, config_fingerprint, fingerprint_matches
from objstore.config import Cluster
from objstore.crypto.master_key import (
    MAX_VERSIONS,
    MasterKeyError,
    UnwrapError,
    add_version,
    key_context,
    load,
    load_or_create,
)

CONTEXT = key_context("bucket", "key", "v1")


def test_a_new_version_wraps_and_the_old_one_still_unwraps(tmp_path: Path) -> None:
    path = str(tmp_path / "keys" / "master.key")
    first = load_or_create(path)
    data_key = os.urandom(32)
    old_wrap = first.wrap(data_key, CONTEXT)
    rotated = add_version(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert rotated.key_ids == (first.key_id, rotated.key_id) and rotated.key_id != first.key_id
    assert rotated.unwrap(first.key_id, old_wrap, CONTEXT) == data_key
    assert rotated.needs_rewrap(first.key_id) and not rotated.needs_rewrap(rotated.key_id)
    new_wrap = rotated.wrap(data_key, CONTEXT)
    assert load(path).unwrap(rotated.key_id, new_wrap, CONTEXT) == data_key
    with pytest.raises(UnwrapError, match="does not hold"):
        first.unwrap(rotated.key_id, new_wrap, CONTEXT)
    for key_hex in Path(path).read_text().split()[1::2]:
        assert key_hex not in repr(rotated)


def test_rotation_refuses_a_missing_or_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    with pytest.raises(MasterKeyError, match="does not exist"):
        add_version(str(path))
    path.write_text("objstore-master-key-v1 " + "0" * 64 + "\ngarbage\n")
    with pytest.raises(MasterKeyError, match="not an objstore master key"):
        add_version(str(path))
    assert path.read_text().endswith("garbage\n")  # untouched


def test_versions_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    path.write_text("".join(f"objstore-master-key-v1 {os.urandom(32).hex()}\n"
                            for _ in range(MAX_VERSIONS)))
    with pytest.raises(MasterKeyError, match="at most"):
        add_version(str(path))


def test_key_ids_enter_the_fingerprint_only_with_encryption() -> None:
    plain = Cluster(enabled=True, secret="s" * 20, cluster_size=2)
    assert b"encryption" not in canonical_config(plain)  # unchanged without encryption
    one = Cluster(enabled=True, secret="s" * 20, cluster_size=2,
                  encryption_key_ids=("local:aaaa",))
    other = Cluster(enabled=True, secret="s" * 20, cluster_size=2,
                    encryption_key_ids=("local:bbbb",))
    assert b"local:aaaa" in canonical_config(one)
    assert fingerprint_matches(one, config_fingerprint(one))
    assert not fingerprint_matches(one, config_fingerprint(other))
    assert not fingerprint_matches(one, config_fingerprint(plain))
