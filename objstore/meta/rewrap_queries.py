"""The rows a `rotate-key` job re-wraps (workers/key_rotation.py): a walk over encrypted
object versions in (bucket, key, version_id) order from a resume cursor, and the swap of
one version's wrapped data key, made only when the row still holds the wrapped key the job
read (a write or delete racing the job wins; the job skips that version). The swap changes
neither the row's seq nor its stamp: the stored bytes and everything a client sees stay
the same. One transaction per call; no Twisted.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database, changes_objects
from objstore.meta.dialect import read_transaction, write_transaction
from objstore.meta.records import ObjectRecord

_o = schema.objects

Cursor = tuple[str, str, str]  # bucket, key, version_id


def encrypted_versions(db: Database, after: Cursor | None, limit: int = 100, *,
                       bucket: str | None = None, prefix: str = "") -> list[ObjectRecord]:
    """Up to `limit` encrypted versions sorting strictly after `after`, of `bucket` (every
    bucket when None) and keys starting with `prefix`."""
    query = (sa.select(_o)
             .where(_o.c.encryption_algorithm.is_not(None), _o.c.is_delete_marker.is_(False))
             .order_by(_o.c.bucket, _o.c.key, _o.c.version_id)
             .limit(max(1, limit)))
    if bucket is not None:
        query = query.where(_o.c.bucket == bucket)
    if prefix:
        query = query.where(_o.c.key >= prefix, _o.c.key < prefix + "\U0010ffff")
    if after is not None:
        query = query.where(sa.tuple_(_o.c.bucket, _o.c.key, _o.c.version_id) > after)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.object_record(row) for row in rows]


@changes_objects
def swap_wrapped_key(db: Database, record: ObjectRecord, key_id: str,
                     params: dict[str, Any]) -> ObjectRecord | None:
    """`record`'s version with its data key wrapped anew (`key_id`, `params`), when its row
    still holds `record`'s wrapped key; None when it changed or went meanwhile."""
    where = sa.and_(_o.c.bucket == record.bucket, _o.c.key == record.key,
                    _o.c.version_id == record.version_id,
                    _o.c.blob_id == record.blob_id,
                    _o.c.encryption_key_id == record.encryption_key_id,
                    _o.c.encryption_params == schema.dumps_json(record.encryption_params))
    with write_transaction(db.engine) as conn:
        row = conn.execute(
            sa.update(_o).where(where)
            .values(encryption_key_id=key_id, encryption_params=schema.dumps_json(params))
            .returning(_o)
        ).mappings().first()
    return None if row is None else schema.object_record(row)


def count_encrypted_versions(db: Database, *, bucket: str | None = None,
                             prefix: str = "") -> int:
    """How many encrypted versions `encrypted_versions` walks (a job's total)."""
    query = (sa.select(sa.func.count()).select_from(_o)
             .where(_o.c.encryption_algorithm.is_not(None), _o.c.is_delete_marker.is_(False)))
    if bucket is not None:
        query = query.where(_o.c.bucket == bucket)
    if prefix:
        query = query.where(_o.c.key >= prefix, _o.c.key < prefix + "\U0010ffff")
    with read_transaction(db.engine) as conn:
        return int(conn.execute(query).scalar_one())
