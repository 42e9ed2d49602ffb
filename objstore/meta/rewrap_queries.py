"""The rows the stage jobs change: `rotate-key` (workers/key_rotation.py: object versions,
their parts' keys, and the parts of open uploads) and `encrypt`,
`decrypt`, `compress`, `decompress` (workers/stage_jobs.py). A walk over object versions
with blobs of their own in (bucket, key, version_id) order from a resume cursor, filtered
by their stages (`STAGE_FILTERS`); the swap of one version's wrapped data key; the swap of
one version's blob for a rewritten one. Each swap is made only when the row still holds
what the job read (a write or delete racing the job wins; the job skips that version).
Everything a client sees stays the same (last_modified, lock and tag stamps, ETag); the
swap takes a fresh seq and stamps `stages_updated_at` (`lww.stamp_write` over the row's
previous one, read after the seq counter's lock), so that anti-entropy carries the new
stored form to the peers of a cluster and the last-writer-wins order prefers it there
over the old form, never over a client's change (docs/CLUSTER.md, "Maintenance jobs
across nodes"). One transaction per call; no Twisted.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from objstore.convergence.lww import stamp_write
from objstore.meta import schema
from objstore.meta.database import Database, changes_objects
from objstore.meta.dialect import read_transaction, write_transaction
from objstore.meta.driver import CoreRows
from objstore.meta.object_write_queries import next_seq
from objstore.meta.records import ObjectRecord, PartRecord, PartRef, UploadRecord

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


def _parts_json(parts: tuple[PartRef, ...]) -> str:
    return schema.dumps_json([schema.part_ref_dict(part) for part in parts])


@changes_objects
def swap_wrapped_key(db: Database, record: ObjectRecord, key_id: str,
                     params: dict[str, Any], parts: tuple[PartRef, ...] | None = None
                     ) -> ObjectRecord | None:
    """`record`'s version with its data key wrapped anew (`key_id`, `params`; a composite's
    `parts` with theirs), when its row still holds `record`'s wrapped keys; None when it
    changed or went meanwhile."""
    where = sa.and_(_o.c.bucket == record.bucket, _o.c.key == record.key,
                    _o.c.version_id == record.version_id,
                    _o.c.blob_id == record.blob_id,
                    _o.c.encryption_key_id == record.encryption_key_id,
                    _o.c.encryption_params == schema.dumps_json(record.encryption_params))
    values: dict[str, Any] = {"encryption_key_id": key_id,
                              "encryption_params": schema.dumps_json(params)}
    if parts is not None:
        # The parts' wraps as read: any change of the row since took a fresh seq.
        where = sa.and_(where, _o.c.seq == record.seq)
        values["parts"] = _parts_json(parts)
    with write_transaction(db.engine) as conn:
        stamp = _restamp(conn, where, db.clock())
        if stamp is None:
            return None
        row = conn.execute(
            sa.update(_o).where(where).values(**values, **stamp).returning(_o)
        ).mappings().first()
    return None if row is None else schema.object_record(row)


_u = schema.multipart_uploads
_p = schema.multipart_parts
PartCursor = tuple[str, int]  # upload_id, part_number


def _keyed_parts(bucket: str | None, prefix: str) -> Any:
    query = (sa.select(_u, *(c.label(f"part_{c.name}") for c in _p.c))
             .select_from(_p.join(_u, _p.c.upload_id == _u.c.upload_id))
             .where(_p.c.encryption_params.is_not(None),
                    _p.c.encryption_params.like('%"wrapped_key"%')))
    if bucket is not None:
        query = query.where(_u.c.bucket == bucket)
    if prefix:
        query = query.where(_u.c.key >= prefix, _u.c.key < prefix + "\U0010ffff")
    return query


def wrapped_parts(db: Database, after: PartCursor | None, limit: int = 100, *,
                  bucket: str | None = None, prefix: str = ""
                  ) -> list[tuple[UploadRecord, PartRecord]]:
    """Up to `limit` parts of open uploads holding a wrapped data key, after `after` in
    (upload_id, part_number) order, with their uploads (of `bucket`, keys under
    `prefix`)."""
    query = (_keyed_parts(bucket, prefix).order_by(_p.c.upload_id, _p.c.part_number)
             .limit(max(1, limit)))
    if after is not None:
        query = query.where(sa.tuple_(_p.c.upload_id, _p.c.part_number) > after)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    found = []
    for row in rows:
        part = {name[len("part_"):]: value for name, value in row.items()
                if name.startswith("part_")}
        found.append((schema.upload_record(row), schema.part_record(part)))
    return found


def count_wrapped_parts(db: Database, *, bucket: str | None = None, prefix: str = "") -> int:
    """How many parts `wrapped_parts` walks."""
    query = sa.select(sa.func.count()).select_from(_keyed_parts(bucket, prefix).subquery())
    with read_transaction(db.engine) as conn:
        return int(conn.execute(query).scalar_one())


def swap_part_key(db: Database, part: PartRecord, params: dict[str, Any]
                  ) -> PartRecord | None:
    """An open upload's `part` with its data key wrapped anew (`params`), when its row still
    holds `part`'s blob and wrapped key; None when it was replaced or went meanwhile. Parts
    are control-plane rows ordered by their last_modified: it moves 1 µs on (the least
    step the order sees; ListParts shows milliseconds), so the peers' control-plane merge
    takes the new wrap."""
    where = sa.and_(_p.c.upload_id == part.upload_id, _p.c.part_number == part.part_number,
                    _p.c.blob_id == part.blob_id,
                    _p.c.encryption_params == schema.dumps_json(part.encryption_params))
    with write_transaction(db.engine) as conn:
        row = conn.execute(
            sa.update(_p).where(where)
            .values(encryption_params=schema.dumps_json(params),
                    last_modified=stamp_write(part.last_modified, part.last_modified))
            .returning(_p)
        ).mappings().first()
    return None if row is None else schema.part_record(row)


def _restamp(conn: Any, where: sa.ColumnElement[bool], now: float) -> dict[str, Any] | None:
    """A fresh seq (taking the counter's lock, which every object write takes first, so
    the row read next stays as read until commit) and the next `stages_updated_at` of the
    row `where` selects; None when no row matches."""
    seq = next_seq(CoreRows(conn))
    found = conn.execute(sa.select(_o.c.stages_updated_at).where(where)).first()
    if found is None:
        return None
    return {"seq": seq, "stages_updated_at": stamp_write(now, found[0])}


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
        stamp = _restamp(conn, where, db.clock())
        if stamp is None:
            return None
        row = conn.execute(
            sa.update(_o).where(where)
            .values(blob_id=rewritten.blob_id, **stamp,
                    **{name: given[name] for name in STAGE_COLUMNS})
            .returning(_o)
        ).mappings().first()
    return None if row is None else schema.object_record(row)
