"""Multipart uploads and their parts: open an upload, store or replace a part, list both,
abort (remove the upload with its parts), and complete it into an object row (noting the
completion for a while, so that a retry of it can be answered).

Each function is one transaction on a `Database`. The lock order of an upload's writers is
the same everywhere, so racing writers wait instead of deadlocking: (the seq counter, for a
completion, then) the bucket under FOR KEY SHARE, then the upload row. A completion writes
its object row with the shared rules of `object_write_queries` (seq, checks, insert as
latest), inside its own transaction. No Twisted here.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from objstore.meta import schema
from objstore.meta.bucket_queries import bucket_exists
from objstore.meta.database import Database, changes_objects
from objstore.meta.dialect import insert_ignore, read_transaction, write_transaction
from objstore.meta.driver import CoreRows
from objstore.meta.errors import PartsChanged, RecordNotFound
from objstore.meta.object_queries import key_range
from objstore.meta.object_write_queries import (
    UsageCheck,
    check_write,
    insert_latest,
    next_seq,
    unreferenced,
)
from objstore.meta.outbox_queries import OutboxNote
from objstore.meta.outbox_queries import record as record_outbox
from objstore.meta.records import (
    ObjectRecord,
    PartRecord,
    PutResult,
    UploadRecord,
    WritePrecondition,
)
from objstore.meta.tombstones import TOMBSTONE_UPLOAD, leave_tombstone

_u = schema.multipart_uploads
_p = schema.multipart_parts
_c = schema.completed_uploads

# How long a completed upload stays answerable to a retried CompleteMultipartUpload (and
# only while the version it made exists).
COMPLETED_UPLOAD_KEPT_SECONDS = 15 * 60


@dataclass(frozen=True)
class Completion:
    """What a completion made of an upload: the version it stored, and when."""

    upload_id: str
    bucket: str
    key: str
    version_id: str
    blob_id: str
    completed_at: float


@dataclass(frozen=True)
class CompletedUpload(PutResult):
    """A completion's outcome. Of the orphaned blobs, `replaced_blob_ids` are those of the
    version it replaced (its own blob, then its parts: readers may be streaming them); the
    others are parts of the upload that the object does not use."""

    replaced_blob_ids: tuple[str, ...] = ()


def create_upload(db: Database, upload: UploadRecord) -> None:
    """Raises RecordNotFound when the bucket does not exist."""
    values = schema.upload_values(upload)
    if not values["updated_at"]:
        values["updated_at"] = upload.initiated_at
    with write_transaction(db.engine) as conn:
        if not bucket_exists(conn, upload.bucket, lock="share"):
            raise RecordNotFound(f"bucket {upload.bucket!r}")
        conn.execute(sa.insert(_u).values(**values))


def get_upload(db: Database, upload_id: str) -> UploadRecord | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_u).where(_u.c.upload_id == upload_id)).mappings().first()
    return None if row is None else schema.upload_record(row)


def list_uploads(
    db: Database,
    bucket: str,
    prefix: str = "",
    key_marker: str = "",
    upload_id_marker: str = "",
    limit: int = 1000,
) -> list[UploadRecord]:
    """Open uploads ordered by key, then upload_id. After key_marker alone, uploads of
    later keys; with upload_id_marker too, also uploads of key_marker whose upload_id
    sorts after it (S3 ListMultipartUploads)."""
    if limit <= 0:
        return []
    where = [_u.c.bucket == bucket, *key_range(_u.c.key, prefix)]
    if key_marker and upload_id_marker:
        where.append(sa.tuple_(_u.c.key, _u.c.upload_id) > sa.tuple_(key_marker, upload_id_marker))
    elif key_marker:
        where.append(_u.c.key > key_marker)
    query = sa.select(_u).where(*where).order_by(_u.c.key, _u.c.upload_id).limit(limit)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.upload_record(r) for r in rows]


def put_part(db: Database, part: PartRecord) -> str | None:
    """Insert or replace a part; returns the blob_id of a replaced part (to delete).

    None also when the replaced part had the same blob_id (a retried request). Raises
    RecordNotFound when the upload does not exist (completed or aborted meanwhile)."""
    values = {
        "upload_id": part.upload_id,
        "part_number": part.part_number,
        "blob_id": part.blob_id,
        "size": part.size,
        "etag": part.etag,
        "last_modified": part.last_modified,
        "checksums": schema.dumps_json(part.checksums),
        "encryption_params": (schema.dumps_json(part.encryption_params)
                              if part.encryption_params else None),
    }
    where_part = sa.and_(_p.c.upload_id == part.upload_id, _p.c.part_number == part.part_number)
    with write_transaction(db.engine) as conn:
        upload = conn.execute(
            sa.select(_u.c.upload_id)
            .where(_u.c.upload_id == part.upload_id)
            .with_for_update(read=True, key_share=True)
        ).first()
        if upload is None:
            raise RecordNotFound(f"upload {part.upload_id!r}")
        if insert_ignore(conn, _p, values):
            return None
        # A concurrent insert of the same part has committed: lock it, then replace.
        old_blob = conn.execute(
            sa.select(_p.c.blob_id).where(where_part).with_for_update()
        ).scalar_one()
        conn.execute(sa.update(_p).where(where_part).values(**values))
    return None if old_blob == part.blob_id else str(old_blob)


def list_parts(
    db: Database, upload_id: str, after_part: int = 0, limit: int = 10000
) -> list[PartRecord]:
    if limit <= 0:
        return []
    query = (
        sa.select(_p)
        .where(_p.c.upload_id == upload_id, _p.c.part_number > after_part)
        .order_by(_p.c.part_number)
        .limit(limit)
    )
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.part_record(r) for r in rows]


def _part_number(part: PartRecord) -> int:
    return part.part_number


def delete_upload(db: Database, upload_id: str) -> list[PartRecord]:
    """Remove the upload and its part rows (leaving an upload tombstone); returns the
    removed parts. The upload row is locked first, in the order complete_upload and
    put_part take their locks, so an abort racing them waits instead of deadlocking."""
    with write_transaction(db.engine) as conn:
        conn.execute(sa.select(_u.c.upload_id).where(_u.c.upload_id == upload_id)
                     .with_for_update())
        rows = conn.execute(sa.delete(_p).where(_p.c.upload_id == upload_id).returning(_p))
        parts = sorted((schema.part_record(r) for r in rows.mappings()), key=_part_number)
        deleted = conn.execute(sa.delete(_u).where(_u.c.upload_id == upload_id))
        if deleted.rowcount:
            leave_tombstone(db, conn, TOMBSTONE_UPLOAD, upload_id)
    return parts


def _remember_completion(db: Database, conn: Connection, upload_id: str,
                         record: ObjectRecord) -> None:
    """Note what the completion made (for a retry of it), and forget completions older
    than COMPLETED_UPLOAD_KEPT_SECONDS (indexed; a handful of rows at a time)."""
    now = db.clock()
    conn.execute(sa.delete(_c).where(_c.c.completed_at < now - COMPLETED_UPLOAD_KEPT_SECONDS))
    conn.execute(sa.insert(_c).values(
        upload_id=upload_id, bucket=record.bucket, key=record.key,
        version_id=record.version_id, blob_id=record.blob_id or "", completed_at=now))


def get_completion(db: Database, upload_id: str) -> Completion | None:
    """What the completion of `upload_id` made, if it completed within
    COMPLETED_UPLOAD_KEPT_SECONDS."""
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_c).where(
            _c.c.upload_id == upload_id,
            _c.c.completed_at >= db.clock() - COMPLETED_UPLOAD_KEPT_SECONDS,
        )).mappings().first()
    if row is None:
        return None
    return Completion(row["upload_id"], row["bucket"], row["key"], row["version_id"],
                      row["blob_id"], float(row["completed_at"]))


@changes_objects
def complete_upload(
    db: Database, upload_id: str, record: ObjectRecord,
    precondition: WritePrecondition | None = None, usage_check: UsageCheck | None = None,
    outbox: OutboxNote | None = None,
) -> CompletedUpload:
    """Close an upload into the object `record` (whose parts reference its part blobs) in
    ONE transaction: store the record as put_object does, and remove the upload and its
    part rows (leaving an upload tombstone). Raises RecordNotFound when the upload is gone
    or belongs to another key, PartsChanged when a part that `record` references was
    replaced meanwhile, PreconditionNotMet as put_object; nothing changes then. Orphaned:
    blobs of parts the record does not use, and of a replaced version.

    Locks: seq counter, bucket (share), upload row (update): a concurrent put_part of this
    upload waits, then finds it gone."""
    with write_transaction(db.engine) as conn:
        rows = CoreRows(conn)
        seq = next_seq(rows)
        if not bucket_exists(conn, record.bucket, lock="share"):
            raise RecordNotFound(f"bucket {record.bucket!r}")
        upload = conn.execute(
            sa.select(_u.c.bucket, _u.c.key).where(_u.c.upload_id == upload_id)
            .with_for_update()
        ).first()
        if upload is None or (upload.bucket, upload.key) != (record.bucket, record.key):
            raise RecordNotFound(f"upload {upload_id!r}")
        current = dict(conn.execute(
            sa.select(_p.c.part_number, _p.c.blob_id).where(_p.c.upload_id == upload_id)
        ).all())
        if any(current.get(ref.part_number) != ref.blob_id for ref in record.parts):
            raise PartsChanged(upload_id)
        check_write(rows, record, precondition, usage_check)
        conn.execute(sa.delete(_p).where(_p.c.upload_id == upload_id))
        conn.execute(sa.delete(_u).where(_u.c.upload_id == upload_id))
        leave_tombstone(db, conn, TOMBSTONE_UPLOAD, upload_id)
        stored, old = insert_latest(rows, record, seq, restamp=True)
        _remember_completion(db, conn, upload_id, stored)
        if outbox is not None:  # the outbox entry, in the same transaction
            record_outbox(rows, seq, stored, outbox, db.clock())
    replaced = unreferenced(old, stored)
    parts: list[str | None] = [str(blob_id) for blob_id in current.values()]
    return CompletedUpload(record=stored, orphaned_blob_ids=unreferenced(old + parts, stored),
                           replaced_blob_ids=replaced)
