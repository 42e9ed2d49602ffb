"""The statements of the single-row apply of replicated object rows and deletes
(`object_apply_queries.py`), built once and compiled once per dialect (`driver.py`): what
a peer's row costs its replica is mostly these few statements, so each asks for as much
as one round trip can answer.

- `APPLY_STATE`: inside the apply's write transaction, after the seq counter, the bucket
  under FOR KEY SHARE (a concurrent bucket delete waits; no row: the bucket does not
  exist), the register's tombstone stamp, the newest `last_modified` among the key's
  other versions, and the register's local row (every column of `objects`, NULLs when
  there is none), in one statement.
- `REGISTER_STATE`: the reader's question before any file work, the register's tombstone
  stamp and its local row, in one statement (one snapshot on both backends, whether or
  not the bucket exists); the batch apply asks it of a register its rows name twice.
- `REGISTER_STATES`: REGISTER_STATE of many registers in one statement, whatever their
  number: the registers go as one JSON array bind, which the database turns into rows
  (SQLite's `json_each`, PostgreSQL's `json_array_elements`) joined to the rows and
  tombstones by their primary keys; one statement, one snapshot on both backends. Text
  per dialect, compiled once like the others: anti-entropy's page of registers. (JSON
  without ASCII escapes: a text the driver could not bind fails as it would as a bind.)
- `KEY_STAMPS`: every version's `last_modified` of many keys (a JSON array of (bucket,
  key)), the same way: the batch apply keeps them to find a row's newest other version
  without a query per row.
- `DELETE_REPLACED`: the removal of the row an applied row replaces when it does not
  become latest (its blobs, and whether it was latest).

Binds are prefixed `p_` as the object-row statements' are (`object_write_queries.py`).
`register_of` turns a row's trailing `objects` columns back into a record. No Twisted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.records import ObjectRecord
from objstore.meta.tombstones import TOMBSTONE_OBJECT, object_tombstone_key

_o = schema.objects
_b = schema.buckets
_t = schema.tombstones
_COLUMNS = tuple(column.name for column in _o.c)


def _param(name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(f"p_{name}")


def _register_row() -> sa.ColumnElement[bool]:
    """The join condition of the register's row (its bucket compared by the caller)."""
    return sa.and_(_o.c.key == _param("key"), _o.c.version_id == _param("version_id"))


_TOMBSTONE_STAMP = sa.select(_t.c.deleted_at).where(
    _t.c.family == _param("family"), _t.c.key == _param("tombstone_key")).scalar_subquery()
_NEWEST_OTHER = sa.select(sa.func.max(_o.c.last_modified)).where(
    _o.c.bucket == _param("bucket"), _o.c.key == _param("key"),
    _o.c.version_id != _param("version_id")).scalar_subquery()

# Columns: bucket name, tombstone stamp, newest other stamp, then `objects`' columns.
APPLY_STATE = (
    sa.select(_b.c.name, _TOMBSTONE_STAMP, _NEWEST_OTHER, *_o.c)
    .select_from(_b.outerjoin(_o, sa.and_(_o.c.bucket == _b.c.name, _register_row())))
    .where(_b.c.name == _param("bucket"))
    .with_for_update(of=_b, read=True, key_share=True)
)

# Columns: tombstone stamp, then `objects`' columns. Always one row.
_STAMP = sa.select(_TOMBSTONE_STAMP.label("deleted_at")).subquery("register")
REGISTER_STATE = (
    sa.select(_STAMP.c.deleted_at, *_o.c)
    .select_from(_STAMP.outerjoin(_o, sa.and_(_o.c.bucket == _param("bucket"),
                                              _register_row())))
)


_OBJECT_COLUMNS = ", ".join(f'o."{name}"' for name in _COLUMNS)
# The JSON array of a statement's binds, as rows: SQLite's json_each (`at`: the index
# from 0), PostgreSQL's json_array_elements (WITH ORDINALITY, from 1).
JSON_ROWS = {
    "sqlite": ("json_each(:{name}) AS r", "r.key", "json_extract(r.value, '$[{i}]')"),
    "postgresql": ("json_array_elements(CAST(:{name} AS json)) WITH ORDINALITY AS r(v, at)",
                   "r.at - 1", "r.v ->> {i}"),
}


def _register_states(dialect: str) -> sa.TextClause:
    each, at, item = JSON_ROWS[dialect]
    return sa.text(
        f"SELECT {at} AS at, (SELECT t.deleted_at FROM tombstones AS t "
        f"WHERE t.family = :p_family AND t.\"key\" = {item.format(i=3)}) AS deleted_at, "
        f"{_OBJECT_COLUMNS} FROM {each.format(name='p_registers')} "
        f"LEFT OUTER JOIN objects AS o ON o.bucket = {item.format(i=0)} "
        f"AND o.\"key\" = {item.format(i=1)} AND o.version_id = {item.format(i=2)}")


def _key_stamps(dialect: str) -> sa.TextClause:
    each, _, item = JSON_ROWS[dialect]
    return sa.text(
        f"SELECT o.bucket, o.\"key\", o.version_id, o.last_modified "
        f"FROM {each.format(name='p_keys')} JOIN objects AS o "
        f"ON o.bucket = {item.format(i=0)} AND o.\"key\" = {item.format(i=1)}")


# Per dialect. Columns: the register's index in `p_registers`, then REGISTER_STATE's.
# One row per register (each register once: the caller removes repeats).
REGISTER_STATES = {name: _register_states(name) for name in JSON_ROWS}
# Per dialect. Columns: bucket, key, version_id, last_modified of every version of the
# keys of `p_keys` (each key once).
KEY_STAMPS = {name: _key_stamps(name) for name in JSON_ROWS}


def register_states_values(registers: Sequence[tuple[str, str, str]]) -> dict[str, str]:
    """The binds of REGISTER_STATES for distinct `registers`."""
    return {"p_family": TOMBSTONE_OBJECT, "p_registers": json.dumps(
        [[bucket, key, version_id, object_tombstone_key(bucket, key, version_id)]
         for bucket, key, version_id in registers], ensure_ascii=False)}


def key_stamps_values(keys: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The binds of KEY_STAMPS for distinct (bucket, key) `keys`."""
    return {"p_keys": json.dumps([[bucket, key] for bucket, key in keys], ensure_ascii=False)}


DELETE_REPLACED = (
    sa.delete(_o)
    .where(_o.c.bucket == _param("bucket"), _register_row())
    .returning(_o.c.blob_id, _o.c.parts, _o.c.is_latest)
)


def register_values(bucket: str, key: str, version_id: str) -> dict[str, str]:
    """The binds of APPLY_STATE and REGISTER_STATE for a register."""
    return {"p_bucket": bucket, "p_key": key, "p_version_id": version_id,
            "p_family": TOMBSTONE_OBJECT,
            "p_tombstone_key": object_tombstone_key(bucket, key, version_id)}


def stamp_of(value: Any) -> float | None:
    return None if value is None else float(value)


def register_of(columns: Sequence[Any]) -> ObjectRecord | None:
    """The local row from the trailing `objects` columns of a state row (None when the
    outer join found none: its primary key columns are NULL)."""
    if columns[0] is None:
        return None
    return schema.object_record(dict(zip(_COLUMNS, columns, strict=True)))
