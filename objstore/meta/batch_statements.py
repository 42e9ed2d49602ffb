"""The set-based statements of a batch delete (DeleteObjects: up to 1,000 versions of one
bucket), one statement where one per version was run before, whatever the batch's size:
the versions named go as one JSON array bind, which the database turns into rows
(apply_statements.py `JSON_ROWS`: SQLite's `json_each`, PostgreSQL's
`json_array_elements`), matched against `objects` by its primary key.

- `VERSIONS_OF`: every column of the named (key, version_id) versions of a bucket that
  exist (one statement, one snapshot): the batch's read before the lock rules.
- `DELETE_KNOWN_ROWS`: the removal of the named (key, version_id, seq) rows of a bucket,
  each only while it still has the seq the caller read (the guard of
  `DELETE_KNOWN_ROW`); returns (key, version_id, is_latest) of each row removed.
- `NEWEST_REMAINING`: for each named key, the version that becomes its latest when its
  latest went (last_modified, then seq, as `NEWEST_VERSION`), NULL when none is left.

Text per dialect, compiled once like every driver statement (driver.py); binds prefixed
`p_` as the object-row statements' are. The `*_values` functions build the binds. The
JSON is written without ASCII escapes, as `register_states_values` writes it. No Twisted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.apply_statements import JSON_ROWS

_OBJECT_COLUMNS = ", ".join(f'o."{column.name}"' for column in schema.objects.c)


def _versions_of(dialect: str) -> sa.TextClause:
    each, _, item = JSON_ROWS[dialect]
    return sa.text(
        f"SELECT {_OBJECT_COLUMNS} FROM objects AS o WHERE o.bucket = :p_bucket "
        f"AND (o.\"key\", o.version_id) IN (SELECT {item.format(i=0)}, {item.format(i=1)} "
        f"FROM {each.format(name='p_versions')})")


def _delete_known_rows(dialect: str) -> sa.TextClause:
    each, _, item = JSON_ROWS[dialect]
    return sa.text(
        f"DELETE FROM objects WHERE bucket = :p_bucket "
        f"AND (\"key\", version_id, seq) IN (SELECT {item.format(i=0)}, {item.format(i=1)}, "
        f"CAST({item.format(i=2)} AS BIGINT) FROM {each.format(name='p_rows')}) "
        f"RETURNING \"key\", version_id, is_latest")


def _newest_remaining(dialect: str) -> sa.TextClause:
    each, _, item = JSON_ROWS[dialect]
    key = item.format(i=0)
    return sa.text(
        f"SELECT {key}, (SELECT o.version_id FROM objects AS o WHERE o.bucket = :p_bucket "
        f"AND o.\"key\" = {key} ORDER BY o.last_modified DESC, o.seq DESC LIMIT 1) "
        f"FROM {each.format(name='p_keys')}")


# Per dialect. Columns: `objects`' columns, one row per named version that exists.
VERSIONS_OF = {name: _versions_of(name) for name in JSON_ROWS}
# Per dialect. Columns: key, version_id, is_latest of each row removed.
DELETE_KNOWN_ROWS = {name: _delete_known_rows(name) for name in JSON_ROWS}
# Per dialect. Columns: key, the version id of its newest remaining version (or NULL).
NEWEST_REMAINING = {name: _newest_remaining(name) for name in JSON_ROWS}


def _array(rows: Iterable[Any]) -> str:
    return json.dumps(list(rows), ensure_ascii=False)


def versions_of_values(bucket: str, versions: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The binds of VERSIONS_OF: (key, version_id) pairs."""
    return {"p_bucket": bucket, "p_versions": _array(versions)}


def delete_known_rows_values(bucket: str, rows: Iterable[tuple[str, str, int]]
                             ) -> dict[str, str]:
    """The binds of DELETE_KNOWN_ROWS: (key, version_id, seq) of each row."""
    return {"p_bucket": bucket, "p_rows": _array(rows)}


def newest_remaining_values(bucket: str, keys: Iterable[str]) -> dict[str, str]:
    """The binds of NEWEST_REMAINING: distinct keys."""
    return {"p_bucket": bucket, "p_keys": _array([key] for key in keys)}
