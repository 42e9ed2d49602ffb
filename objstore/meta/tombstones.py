"""Tombstones: what a deletion leaves behind, so that a cluster reconciler (and the change
cursor) can tell a deleted entity from one never seen. This module owns the family names,
the key of each family, the one statement that leaves a tombstone (inside the deleting
transaction) and the query that reads one back. Nothing here imports Twisted.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, upsert

TOMBSTONE_OBJECT = "object"  # object_tombstone_key
TOMBSTONE_BUCKET = "bucket"
TOMBSTONE_BUCKET_CONFIG = "bucket_config"  # bucket_config_tombstone_key
TOMBSTONE_UPLOAD = "upload"
TOMBSTONE_SETTING = "setting"
TOMBSTONE_CREDENTIAL = "credential"
TOMBSTONE_USER = "user"
TOMBSTONE_TEAM = "team"
TOMBSTONE_GRANT = "grant"
TOMBSTONE_TEAM_MEMBER = "team_member"  # team_id:user_id
TOMBSTONE_USER_GRANT = "user_grant"  # user_id:grant_id
TOMBSTONE_TEAM_GRANT = "team_grant"  # team_id:grant_id


def object_tombstone_key(bucket: str, key: str, version_id: str) -> str:
    """`bucket:version_id:key`; unambiguous because bucket names and version ids hold no
    colon, so `split(":", 2)` recovers the parts even when the key has colons."""
    return f"{bucket}:{version_id}:{key}"


def bucket_config_tombstone_key(bucket: str, key: str) -> str:
    return f"{bucket}:{key}"


def pair_key(first: str, second: str) -> str:
    """The key of an attachment (tombstones and control-plane files): ids hold no colon."""
    return f"{first}:{second}"


def leave_tombstone(
    db: Database, conn: Connection, family: str, key: str, seq: int | None = None,
    deleted_at: float | None = None,
) -> None:
    """Record the deletion of (family, key) in the caller's write transaction, stamped
    with the database's clock unless `deleted_at` is given (a peer's deletion keeps the
    peer's stamp), and the object seq the deletion took, for objects."""
    stamp = db.clock() if deleted_at is None else deleted_at
    upsert(
        conn,
        schema.tombstones,
        {"family": family, "key": key, "deleted_at": stamp, "seq": seq},
        ("family", "key"),
    )


def get_tombstone(db: Database, family: str, key: str) -> tuple[float, int | None] | None:
    """(deleted_at, seq) of the tombstone of a deleted entity, or None."""
    t = schema.tombstones
    with read_transaction(db.engine) as conn:
        row = conn.execute(
            sa.select(t.c.deleted_at, t.c.seq).where(t.c.family == family, t.c.key == key)
        ).first()
    if row is None:
        return None
    return float(row.deleted_at), None if row.seq is None else int(row.seq)
