"""From the configuration to the node's blob stages: where the local master key lives
(`[encryption] master_key_file`, else `<data_dir>/control/keys/master.key`, inside the
node's private tree) and the `BlobStages` factory that uses it. The daemon creates the key
at first start (`create=True`); tools (`objstore check`) only load an existing one.
Start-up file I/O only."""

from __future__ import annotations

import os

from objstore.blobs.factory import BlobStages
from objstore.config import Config
from objstore.crypto.master_key import load_or_create


def master_key_path(config: Config) -> str:
    return (config.encryption.master_key_file
            or os.path.join(config.storage.data_dir, "control", "keys", "master.key"))


def node_stages(config: Config, *, create: bool) -> BlobStages:
    """The node's stages: the identity plan only without [encryption] enabled (or, for a
    tool, without a key file yet). Raises MasterKeyError (unreadable or malformed key)."""
    if not config.encryption.enabled:
        return BlobStages()
    path = master_key_path(config)
    if not create and not os.path.exists(path):
        return BlobStages()
    return BlobStages(load_or_create(path))
