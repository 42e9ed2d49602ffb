"""The rows the stage jobs change: `rotate-key` (workers/key_rotation.py) and `encrypt`,
`decrypt`, `compress`, `decompress` (workers/stage_jobs.py). A walk over object versions
with blobs of their own in (bucket, key, version_id) order from a resume cursor, filtered
by their stages (`STAGE_FILTERS`); the swap of one version's wrapped data key; the swap of
one version's blob for a rewritten one. Each swap is made only when the row still holds
what the job read (a write or delete racing the job wins; the job skips that version) and
changes neither the row's seq nor its stamp: everything a client sees stays the same.
One transaction per call; no Twisted.
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


# Which versions a stage job walks (single-blob versions only: a multipart object's parts
# are left as they are). "plain": not encrypted; "encrypted": SSE-S3 or any other;
# "uncompressed" / "compressed".
STAGE_FILTERS: dict[str, sa.ColumnElement[bool]] = {
    "plain": _o.c.encryption_algorithm.is_(None),
    "encrypted": _o.c.encryption_algorithm.is_not(None),
    "uncompressed": _o.c.compression.is_(None),
    "compressed": _o.c.compression.is_not(None),
}


def _staged_query(columns: list[Any], stages: str, bucket: str | None, prefix: str) -> Any:
    query = (sa.select(*columns).select_from(_o)
             .where(STAGE_FILTERS[stages], _o.c.is_delete_marker.is_(False),
                    _o.c.blob_id.is_not(None)))
    if bucket is not None:
        query = query.where(_o.c.bucket == bucket)
    if prefix:
        query = query.where(_o.c.key >= prefix, _o.c.key < prefix + "\U0010ffff")
    return query


def versions_by_stages(db: Database, stages: str, after: Cursor | None, limit: int = 100, *,
                       bucket: str | None = None, prefix: str = "") -> list[ObjectRecord]:
    """Up to `limit` versions matching `STAGE_FILTERS[stages]` after `after`."""
    query = (_staged_query([_o], stages, bucket, prefix)
             .order_by(_o.c.bucket, _o.c.key, _o.c.version_id).limit(max(1, limit)))
    if after is not None:
        query = query.where(sa.tuple_(_o.c.bucket, _o.c.key, _o.c.version_id) > after)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.object_record(row) for row in rows]


def count_versions_by_stages(db: Database, stages: str, *, bucket: str | None = None,
                             prefix: str = "") -> tuple[int, int]:
    """How many versions `versions_by_stages` walks, and their bytes (a job's total)."""
    query = _staged_query([sa.func.count(), sa.func.coalesce(sa.func.sum(_o.c.size), 0)],
                          stages, bucket, prefix)
    with read_transaction(db.engine) as conn:
        count, size = conn.execute(query).one()
    return int(count), int(size)


STAGE_COLUMNS = ("compression", "encryption_algorithm", "encryption_key_id",
                 "encryption_params")


@changes_objects
def swap_blob(db: Database, record: ObjectRecord, rewritten: ObjectRecord
              ) -> ObjectRecord | None:
    """`record`'s version now stored as `rewritten` (its blob id and stage fields), when its
    row still names `record`'s blob; None when it was replaced or went. Changes of the
    version's mutable fields meanwhile (tags, lock state) are kept: they are not touched."""
    given = schema.object_values(rewritten)
    where = sa.and_(_o.c.bucket == record.bucket, _o.c.key == record.key,
                    _o.c.version_id == record.version_id, _o.c.blob_id == record.blob_id)
    with write_transaction(db.engine) as conn:
        row = conn.execute(
            sa.update(_o).where(where)
            .values(blob_id=rewritten.blob_id, **{name: given[name] for name in STAGE_COLUMNS})
            .returning(_o)
        ).mappings().first()
    return None if row is None else schema.object_record(row)
