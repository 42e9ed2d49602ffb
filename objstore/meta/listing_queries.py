"""Lean listing queries: pages of ListObjects and ListObjectVersions as `ListingEntry`s.

A listing shows a handful of columns per row. `list_latest` and `list_versions` return full
`ObjectRecord`s, which JSON-decode user metadata, system headers, checksums, tags,
encryption parameters and part references for every row: on a 1000-key page that was most
of the request's time. The queries here select only the columns a listing shows, and keep
exactly the order, range and marker semantics of `list_latest` / `list_versions` (a test
compares them on both backends).

Each page is one index range scan: `ux_objects_latest` (bucket, key) for latest versions,
`ix_objects_versions` (bucket, key, last_modified DESC, seq DESC) for versions. The lower
bound is computed here as the larger of the prefix and the marker, so the scan starts at the
marker even deep inside a prefix (SQLite uses one lower bound per range and would otherwise
walk from the start of the prefix, filtering).

On SQLite the index is named (`INDEXED BY`): without statistics (nothing runs ANALYZE) the
planner rates both (bucket, key) indexes alike and takes the one created last, and
SQLAlchemy creates a table's indexes in an order that changes from process to process, so
half of all databases would read a latest listing through `ix_objects_versions`, walking
every version of every key in the range and filtering `is_latest` row by row. PostgreSQL
plans from its statistics. Statements are compiled once per dialect and run with the
driver's own parameters; rows are unpacked by position, without SQLAlchemy's type
processing.

With a delimiter the store also skips groups (`skip_groups`): after the first row of a
group the next read starts at the first key past the group, so a page of 1000
CommonPrefixes costs 1000 short range queries inside ONE read transaction on one DB
thread (about 35 µs each), not 1000 round trips through the thread pool. The engine's
grouping (engine/listing.py, engine/versioning.py) still decides what is listed; it just
sees fewer rows.

Both queries are functions of a `Database`, each one read transaction. No Twisted here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction
from objstore.meta.driver import CoreRows, driver_statement
from objstore.meta.keyspace import group_of, prefix_upper_bound
from objstore.meta.records import ObjectRecord


@dataclass(slots=True)
class ListingEntry:
    """What a listing shows of one version (or delete marker). Not frozen: a frozen
    dataclass's __init__ costs about 1 µs more per entry, 1 ms per page of 1000."""

    key: str
    version_id: str
    size: int
    etag: str
    last_modified: float
    is_latest: bool
    is_delete_marker: bool
    owner_id: str
    owner_name: str
    storage_class: str
    checksum_algorithm: str | None  # as listings name it ("CRC32"); None without checksums
    checksum_type: str | None


def checksum_algorithm(checksums_json: str | None) -> str | None:
    """The ChecksumAlgorithm a listing shows for a stored `checksums` JSON object: the first
    algorithm in sorted order, upper-cased (as for `ObjectRecord.checksums`). A single
    entry, the common case, is read without decoding (algorithm names and base64 digests
    hold no quotes)."""
    if not checksums_json or checksums_json == "{}":
        return None
    if checksums_json.count('"') == 4 and checksums_json.startswith('{"'):
        return checksums_json[2:checksums_json.index('"', 2)].upper()
    names = sorted(schema.loads_dict(checksums_json))
    return names[0].upper() if names else None


def listed_checksum_algorithm(record: ObjectRecord | ListingEntry) -> str | None:
    """ChecksumAlgorithm of a listed entry, from either kind of record."""
    if isinstance(record, ListingEntry):
        return record.checksum_algorithm
    return sorted(record.checksums)[0].upper() if record.checksums else None


def entry_of(record: ObjectRecord) -> ListingEntry:
    """The listing entry of a full record (what the lean queries return for its row)."""
    return ListingEntry(
        record.key, record.version_id, record.size, record.etag, record.last_modified,
        record.is_latest, record.is_delete_marker, record.owner_id, record.owner_name,
        record.storage_class, listed_checksum_algorithm(record),
        record.checksum_type,
    )


# -- statements ------------------------------------------------------------------------

_o = schema.objects
_COLUMNS = (
    _o.c.key, _o.c.version_id, _o.c.size, _o.c.etag, _o.c.last_modified, _o.c.is_latest,
    _o.c.is_delete_marker, _o.c.owner_id, _o.c.owner_name, _o.c.storage_class,
    _o.c.checksums, _o.c.checksum_type,
)
_VERSION_ORDER = (_o.c.key, _o.c.last_modified.desc(), _o.c.seq.desc())


def _ranged(where: list[sa.ColumnElement[bool]], strict: bool, upper: bool
            ) -> list[sa.ColumnElement[bool]]:
    """`where` plus one lower bound on key (:lower, > when strict) and an upper bound
    (:upper) when there is one."""
    lower: sa.BindParameter[str] = sa.bindparam("lower")
    where = [*where, _o.c.key > lower if strict else _o.c.key >= lower]
    if upper:
        where.append(_o.c.key < sa.bindparam("upper"))
    return where


def _latest_statement(strict: bool, upper: bool) -> sa.Select[Any]:
    where = [_o.c.bucket == sa.bindparam("bucket"), schema.LATEST_PREDICATE,
             _o.c.is_delete_marker == sa.false()]
    return (sa.select(*_COLUMNS).where(*_ranged(where, strict, upper))
            .order_by(_o.c.key).limit(sa.bindparam("limit")))


def _versions_statement(strict: bool, upper: bool) -> sa.Select[Any]:
    where = [_o.c.bucket == sa.bindparam("bucket")]
    return (sa.select(*_COLUMNS).where(*_ranged(where, strict, upper))
            .order_by(*_VERSION_ORDER).limit(sa.bindparam("limit")))


_LATEST = {(s, u): _latest_statement(s, u) for s in (False, True) for u in (False, True)}
_VERSIONS = {(s, u): _versions_statement(s, u) for s in (False, True) for u in (False, True)}
LATEST_INDEX = "ux_objects_latest"
VERSIONS_INDEX = "ix_objects_versions"

_MARKER = sa.select(_o.c.last_modified, _o.c.seq).where(
    _o.c.bucket == sa.bindparam("bucket"), _o.c.key == sa.bindparam("key"),
    _o.c.version_id == sa.bindparam("version_id"),
)
_OLDER_THAN_MARKER = (
    sa.select(*_COLUMNS)
    .where(
        _o.c.bucket == sa.bindparam("bucket"), _o.c.key == sa.bindparam("key"),
        sa.or_(
            _o.c.last_modified < sa.bindparam("last_modified"),
            sa.and_(_o.c.last_modified == sa.bindparam("last_modified"),
                    _o.c.seq < sa.bindparam("seq")),
        ),
    )
    .order_by(*_VERSION_ORDER)
    .limit(sa.bindparam("limit"))
)


def key_bounds(prefix: str, after: str) -> tuple[str, bool, str | None]:
    """(lower, strict, upper) of the keys that start with `prefix` and sort after `after`
    ("" for none): the single lower bound is the larger of the two."""
    upper = prefix_upper_bound(prefix) if prefix else None
    if after and after >= prefix:
        return after, True, upper
    return prefix, False, upper


def _entries(rows: Sequence[Any]) -> list[ListingEntry]:
    return [
        ListingEntry(key, version_id, size, etag, last_modified, bool(is_latest),
                     bool(is_marker), owner_id, owner_name, storage_class,
                     checksum_algorithm(checksums), checksum_type)
        for (key, version_id, size, etag, last_modified, is_latest, is_marker, owner_id,
             owner_name, storage_class, checksums, checksum_type) in rows
    ]


def _driver_rows(rows: CoreRows, statement: sa.ClauseElement, values: dict[str, Any],
                 sqlite_index: str) -> list[Any]:
    """`rows.all` without SQLAlchemy's Row objects: the driver's own tuples, fetched from
    its cursor (a third of the cost of reading 1000 rows). An error while fetching is the
    driver's own, which the retry rules read as they read the hot paths' (retry.py)."""
    query = driver_statement(rows.conn.dialect, statement, sqlite_index)
    if query.defaults:
        values = {**query.defaults, **values}
    result = rows.conn.exec_driver_sql(query.sql, query.parameters(values))
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


def _range(rows: CoreRows, statements: dict[tuple[bool, bool], sa.Select[Any]], index: str,
           bucket: str, bounds: tuple[str, bool, str | None], limit: int
           ) -> list[ListingEntry]:
    lower, strict, upper = bounds
    params: dict[str, Any] = {"bucket": bucket, "lower": lower, "limit": limit}
    if upper is not None:
        params["upper"] = upper
    statement = statements[(strict, upper is not None)]
    return _entries(_driver_rows(rows, statement, params, index))


# Where the next read of a skip scan starts: after an entry, or at a key (inclusive).
_Cursor = tuple[ListingEntry | None, str | None]
# Rows asked for after a group: the next row usually starts another group.
AFTER_GROUP_ROWS = 2


def skip_groups(read: Callable[[_Cursor, int], list[ListingEntry]], prefix: str,
                delimiter: str, limit: int) -> list[ListingEntry]:
    """At most `limit` rows of a listing, in order, in which only the first row of each
    delimiter group appears: after it, the next read starts at the first key past the
    group (one short range query per group, all inside the caller's transaction).
    `read(cursor, n)` returns the next n rows from a cursor; (None, None) is the start."""
    out: list[ListingEntry] = []
    cursor: _Cursor = (None, None)
    ask = limit
    while True:
        rows = read(cursor, ask)
        jumped = False
        for entry in rows:
            out.append(entry)
            if len(out) >= limit:
                return out
            group = group_of(entry.key, prefix, delimiter)
            if group is None:
                cursor = (entry, None)
                continue
            following = prefix_upper_bound(group)
            if following is None:  # nothing sorts after this group
                return out
            cursor, jumped = (None, following), True
            break
        if jumped:
            ask = min(limit - len(out), AFTER_GROUP_ROWS)
        elif len(rows) < ask:
            return out
        else:
            ask = min(limit - len(out), ask * 2)


def list_latest_entries(
    db: Database, bucket: str, prefix: str = "", start_after: str = "", limit: int = 1000,
    delimiter: str = "",
) -> list[ListingEntry]:
    """`list_latest` as listing entries: latest, non-delete-marker versions whose key
    starts with prefix and sorts after start_after, by key, at most limit. With a
    delimiter, only the first row of each group is returned (see `skip_groups`)."""
    if limit <= 0:
        return []
    upper = prefix_upper_bound(prefix) if prefix else None

    def read(cursor: _Cursor, n: int) -> list[ListingEntry]:
        after, at = cursor
        if at is not None:
            bounds = (at, False, upper)
        else:
            bounds = key_bounds(prefix, after.key if after is not None else start_after)
        return _range(rows, _LATEST, LATEST_INDEX, bucket, bounds, n)

    with read_transaction(db.engine) as conn:
        rows = CoreRows(conn)
        if not delimiter:
            return read((None, None), limit)
        return skip_groups(read, prefix, delimiter, limit)


def list_version_entries(
    db: Database,
    bucket: str,
    prefix: str = "",
    key_marker: str = "",
    version_marker: str = "",
    limit: int = 1000,
    delimiter: str = "",
) -> list[ListingEntry]:
    """`list_versions` as listing entries: every version and delete marker, key ascending
    then newest first, after (key_marker, version_marker), with the same markers as
    `list_versions` (key_marker alone starts after every version of that key; with
    version_marker the listing resumes after that version of key_marker; a version_marker
    naming no version of it counts as absent). With a delimiter, only the first row of
    each group is returned (see `skip_groups`)."""
    if limit <= 0:
        return []
    upper = prefix_upper_bound(prefix) if prefix else None

    def read(cursor: _Cursor, n: int) -> list[ListingEntry]:
        after, at = cursor
        if at is not None:
            return _range(rows, _VERSIONS, VERSIONS_INDEX, bucket, (at, False, upper), n)
        if after is not None:
            return _versions_after(rows, bucket, prefix, after.key, after.version_id, n)
        return _versions_after(rows, bucket, prefix, key_marker, version_marker, n)

    with read_transaction(db.engine) as conn:
        rows = CoreRows(conn)
        if not delimiter:
            return read((None, None), limit)
        return skip_groups(read, prefix, delimiter, limit)


def _versions_after(rows: CoreRows, bucket: str, prefix: str, key_marker: str,
                    version_marker: str, limit: int) -> list[ListingEntry]:
    entries: list[ListingEntry] = []
    if key_marker and version_marker and key_marker.startswith(prefix):
        marker = rows.conn.execute(_MARKER, {"bucket": bucket, "key": key_marker,
                                             "version_id": version_marker}).first()
        if marker is not None:
            entries = _entries(_driver_rows(rows, _OLDER_THAN_MARKER, {
                "bucket": bucket, "key": key_marker, "limit": limit,
                "last_modified": marker.last_modified, "seq": marker.seq,
            }, VERSIONS_INDEX))
    remaining = limit - len(entries)
    if remaining > 0:
        entries += _range(rows, _VERSIONS, VERSIONS_INDEX, bucket,
                          key_bounds(prefix, key_marker), remaining)
    return entries
