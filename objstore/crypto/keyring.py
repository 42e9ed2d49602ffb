"""From the configuration to the node's blob stages: where the master keys live
(`[encryption] master_key_file`, else `<data_dir>/control/keys/master.key`, inside the
node's private tree), how their versions are sealed in it (`kms_provider`: "local" writes
them as they are, "vault" seals them with the transit engine, crypto/vault.py), and the
`BlobStages` factory that uses them. The daemon creates the file at first start
(`create=True`); tools (`objstore check`) only load an existing one; `objstore key rotate`
adds a version (`rotate`). Start-up file and Vault I/O only."""

from __future__ import annotations

import os

from objstore.blobs.factory import BlobStages
from objstore.config import Config
from objstore.crypto.master_key import (
    LOCAL,
    Keyring,
    KeySealer,
    add_version,
    load_or_create,
)


def master_key_path(config: Config) -> str:
    return (config.encryption.master_key_file
            or os.path.join(config.storage.data_dir, "control", "keys", "master.key"))


def sealer_for(config: Config) -> KeySealer:
    """How the configured provider seals key versions (Vault: reads the token file)."""
    encryption = config.encryption
    if encryption.kms_provider != "vault":
        return LOCAL
    from objstore.crypto.vault import VaultSealer, read_token
    assert encryption.vault_token_file is not None  # the config requires it with vault
    return VaultSealer(encryption.vault_url, read_token(encryption.vault_token_file),
                       encryption.vault_key_name, mount=encryption.vault_mount,
                       ca_file=encryption.vault_ca_file)


def node_keyring(config: Config, *, create: bool) -> Keyring | None:
    """The node's master keys; None without [encryption] enabled (or, for a tool, without
    a key file yet). Raises MasterKeyError (unreadable, malformed, Vault refusing)."""
    if not config.encryption.enabled:
        return None
    path = master_key_path(config)
    if not create and not os.path.exists(path):
        return None
    return load_or_create(path, sealer_for(config))


def node_stages(config: Config, *, create: bool) -> BlobStages:
    """The node's stages: the identity plan only without [encryption] enabled (or, for a
    tool, without a key file yet). Raises MasterKeyError (unreadable or malformed key)."""
    keyring = node_keyring(config, create=create)
    return BlobStages() if keyring is None else BlobStages(keyring)


def rotate(config: Config) -> Keyring:
    """`objstore key rotate`: a new master key version, active at the node's next start."""
    return add_version(master_key_path(config), sealer_for(config))


def kms_endpoint(config: Config) -> str | None:
    """What /admin/info reports as kms_endpoint: Vault's URL (never the token)."""
    encryption = config.encryption
    if encryption.enabled and encryption.kms_provider == "vault":
        return encryption.vault_url or None
    return None
