"""`objstore check`: compare metadata rows with blob files and sidecars.

Reports rows whose blob is missing or has the wrong size (or, with --deep, the wrong MD5),
rows whose sidecar is missing (and open uploads without their record in `uploads/`), and
orphans (blobs or sidecars no row references, records of uploads that are not open), and
deletes left in doubt (a sidecar withdrawn into `deleting/`, or a batch delete's manifest
there, by a delete a crash stopped).
--repair removes orphans older than the grace period (younger ones may be uploads in
flight), resolves deletes left in doubt as the start-up does (`resolve_withdrawn`), and
rewrites missing sidecars and upload records from their rows; it never deletes a row. Exit
0 only when, after any repair, nothing is wrong.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from objstore.blobs.factory import StagesUnavailable
from objstore.blobs.plan import plan_of
from objstore.blobs.segments import Segment
from objstore.blobs.sidecar import record_to_sidecar, upload_to_record
from objstore.blobs.store import BlobStore, SettledDeletes
from objstore.cli.progress import Progress
from objstore.config import Config
from objstore.crypto.keyring import node_stages
from objstore.crypto.master_key import MasterKeyError
from objstore.crypto.packages import stored_size
from objstore.meta.records import ObjectRecord, UploadRecord
from objstore.meta.store import SyncMetaStore, open_sync_store

DEEP_READ_BYTES = 1024 * 1024


@dataclass
class Report:
    missing_blobs: list[str] = field(default_factory=list)
    size_mismatches: list[str] = field(default_factory=list)
    hash_mismatches: list[str] = field(default_factory=list)
    missing_sidecars: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    deletes_in_doubt: list[str] = field(default_factory=list)
    repaired: int = 0

    def problems(self) -> int:
        return (len(self.missing_blobs) + len(self.size_mismatches) + len(self.hash_mismatches)
                + len(self.missing_sidecars) + len(self.orphans)
                + len(self.deletes_in_doubt))


def row_holds(store: SyncMetaStore) -> Callable[[str, dict[str, Any]], bool | None]:
    """Whether the row a withdrawn sidecar (or a manifest's entry) describes still holds
    its blob (None: it does not name an object version)."""
    def holds(blob_id: str, sidecar: dict[str, Any]) -> bool | None:
        try:
            ident = (sidecar["bucket"], sidecar["key"], sidecar["version_id"])
        except KeyError:
            return None
        if sidecar.get("kind", "object") != "object":
            return None
        row = store.get_object(*ident)
        return row is not None and row.blob_id == blob_id
    return holds


def resolve_withdrawn(store: SyncMetaStore, blobs: BlobStore, *,
                      older_than: float | None = None) -> SettledDeletes:
    """Resolve the deletes a crash left in doubt (`BlobStore.settle_withdrawn`): at
    start-up (the preparing process, before any worker serves) and by `check --repair`."""
    return blobs.settle_withdrawn(row_holds(store), older_than=older_than)


def run_check(config: Config, *, repair: bool, deep: bool, orphan_grace_seconds: float) -> int:
    storage = config.storage
    try:
        stages = node_stages(config, create=False)  # --deep reads encrypted blobs with it
    except MasterKeyError as exc:
        sys.stderr.write(f"objstore: {exc}\n")
        return 1
    blobs = BlobStore(storage.data_dir, fsync=storage.fsync,
                      syncfs=storage.sync_method == "auto", stages=stages)
    if storage.metadata_backend == "sqlite" and not os.path.exists(str(storage.sqlite_path)):
        sys.stderr.write(f"objstore: no metadata database at {storage.sqlite_path} "
                         "(wrong data_dir, or run `objstore recover`)\n")
        return 1
    store = open_sync_store(storage)
    try:
        if not store.is_initialised():
            sys.stderr.write("objstore: the metadata database has no objstore schema "
                             "(wrong database, or run `objstore recover`)\n")
            return 1
        report = check(store, blobs, repair=repair, deep=deep,
                       orphan_grace_seconds=orphan_grace_seconds)
    finally:
        store.close()
    _print(report)
    return 0 if report.problems() == 0 else 1


def check(store: SyncMetaStore, blobs: BlobStore, *, repair: bool, deep: bool,
          orphan_grace_seconds: float) -> Report:
    report = Report()
    in_doubt = _check_withdrawn(store, blobs, repair, orphan_grace_seconds, report)
    referenced: set[str] = set()
    progress = Progress("checking objects")
    for record in store.iter_objects():
        progress.advance()
        if record.blob_id:
            referenced.add(record.blob_id)  # a composite's: the blob holding its sidecar
        for blob_id, size, etag in _blobs_of(record):
            referenced.add(blob_id)
            _check_blob(blobs, record, blob_id, size, etag, deep, report)
        if (record.blob_id and record.blob_id not in in_doubt
                and not os.path.exists(blobs.sidecar_path(record.blob_id))):
            if repair:
                blobs.write_sidecar(record.blob_id, record_to_sidecar(record))
                report.repaired += 1
            else:
                report.missing_sidecars.append(_name(record))
    progress.finish()
    open_uploads = _check_uploads(store, blobs, repair, report)
    for upload in open_uploads:
        referenced.update(p.blob_id for p in store.list_parts(upload.upload_id))
    now = time.time()
    for info in blobs.iter_blobs():
        if info.blob_id in referenced:
            continue
        path = blobs.blob_path(info.blob_id) if info.size >= 0 else blobs.sidecar_path(
            info.blob_id)
        if _is_young(path, now, orphan_grace_seconds):
            continue
        if repair:
            blobs.delete(info.blob_id)
            report.repaired += 1
        else:
            report.orphans.append(info.blob_id)
    _check_upload_records(blobs, {u.upload_id for u in open_uploads}, repair,
                          orphan_grace_seconds, report)
    return report


def _check_withdrawn(store: SyncMetaStore, blobs: BlobStore, repair: bool,
                     grace_seconds: float, report: Report) -> set[str]:
    """Deletes left in doubt: resolved with --repair (those older than the grace period,
    younger ones may be deletes in flight), else reported. Returns the blob ids whose
    sidecar stays withdrawn (their rows are not reported again as missing a sidecar)."""
    now = time.time()
    if repair:
        settled = resolve_withdrawn(store, blobs, older_than=now - grace_seconds)
        report.repaired += len(settled.put_back) + len(settled.finished)
        report.deletes_in_doubt.extend(settled.unresolved)
    else:
        report.deletes_in_doubt.extend(
            blob_id for blob_id in blobs.withdrawn_ids()
            if not _is_young(blobs.withdrawn_path(blob_id), now, grace_seconds))
        report.deletes_in_doubt.extend(_manifests_in_doubt(blobs, now, grace_seconds))
    return set(blobs.withdrawn_ids()) | blobs.manifest_blob_ids()


def _manifests_in_doubt(blobs: BlobStore, now: float, grace_seconds: float) -> list[str]:
    """The blobs that batch deletes' manifests older than the grace period name (the
    manifest's own name when it can not be read)."""
    found: list[str] = []
    for name in blobs.manifest_names():
        if _is_young(blobs.manifest_path(name), now, grace_seconds):
            continue
        try:
            found.extend(version.blob_id for version in blobs.read_manifest(name))
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            found.append(name)
    return found


def _is_young(path: str, now: float, grace_seconds: float) -> bool:
    """Younger than the grace period (or gone meanwhile): may belong to a write in
    flight."""
    try:
        return now - os.stat(path).st_mtime < grace_seconds
    except FileNotFoundError:
        return True


def _check_uploads(store: SyncMetaStore, blobs: BlobStore, repair: bool,
                   report: Report) -> list[UploadRecord]:
    """Every open upload, each with its record (`recover` reopens uploads from them)."""
    uploads = [upload for bucket in store.list_buckets()
               for upload in store.list_uploads(bucket.name, limit=1_000_000)]
    for upload in uploads:
        if os.path.exists(blobs.upload_record_path(upload.upload_id)):
            continue
        if repair:
            blobs.write_upload_record(upload.upload_id, upload_to_record(upload))
            report.repaired += 1
        else:
            report.missing_sidecars.append(
                f"upload {upload.upload_id} of {upload.bucket}/{upload.key}")
    return uploads


def _check_upload_records(blobs: BlobStore, open_ids: set[str], repair: bool,
                          grace_seconds: float, report: Report) -> None:
    """Records of uploads that are no longer open (a crash after a completion or an
    abort) are orphans."""
    now = time.time()
    for upload_id in blobs.upload_record_ids():
        if upload_id in open_ids:
            continue
        if _is_young(blobs.upload_record_path(upload_id), now, grace_seconds):
            continue
        if repair:
            blobs.remove_upload_record(upload_id)
            report.repaired += 1
        else:
            report.orphans.append(f"record of upload {upload_id}")


def _blobs_of(record: ObjectRecord) -> list[tuple[str, int, str | None]]:
    """The blobs holding the bytes of a row (a delete marker's blob holds only its
    sidecar, like a composite's)."""
    if record.is_delete_marker:
        return []
    if record.parts:
        return [(p.blob_id, p.size, p.etag) for p in record.parts]
    if record.blob_id is None:
        return []
    return [(record.blob_id, record.size, record.etag)]


def _check_blob(blobs: BlobStore, record: ObjectRecord, blob_id: str, size: int,
                etag: str | None, deep: bool, report: Report) -> None:
    actual = blobs.blob_size(blob_id)
    if actual is None:
        report.missing_blobs.append(f"{_name(record)} (blob {blob_id})")
        return
    plan = plan_of(record)
    # The stored size of a staged blob: known for encryption alone, not for compression.
    stored = size if plan.identity else None if plan.compression else stored_size(size)
    if stored is not None and actual != stored:
        report.size_mismatches.append(f"{_name(record)}: {actual} bytes, expected {stored}")
        return
    if deep and etag and "-" not in etag:
        # Through the record's stages (decrypting checks every package's tag), skipped
        # for a staged blob this tool has no key for.
        digest = hashlib.md5()
        try:
            with blobs.reader([Segment(blob_id, 0, size)],
                              None if plan.identity else record) as reader:
                for chunk in reader.chunks(DEEP_READ_BYTES):
                    digest.update(chunk)
        except FileNotFoundError:
            report.missing_blobs.append(f"{_name(record)} (blob {blob_id})")
            return
        except StagesUnavailable:
            return
        except OSError as exc:  # a package that does not authenticate, a key that fails
            report.hash_mismatches.append(f"{_name(record)} (blob {blob_id}): {exc}")
            return
        if digest.hexdigest() != etag:
            report.hash_mismatches.append(f"{_name(record)} (blob {blob_id})")


def _name(record: ObjectRecord) -> str:
    return f"{record.bucket}/{record.key}@{record.version_id}"


def _print(report: Report) -> None:
    sections = [
        ("missing blobs", report.missing_blobs),
        ("size mismatches", report.size_mismatches),
        ("hash mismatches", report.hash_mismatches),
        ("rows without a sidecar (or upload record)", report.missing_sidecars),
        ("orphans (reclaimable with --repair)", report.orphans),
        ("deletes left in doubt (resolved at start-up or with --repair)",
         report.deletes_in_doubt),
    ]
    for title, items in sections:
        if items:
            print(f"{title}: {len(items)}")
            for item in items[:50]:
                print(f"  {item}")
            if len(items) > 50:
                print(f"  ... and {len(items) - 50} more")
    if report.repaired:
        print(f"repaired: {report.repaired}")
    print("ok: database and files agree" if report.problems() == 0 else
          f"problems: {report.problems()}")
    sys.stdout.flush()
