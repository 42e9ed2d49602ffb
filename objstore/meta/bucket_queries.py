"""Buckets and their configuration documents: create, read, update and delete a bucket
(only when empty), turn object lock on (only while empty), and the per-bucket key/value
configuration (versioning-independent documents: lifecycle, tags, quota, ...).

Each function is one transaction on a `Database`. Writers of child rows (objects, uploads,
configuration) look their bucket up under FOR KEY SHARE on PostgreSQL (`bucket_exists`);
deleting a bucket or enabling object lock takes the row FOR UPDATE, so every concurrent
child writer is ordered before or after the emptiness check. SQLite needs no row locks: its
writers are serialised by BEGIN IMMEDIATE. No Twisted here.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import insert_ignore, read_transaction, upsert, write_transaction
from objstore.meta.errors import RecordNotFound
from objstore.meta.records import BucketRecord
from objstore.meta.tombstones import (
    TOMBSTONE_BUCKET,
    TOMBSTONE_BUCKET_CONFIG,
    bucket_config_tombstone_key,
    leave_tombstone,
)

_b = schema.buckets
_c = schema.bucket_config


def bucket_exists(conn: Connection, name: str, *, lock: str) -> bool:
    """Look the bucket up under a row lock on PostgreSQL: "share" (FOR KEY SHARE, the lock
    a foreign key check takes anyway) for writers of child rows, "update" for changes that
    depend on the bucket being empty."""
    query = sa.select(_b.c.name).where(_b.c.name == name)
    if lock == "update":
        query = query.with_for_update()
    else:
        query = query.with_for_update(read=True, key_share=True)
    return conn.execute(query).first() is not None


def _has_objects(conn: Connection, name: str) -> bool:
    o = schema.objects
    return conn.execute(sa.select(o.c.key).where(o.c.bucket == name).limit(1)).first() is not None


def create_bucket(db: Database, bucket: BucketRecord) -> bool:
    """Insert; False (and no change) when a bucket of that name exists. An updated_at of 0
    is stored as created_at (likewise for users, credentials and uploads)."""
    values = {
        "name": bucket.name,
        "owner_id": bucket.owner_id,
        "region": bucket.region,
        "created_at": bucket.created_at,
        "versioning": bucket.versioning,
        "object_lock": bucket.object_lock,
        "updated_at": bucket.updated_at or bucket.created_at,
    }
    with write_transaction(db.engine) as conn:
        return insert_ignore(conn, _b, values)


def get_bucket(db: Database, name: str) -> BucketRecord | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_b).where(_b.c.name == name)).mappings().first()
    return None if row is None else schema.bucket_record(row)


def list_buckets(db: Database) -> list[BucketRecord]:
    """All buckets ordered by name."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_b).order_by(_b.c.name)).mappings().all()
    return [schema.bucket_record(r) for r in rows]


def update_bucket(db: Database, bucket: BucketRecord) -> None:
    """Replace versioning/object_lock/updated_at of an existing bucket; RecordNotFound when
    there is none."""
    with write_transaction(db.engine) as conn:
        result = conn.execute(
            sa.update(_b)
            .where(_b.c.name == bucket.name)
            .values(
                versioning=bucket.versioning,
                object_lock=bucket.object_lock,
                updated_at=bucket.updated_at,
            )
        )
        if result.rowcount != 1:
            raise RecordNotFound(f"bucket {bucket.name!r}")


def delete_bucket(db: Database, name: str) -> str:
    """Atomically delete an empty bucket and its config keys. Returns "deleted", "missing",
    or "not_empty" (any object version, delete marker or multipart upload remains; nothing
    is changed then). The row lock makes concurrent puts wait, then fail to find it."""
    u = schema.multipart_uploads
    with write_transaction(db.engine) as conn:
        if not bucket_exists(conn, name, lock="update"):
            return "missing"
        if _has_objects(conn, name):
            return "not_empty"
        has_upload = conn.execute(sa.select(u.c.upload_id).where(u.c.bucket == name).limit(1))
        if has_upload.first() is not None:
            return "not_empty"
        conn.execute(sa.delete(_c).where(_c.c.bucket == name))
        conn.execute(sa.delete(_b).where(_b.c.name == name))
        leave_tombstone(db, conn, TOMBSTONE_BUCKET, name)
        return "deleted"


def enable_object_lock(db: Database, name: str, updated_at: float) -> str:
    """Atomically turn object lock on (and versioning to Enabled) for a bucket that holds
    no object version or delete marker. Returns "enabled", "missing" or "not_empty"
    (nothing is changed then)."""
    with write_transaction(db.engine) as conn:
        if not bucket_exists(conn, name, lock="update"):
            return "missing"
        if _has_objects(conn, name):
            return "not_empty"
        conn.execute(
            sa.update(_b).where(_b.c.name == name)
            .values(object_lock=True, versioning="Enabled", updated_at=updated_at)
        )
        return "enabled"


def get_bucket_config(db: Database, bucket: str, key: str) -> str | None:
    with read_transaction(db.engine) as conn:
        value = conn.execute(
            sa.select(_c.c.value).where(_c.c.bucket == bucket, _c.c.key == key)
        ).scalar()
    return None if value is None else str(value)


def put_bucket_config(db: Database, bucket: str, key: str, value: str) -> None:
    """Insert or replace one document; RecordNotFound when the bucket does not exist."""
    with write_transaction(db.engine) as conn:
        if not bucket_exists(conn, bucket, lock="share"):
            raise RecordNotFound(f"bucket {bucket!r}")
        upsert(conn, _c, {"bucket": bucket, "key": key, "value": value,
                          "updated_at": db.clock()}, ("bucket", "key"))


def delete_bucket_config(db: Database, bucket: str, key: str) -> bool:
    """Remove one document, leaving a tombstone; False when there was none."""
    with write_transaction(db.engine) as conn:
        result = conn.execute(sa.delete(_c).where(_c.c.bucket == bucket, _c.c.key == key))
        if result.rowcount == 0:
            return False
        leave_tombstone(db, conn, TOMBSTONE_BUCKET_CONFIG,
                        bucket_config_tombstone_key(bucket, key))
        return True


def list_bucket_config(db: Database, bucket: str) -> dict[str, str]:
    with read_transaction(db.engine) as conn:
        rows = conn.execute(
            sa.select(_c.c.key, _c.c.value).where(_c.c.bucket == bucket).order_by(_c.c.key)
        ).all()
    return {str(k): str(v) for k, v in rows}
