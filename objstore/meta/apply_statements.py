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
  not the bucket exists); the batch apply asks it of each row in its transaction.
- `REGISTER_STATES`: REGISTER_STATE of several registers in one statement (a UNION ALL
  of one branch per register: one statement, one snapshot on both backends), compiled
  once for each of a few sizes: anti-entropy's page of registers.
- `KEY_STAMPS`: every version's `last_modified` of a key (the batch apply keeps them to
  find a row's newest other version without a query per row).
- `DELETE_REPLACED`: the removal of the row an applied row replaces when it does not
  become latest (its blobs, and whether it was latest).

Binds are prefixed `p_` as the object-row statements' are (`object_write_queries.py`).
`register_of` turns a row's trailing `objects` columns back into a record. No Twisted.
"""

from __future__ import annotations

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


def _register_state_at(index: int) -> sa.Select[Any]:
    """REGISTER_STATE of the register whose binds end in `_{index}`, its index first."""
    def bind(name: str) -> sa.BindParameter[Any]:
        return sa.bindparam(f"p_{name}_{index}")

    stamp = sa.select(sa.select(_t.c.deleted_at).where(
        _t.c.family == _param("family"), _t.c.key == bind("tombstone_key"))
        .scalar_subquery().label("deleted_at")).subquery(f"register_{index}")
    return (
        sa.select(sa.literal_column(str(index)).label("at"), stamp.c.deleted_at, *_o.c)
        .select_from(stamp.outerjoin(_o, sa.and_(
            _o.c.bucket == bind("bucket"), _o.c.key == bind("key"),
            _o.c.version_id == bind("version_id"))))
    )


# How many registers one REGISTER_STATES statement reads: a page's registers go in the
# fewest statements of these sizes (the last one padded by repeating its last register).
REGISTER_STATES_SIZES = (4, 16, 64)
# Columns: the register's index in the statement, then REGISTER_STATE's. One row each.
REGISTER_STATES = {size: sa.union_all(*(_register_state_at(i) for i in range(size)))
                   for size in REGISTER_STATES_SIZES}


def register_states_values(registers: Sequence[tuple[str, str, str]]) -> dict[str, str]:
    """The binds of REGISTER_STATES[len(registers)]."""
    values = {"p_family": TOMBSTONE_OBJECT}
    for index, (bucket, key, version_id) in enumerate(registers):
        values[f"p_bucket_{index}"] = bucket
        values[f"p_key_{index}"] = key
        values[f"p_version_id_{index}"] = version_id
        values[f"p_tombstone_key_{index}"] = object_tombstone_key(bucket, key, version_id)
    return values


# Columns: version_id, last_modified of every version of a key (`_KeyStamps` of the batch).
KEY_STAMPS = sa.select(_o.c.version_id, _o.c.last_modified).where(
    _o.c.bucket == _param("bucket"), _o.c.key == _param("key"))

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
