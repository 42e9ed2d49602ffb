"""Opening a node's storage: the blob store, the control record and the metadata store,
and, in the first process of a node, preparing them (layout, private files, migrations,
the root credential, the deletes a crash left in doubt).

Its own module, apart from the composition root (service.py), so that the short-lived
child that prepares the storage of a multi-worker node (prefork/prepare.py) imports only
the storage layers and not the S3, admin and cluster stacks: about a second of CPU less at
each such start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from objstore.blobs.control import ControlRecord
from objstore.blobs.factory import BlobStages
from objstore.blobs.store import BlobStore
from objstore.cli.check import resolve_withdrawn
from objstore.clock_offset import wall_clock
from objstore.config import Config
from objstore.crypto.keyring import node_stages
from objstore.crypto.master_key import MasterKeyError
from objstore.iam.bootstrap import (
    BootstrapError,
    BootstrapResult,
    ensure_builtin_grants,
    ensure_root,
)
from objstore.meta.dialect import sqlite_files
from objstore.meta.node_identity import ensure_node_id
from objstore.meta.store import SyncMetaStore, open_sync_store, sqlite_path_for
from objstore.private_files import directory_warnings, refuse_exposed
from objstore.startup import warn_startup


@dataclass
class OpenStorage:
    blobs: BlobStore
    control: ControlRecord
    sync_store: SyncMetaStore
    bootstrap: BootstrapResult | None  # None unless prepared
    node_id: str

    def close(self) -> BootstrapResult:
        self.sync_store.close()
        assert self.bootstrap is not None
        return self.bootstrap


def open_storage(config: Config, *, prepare: bool) -> OpenStorage:
    """The blob store, control record and metadata store of the node. `prepare` (the
    first process of a node only) creates the layout (owner-only), refuses files holding
    secrets that others can open, sweeps leftover spools, migrates the schema, makes
    sure the root credential and built-in grants exist and resolves the deletes a crash
    left in doubt (before any worker serves, so none is in flight)."""
    storage = config.storage
    blobs = BlobStore(storage.data_dir, fsync=storage.fsync,
                      syncfs=storage.sync_method == "auto", stages=blob_stages(config))
    control = ControlRecord(storage.data_dir, fsync=storage.fsync)
    if prepare:
        blobs.prepare()
        control.prepare()
        check_private_storage(config, control)
    try:
        sync_store = open_sync_store(storage, clock=wall_clock())
        bootstrap = None
        if prepare:
            sync_store.migrate()
            bootstrap = ensure_root(sync_store, control)
            ensure_builtin_grants(sync_store, control)
            settle_deletes_in_doubt(sync_store, blobs)
        node_id = ensure_node_id(sync_store, config.cluster.node_id)
    except Exception as exc:
        if isinstance(exc, BootstrapError):
            raise
        raise BootstrapError(f"metadata database ({storage.metadata_backend}): "
                             f"{one_line(exc)}") from exc
    return OpenStorage(blobs, control, sync_store, bootstrap, node_id)


def blob_stages(config: Config) -> BlobStages:
    """The factory of the node's blob writers and readers: with [encryption] enabled, the
    local master key (created at first start; a start refused when it is unusable)."""
    try:
        return node_stages(config, create=True)
    except (MasterKeyError, OSError) as exc:
        raise BootstrapError(str(exc)) from None


def settle_deletes_in_doubt(sync_store: SyncMetaStore, blobs: BlobStore) -> None:
    """Deletes a crash stopped between their withdrawal (a sidecar, or a batch's
    manifest) and their end: the version stays whole when its row does, else its files go
    (`BlobStore.settle_withdrawn`; reads `deleting/` only)."""
    settled = resolve_withdrawn(sync_store, blobs)
    for item in settled.unresolved:  # a blob id, or an unreadable manifest's name
        warn_startup(f"a delete left in doubt could not be resolved ({item} in "
                     f"{blobs.withdrawn_root}): see `objstore check`")


def check_private_storage(config: Config, control: ControlRecord) -> None:
    """Before the database is opened: ExposedSecrets (a start-up error) when the SQLite
    database or a credential's control file is open to group or others; a warning for the
    data directory and the database's directory."""
    storage = config.storage
    directories = [storage.data_dir]
    if storage.metadata_backend == "sqlite":
        database = sqlite_path_for(storage)
        refuse_exposed(sqlite_files(database), "every credential's secret")
        directories.append(os.path.dirname(os.path.abspath(database)))
    refuse_exposed(control.secret_files(), "a credential's secret")
    for warning in directory_warnings(directories):
        warn_startup(warning)


def one_line(exc: BaseException) -> str:
    """A database error as the one line start-up errors promise: the driver's own message
    (not SQLAlchemy's wrapper and its link), its lines joined."""
    text = str(getattr(exc, "orig", None) or exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(line for line in lines if not line.startswith("(Background on this error"))
