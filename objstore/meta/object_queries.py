"""Reads of object rows: the point read of every GET and HEAD (`get_object`), full-record
listings (`list_latest`, `list_versions`; the S3 listings use the lean `listing_queries`),
usage totals, and the page-by-page walk over every row that `check` and export make.

`get_object` is a hot path: through SQLAlchemy Core a point read cost a statement built
and cache-keyed per call, an explicit BEGIN, the SELECT, a fetch through the result
wrapper and a ROLLBACK (five calls into the driver, each releasing and retaking the GIL).
It runs its statement, compiled once per dialect, alone on a pooled DBAPI connection
(`driver.fetch_one`): one execute, one fetch, rows read by position. The other reads are
one read transaction each (a consistent snapshot). Nothing here writes; no Twisted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from objstore.meta import schema, usage_counters
from objstore.meta.batch_statements import VERSIONS_OF, versions_of_values
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction
from objstore.meta.driver import fetch_all, fetch_one
from objstore.meta.keyspace import prefix_upper_bound
from objstore.meta.records import ObjectRecord

_o = schema.objects
_COLUMNS = tuple(column.name for column in _o.c)
LATEST_OBJECT = sa.select(_o).where(
    _o.c.bucket == sa.bindparam("bucket"), _o.c.key == sa.bindparam("key"),
    schema.LATEST_PREDICATE,
)
OBJECT_VERSION = sa.select(_o).where(
    _o.c.bucket == sa.bindparam("bucket"), _o.c.key == sa.bindparam("key"),
    _o.c.version_id == sa.bindparam("version_id"),
)
# Versions listing order: key ascending, then newest first.
VERSION_ORDER = (_o.c.key, _o.c.last_modified.desc(), _o.c.seq.desc())


def key_range(column: sa.ColumnElement[str], prefix: str) -> list[sa.ColumnElement[bool]]:
    """The conditions of `column` starting with `prefix` (none for "")."""
    if not prefix:
        return []
    clauses = [column >= prefix]
    upper = prefix_upper_bound(prefix)
    if upper is not None:
        clauses.append(column < upper)
    return clauses


def get_object(db: Database, bucket: str, key: str, version_id: str | None = None
               ) -> ObjectRecord | None:
    """The latest version of a key (which may be a delete marker) or the named version."""
    if version_id is None:
        row = fetch_one(db.engine, LATEST_OBJECT, {"bucket": bucket, "key": key})
    else:
        row = fetch_one(db.engine, OBJECT_VERSION,
                        {"bucket": bucket, "key": key, "version_id": version_id})
    return None if row is None else schema.object_record(dict(zip(_COLUMNS, row, strict=True)))


def get_object_versions(
    db: Database, bucket: str, versions: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], ObjectRecord]:
    """The named (key, version_id) versions of a bucket that exist, by (key, version_id):
    a batch delete's lookups, in one statement whatever their number
    (batch_statements.py `VERSIONS_OF`, one snapshot). The batch delete still guards
    each version by its seq."""
    wanted = list(dict.fromkeys(versions))
    if not wanted:
        return {}
    rows = fetch_all(db.engine, VERSIONS_OF[db.engine.dialect.name],
                     versions_of_values(bucket, wanted))
    found: dict[tuple[str, str], ObjectRecord] = {}
    for row in rows:
        record = schema.object_record(dict(zip(_COLUMNS, row, strict=True)))
        found[(record.key, record.version_id)] = record
    return found


def list_latest(
    db: Database, bucket: str, prefix: str = "", start_after: str = "", limit: int = 1000
) -> list[ObjectRecord]:
    """Latest, non-delete-marker versions whose key starts with prefix and sorts after
    start_after, ordered by key (binary/codepoint order), at most limit rows. One indexed
    range query."""
    if limit <= 0:
        return []
    where = [_o.c.bucket == bucket, schema.LATEST_PREDICATE, _o.c.is_delete_marker == sa.false()]
    where += key_range(_o.c.key, prefix)
    if start_after:
        where.append(_o.c.key > start_after)
    query = sa.select(_o).where(*where).order_by(_o.c.key).limit(limit)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.object_record(r) for r in rows]


def list_versions(
    db: Database,
    bucket: str,
    prefix: str = "",
    key_marker: str = "",
    version_marker: str = "",
    limit: int = 1000,
) -> list[ObjectRecord]:
    """All versions and delete markers, key ascending then newest first, starting after
    (key_marker, version_marker) as S3 ListObjectVersions defines the markers.

    key_marker alone starts after every version of that key; with version_marker, the
    listing resumes after that version of key_marker. A version_marker naming no
    existing version of key_marker is treated like key_marker alone; version_marker
    without key_marker is ignored (as S3 does)."""
    if limit <= 0:
        return []
    records: list[ObjectRecord] = []
    with read_transaction(db.engine) as conn:
        if key_marker and version_marker and key_marker.startswith(prefix):
            records += _versions_after_marker(conn, bucket, key_marker, version_marker, limit)
        remaining = limit - len(records)
        if remaining > 0:
            where = [_o.c.bucket == bucket, *key_range(_o.c.key, prefix)]
            if key_marker:
                where.append(_o.c.key > key_marker)
            query = sa.select(_o).where(*where).order_by(*VERSION_ORDER).limit(remaining)
            records += [schema.object_record(r) for r in conn.execute(query).mappings().all()]
    return records


def _versions_after_marker(
    conn: Connection, bucket: str, key: str, version_marker: str, limit: int
) -> list[ObjectRecord]:
    marker = conn.execute(
        sa.select(_o.c.last_modified, _o.c.seq).where(
            _o.c.bucket == bucket, _o.c.key == key, _o.c.version_id == version_marker)
    ).first()
    if marker is None:
        return []
    older = sa.or_(
        _o.c.last_modified < marker.last_modified,
        sa.and_(_o.c.last_modified == marker.last_modified, _o.c.seq < marker.seq),
    )
    query = (sa.select(_o).where(_o.c.bucket == bucket, _o.c.key == key, older)
             .order_by(*VERSION_ORDER).limit(limit))
    return [schema.object_record(r) for r in conn.execute(query).mappings().all()]


def bucket_usage(db: Database, bucket: str) -> tuple[int, int]:
    """(object version count, total bytes) over all versions of the bucket. Delete markers
    hold no bytes and are not counted. One row: the counters (meta/usage_counters.py)."""
    with read_transaction(db.engine) as conn:
        return usage_counters.usage_of(conn, bucket)


def storage_totals(db: Database) -> tuple[int, int, int]:
    """(bucket count, object version count, total bytes) for the whole store; delete
    markers are not counted. One row per bucket: the counters."""
    with read_transaction(db.engine) as conn:
        buckets = conn.execute(sa.select(sa.func.count()).select_from(schema.buckets))
        bucket_count = int(buckets.scalar_one())
        count, total = usage_counters.totals(conn)
    return bucket_count, count, total


def objects_batch(
    db: Database, after: tuple[str, str, str] | None, limit: int = 1000
) -> list[ObjectRecord]:
    """One page of `iter_objects`: rows strictly after `after` (bucket, key, version_id)
    in that order, in a read transaction of its own."""
    query = sa.select(_o).order_by(_o.c.bucket, _o.c.key, _o.c.version_id).limit(max(1, limit))
    if after is not None:
        query = query.where(sa.tuple_(_o.c.bucket, _o.c.key, _o.c.version_id) > sa.tuple_(*after))
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.object_record(r) for r in rows]


def iter_objects(db: Database, batch_size: int = 1000) -> Iterator[ObjectRecord]:
    """Every object row of every bucket, in (bucket, key, version_id) order, fetched page
    by page (`objects_batch`), so memory stays flat. For the offline tools: a generator
    cannot be shared between threads, so the daemon asks for `objects_batch` pages."""
    after: tuple[str, str, str] | None = None
    while True:
        batch = objects_batch(db, after, batch_size)
        yield from batch
        if len(batch) < batch_size:
            return
        last = batch[-1]
        after = (last.bucket, last.key, last.version_id)


def max_seq(db: Database) -> int:
    """Current value of the object sequence counter."""
    counter = schema.seq_counter
    with read_transaction(db.engine) as conn:
        value = conn.execute(
            sa.select(counter.c.value).where(counter.c.name == schema.OBJECTS_SEQ_NAME)
        ).scalar_one()
    return int(value)
