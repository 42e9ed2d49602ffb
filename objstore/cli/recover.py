"""`objstore recover`: rebuild the metadata database from the data volume.

Control plane first (users, credentials, teams, grants and their attachments, buckets and
their configuration documents, settings from the control record), then objects from their
sidecars in two passes, so memory holds one small tuple per version and never the records
themselves: pass 1 decides, per (bucket, key, version_id), which sidecar wins (newest
last_modified; a crash between an overwrite and the removal of the old blob leaves two)
and, per key, which version is latest (the newest, delete markers included: each has a
sidecar of its own); pass 2 inserts rows in batches, lock state and tags as the sidecars
hold them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from objstore.blobs.control import ControlRecord
from objstore.blobs.sidecar import record_from_sidecar
from objstore.blobs.store import BlobStore
from objstore.cli.progress import Progress
from objstore.config import Config
from objstore.meta.iam_records import GrantRecord, TeamRecord
from objstore.meta.records import BucketRecord, CredentialRecord, ObjectRecord, UserRecord
from objstore.meta.store import SyncMetaStore, open_sync_store

BATCH = 500


def run_recover(config: Config, *, force: bool) -> int:
    storage = config.storage
    blobs = BlobStore(storage.data_dir, fsync=storage.fsync)
    control = ControlRecord(storage.data_dir, fsync=storage.fsync)
    store = open_sync_store(storage)
    try:
        store.migrate()
        if not force and (store.list_buckets() or any(True for _ in store.iter_objects(1))):
            sys.stderr.write(
                "objstore: the metadata database is not empty; recover rebuilds an empty "
                "one (use --force to merge into it)\n"
            )
            return 1
        restored = restore_control_plane(store, control)
        winners = scan_sidecars(blobs)
        buckets = {b.name for b in store.list_buckets()}
        owner = _root_user_id(store)
        for bucket in sorted({key[0] for key in winners} - buckets):
            store.create_bucket(BucketRecord(bucket, owner, config.server.region, 0.0))
            sys.stderr.write(f"objstore: bucket {bucket} had no control record; re-created\n")
        inserted = insert_objects(store, blobs, winners)
    finally:
        store.close()
    sys.stderr.write(
        f"objstore: recovered {restored['buckets']} buckets, {restored['users']} users, "
        f"{restored['credentials']} credentials, {restored['teams']} teams, "
        f"{restored['grants']} grants, {inserted} object versions\n"
    )
    return 0


def restore_control_plane(store: SyncMetaStore, control: ControlRecord) -> dict[str, int]:
    """Rebuild every control-plane family, parents before children (users before their
    credentials, teams and grants before attachments). An entity already in the database
    counts as restored; an attachment whose parent is gone is skipped."""
    counts = {}
    for family, restore in _RESTORERS:
        counts[family] = sum(bool(restore(store, key, data))
                             for key, data in control.items(family))
    return counts


def _restore_setting(store: SyncMetaStore, key: str, data: dict[str, Any]) -> bool:
    store.put_setting(key, data["value"])
    return True


def _restore_bucket_config(store: SyncMetaStore, _key: str, data: dict[str, Any]) -> bool:
    """A bucket's configuration document (object lock, tags, lifecycle, ...), unless it
    belongs to a bucket deleted since, or to an older bucket of the same name."""
    bucket = store.get_bucket(data["bucket"])
    created_at = data.get("bucket_created_at")
    if bucket is None or (created_at is not None and float(created_at) != bucket.created_at):
        return False
    store.put_bucket_config(data["bucket"], data["key"], data["value"])
    return True


def _attached(outcome: str) -> bool:
    return outcome in ("added", "attached", "exists")


Restorer = Callable[[SyncMetaStore, str, dict[str, Any]], bool]

_RESTORERS: tuple[tuple[str, Restorer], ...] = (
    ("users", lambda store, _key, data: bool(
        store.get_user(data["user_id"]) or store.create_user(UserRecord(**data)))),
    ("credentials", lambda store, _key, data: bool(
        store.get_credential(data["access_key_id"])
        or store.create_credential(CredentialRecord(**data)))),
    ("teams", lambda store, _key, data: bool(
        store.get_team(data["team_id"]) or store.create_team(TeamRecord(**data)))),
    ("grants", lambda store, _key, data: bool(
        store.get_grant(data["grant_id"]) or store.create_grant(GrantRecord(**data)))),
    ("team_members", lambda store, _key, data: _attached(store.add_team_member(
        data["team_id"], data["user_id"], float(data.get("updated_at", 0.0))))),
    ("user_grants", lambda store, _key, data: _attached(store.attach_user_grant(
        data["user_id"], data["grant_id"], float(data.get("updated_at", 0.0))))),
    ("team_grants", lambda store, _key, data: _attached(store.attach_team_grant(
        data["team_id"], data["grant_id"], float(data.get("updated_at", 0.0))))),
    ("buckets", lambda store, _key, data: bool(
        store.get_bucket(data["name"]) or store.create_bucket(BucketRecord(**data)))),
    ("bucket_config", _restore_bucket_config),
    ("settings", _restore_setting),
)


Identity = tuple[str, str, str]  # bucket, key, version_id


def _sidecars(blobs: BlobStore) -> Iterator[tuple[str, dict[str, Any]]]:
    for info in blobs.iter_blobs():
        if not info.has_sidecar:
            continue
        try:
            yield info.blob_id, blobs.read_sidecar(info.blob_id)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"objstore: unreadable sidecar of {info.blob_id}: {exc}\n")


def scan_sidecars(blobs: BlobStore) -> dict[Identity, tuple[float, str]]:
    """Pass 1: (bucket, key, version_id) -> (last_modified, winning sidecar blob id)."""
    winners: dict[Identity, tuple[float, str]] = {}
    progress = Progress("scanning sidecars")
    for sidecar_id, data in _sidecars(blobs):
        progress.advance()
        if data.get("kind", "object") != "object":
            continue
        ident = (data["bucket"], data["key"], data["version_id"])
        candidate = (float(data["last_modified"]), sidecar_id)
        if ident not in winners or candidate > winners[ident]:
            winners[ident] = candidate
    progress.finish()
    return winners


def insert_objects(
    store: SyncMetaStore, blobs: BlobStore, winners: dict[Identity, tuple[float, str]]
) -> int:
    latest: dict[tuple[str, str], tuple[float, str]] = {}
    for (bucket, key, version_id), (modified, _) in winners.items():
        candidate = (modified, version_id)
        if (bucket, key) not in latest or candidate > latest[(bucket, key)]:
            latest[(bucket, key)] = candidate
    chosen = {sidecar_id for _, sidecar_id in winners.values()}
    progress = Progress("restoring objects", total=len(chosen))
    batch: list[ObjectRecord] = []
    inserted = 0
    for sidecar_id, data in _sidecars(blobs):
        if sidecar_id not in chosen:
            continue
        record = record_from_sidecar(data)
        is_latest = latest[(record.bucket, record.key)][1] == record.version_id
        batch.append(replace(record, is_latest=is_latest))
        if len(batch) >= BATCH:
            store.insert_recovered(batch)
            inserted += len(batch)
            progress.advance(len(batch))
            batch = []
    if batch:
        store.insert_recovered(batch)
        inserted += len(batch)
        progress.advance(len(batch))
    progress.finish()
    return inserted


def _root_user_id(store: SyncMetaStore) -> str:
    for user in store.list_users():
        if user.is_root:
            return user.user_id
    return ""
