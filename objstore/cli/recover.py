"""`objstore recover`: rebuild the metadata database from the data volume.

Control plane first (users, credentials, teams, grants and their attachments, buckets and
their configuration documents, settings from the control record), then objects from their
sidecars in two passes, so memory holds one small tuple per version and never the records
themselves: pass 1 decides, per (bucket, key, version_id), which sidecar wins (newest
last_modified; a crash between an overwrite and the removal of the old blob leaves two)
and, per key, which version is latest (the newest, delete markers included: each has a
sidecar of its own); pass 2 inserts rows in batches, lock state and tags as the sidecars
hold them. A permanently deleted version has no sidecar in `blobs/` from before its row
went (its bytes may outlive a crash: an orphan, never a version again). A delete a crash
left in doubt has its sidecar in `deleting/`, which recover does not read, or (a batch
delete's) is named by a manifest there, whose blobs' sidecars recover skips: the version
counts as deleted (either outcome is acceptable for it, a torn version never is), and the
next start finishes its removal, as no row holds it. A sidecar written in one sync with its
blob (a small body's, blobs/store.py `commit_bytes`) is skipped when its blob fails the
check it carries: a crash cut that write short before it was answered.

Then the open multipart uploads, from their records (`uploads/`, written before their row,
withdrawn before an abort's) and the sidecars of their parts (per part number, the newest
wins, as for versions). An upload whose parts an object references was completed (a crash
came between its commit and the removal of its record): it is not reopened, so an abort
can never take parts an object uses.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from objstore.blobs.control import ControlRecord
from objstore.blobs.sidecar import part_from_sidecar, record_from_sidecar, upload_from_record
from objstore.blobs.store import BlobStore
from objstore.cli.progress import Progress
from objstore.config import Config
from objstore.meta.iam_records import GrantRecord, TeamRecord
from objstore.meta.records import (
    BucketRecord,
    CredentialRecord,
    ObjectRecord,
    PartRecord,
    UploadRecord,
    UserRecord,
)
from objstore.meta.store import SyncMetaStore, open_sync_store

BATCH = 500


def run_recover(config: Config, *, force: bool) -> int:
    storage = config.storage
    blobs = BlobStore(storage.data_dir, fsync=storage.fsync,
                      syncfs=storage.sync_method == "auto")
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
        counts = rebuild(store, blobs, control, config.server.region)
    finally:
        store.close()
    sys.stderr.write(
        f"objstore: recovered {counts['buckets']} buckets, {counts['users']} users, "
        f"{counts['credentials']} credentials, {counts['teams']} teams, "
        f"{counts['grants']} grants, {counts['versions']} object versions, "
        f"{counts['uploads']} open multipart uploads\n"
    )
    return 0


def rebuild(store: SyncMetaStore, blobs: BlobStore, control: ControlRecord,
            region: str) -> dict[str, int]:
    """Everything the data volume holds, into `store`; returns the counts by family."""
    counts = restore_control_plane(store, control)
    uploads = read_upload_records(blobs)
    scan = scan_sidecars(blobs, set(uploads))
    needed = {ident[0] for ident in scan.winners} | {u.bucket for u in uploads.values()}
    _recreate_buckets(store, region, needed)
    counts["versions"], completed = insert_objects(store, blobs, scan.winners,
                                                   scan.part_owners)
    counts["uploads"] = insert_uploads(store, open_uploads(uploads, scan.parts, completed))
    return counts


def _recreate_buckets(store: SyncMetaStore, region: str, needed: set[str]) -> None:
    """Buckets that objects or uploads name but the control record lost."""
    buckets = {b.name for b in store.list_buckets()}
    owner = _root_user_id(store)
    for bucket in sorted(needed - buckets):
        store.create_bucket(BucketRecord(bucket, owner, region, 0.0))
        sys.stderr.write(f"objstore: bucket {bucket} had no control record; re-created\n")


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
PartSlot = tuple[str, int]  # upload_id, part_number


@dataclass
class Scan:
    """What pass 1 keeps: the winning sidecar of each version, and the parts of the
    uploads that have a record (the winner per part number, and every candidate's owner,
    to tell a completed upload by the parts an object references)."""

    winners: dict[Identity, tuple[float, str]] = field(default_factory=dict)
    parts: dict[PartSlot, PartRecord] = field(default_factory=dict)
    part_owners: dict[str, str] = field(default_factory=dict)  # part blob id -> upload id


def _sidecars(blobs: BlobStore) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every sidecar in `blobs/` but those of versions a batch delete withdrew and those
    beside a torn blob (`BlobStore.torn_blob`)."""
    withdrawn = blobs.manifest_blob_ids()
    for info in blobs.iter_blobs():
        if not info.has_sidecar or info.blob_id in withdrawn:
            continue
        try:
            sidecar = blobs.read_sidecar(info.blob_id)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"objstore: unreadable sidecar of {info.blob_id}: {exc}\n")
            continue
        if blobs.torn_blob(info.blob_id, sidecar):
            sys.stderr.write(f"objstore: blob {info.blob_id} is not the one its sidecar was "
                             "written with (a write a crash cut short, never answered): "
                             "skipped, an orphan for check --repair\n")
            continue
        yield info.blob_id, sidecar


def read_upload_records(blobs: BlobStore) -> dict[str, UploadRecord]:
    """The uploads that were open (or whose completion had not removed its record)."""
    uploads = {}
    for upload_id in blobs.upload_record_ids():
        try:
            upload = upload_from_record(blobs.read_upload_record(upload_id))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            sys.stderr.write(f"objstore: unreadable record of upload {upload_id}: {exc}\n")
            continue
        uploads[upload.upload_id] = upload
    return uploads


def scan_sidecars(blobs: BlobStore, upload_ids: set[str] | None = None) -> Scan:
    """Pass 1: the winning sidecar per version; the parts of the uploads `upload_ids`."""
    scan = Scan()
    progress = Progress("scanning sidecars")
    for sidecar_id, data in _sidecars(blobs):
        progress.advance()
        kind = data.get("kind", "object")
        if kind == "part" and data.get("upload_id") in (upload_ids or ()):
            keep_newer_part(scan, part_from_sidecar(sidecar_id, data))
        if kind != "object":
            continue
        ident = (data["bucket"], data["key"], data["version_id"])
        candidate = (float(data["last_modified"]), sidecar_id)
        if ident not in scan.winners or candidate > scan.winners[ident]:
            scan.winners[ident] = candidate
    progress.finish()
    return scan


def keep_newer_part(scan: Scan, part: PartRecord) -> None:
    """A part number uploaded twice leaves two sidecars when a crash came before the
    replaced blob was removed: the newer one is the part."""
    scan.part_owners[part.blob_id] = part.upload_id
    slot = (part.upload_id, part.part_number)
    held = scan.parts.get(slot)
    if held is None or (part.last_modified, part.blob_id) > (held.last_modified, held.blob_id):
        scan.parts[slot] = part


def completed_uploads(record: ObjectRecord, part_owners: dict[str, str]) -> set[str]:
    """The uploads whose parts the object `record` is made of."""
    return {part_owners[p.blob_id] for p in record.parts if p.blob_id in part_owners}


def open_uploads(
    uploads: dict[str, UploadRecord], parts: dict[PartSlot, PartRecord], completed: set[str]
) -> list[tuple[UploadRecord, list[PartRecord]]]:
    """The uploads to reopen, each with its parts in order: every recorded upload but the
    completed ones."""
    by_upload: dict[str, list[PartRecord]] = {}
    for (upload_id, _), part in sorted(parts.items()):
        by_upload.setdefault(upload_id, []).append(part)
    return [(uploads[upload_id], by_upload.get(upload_id, []))
            for upload_id in sorted(uploads) if upload_id not in completed]


def insert_objects(
    store: SyncMetaStore, blobs: BlobStore, winners: dict[Identity, tuple[float, str]],
    part_owners: dict[str, str] | None = None,
) -> tuple[int, set[str]]:
    """Pass 2: insert the winning versions; returns how many, and the uploads their parts
    show completed."""
    latest: dict[tuple[str, str], tuple[float, str]] = {}
    for (bucket, key, version_id), (modified, _) in winners.items():
        candidate = (modified, version_id)
        if (bucket, key) not in latest or candidate > latest[(bucket, key)]:
            latest[(bucket, key)] = candidate
    chosen = {sidecar_id for _, sidecar_id in winners.values()}
    progress = Progress("restoring objects", total=len(chosen))
    batch: list[ObjectRecord] = []
    inserted = 0
    completed: set[str] = set()
    for sidecar_id, data in _sidecars(blobs):
        if sidecar_id not in chosen:
            continue
        record = record_from_sidecar(data)
        completed |= completed_uploads(record, part_owners or {})
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
    return inserted, completed


def insert_uploads(
    store: SyncMetaStore, uploads: list[tuple[UploadRecord, list[PartRecord]]]
) -> int:
    """Reopen uploads with their parts (an upload already in the database keeps its row
    and gains the parts it lacked, for `--force`)."""
    for upload, parts in uploads:
        if store.get_upload(upload.upload_id) is None:
            store.create_upload(upload)
        for part in parts:
            store.put_part(part)
    return len(uploads)


def _root_user_id(store: SyncMetaStore) -> str:
    for user in store.list_users():
        if user.is_root:
            return user.user_id
    return ""
