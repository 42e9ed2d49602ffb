"""The lean read of one object row: `get_object`'s query, the one query of every GET and HEAD.

Through SQLAlchemy Core a point read costs a statement built and cache-keyed per call, an
explicit BEGIN, the SELECT, a fetch through the result wrapper and a ROLLBACK: five calls
into the driver (each releases and retakes the GIL, which other threads then hold) and a
few hundred microseconds of Python. A single SELECT needs no transaction to be consistent
(SQLite in autocommit mode reads one snapshot per statement; psycopg2 opens one implicitly
and the pool rolls it back on return), so this module runs the statement, compiled once
per dialect, on a pooled DBAPI connection: one execute, one fetch.

Driver errors are raised as SQLAlchemy's `DBAPIError` (with `connection_invalidated` set
and the connection dropped from the pool on a disconnect), so the retry rules of
`async_store.py` apply unchanged. Rows are read by position and turned into a record by
`schema.object_record`, as the Core query did. No Twisted here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.sql.compiler import SQLCompiler

from objstore.meta import schema
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


@dataclass(frozen=True)
class DriverStatement:
    sql: str
    positions: tuple[str, ...] | None  # parameter names in order (qmark), None when named

    def parameters(self, values: dict[str, Any]) -> Any:
        if self.positions is None:
            return values
        return tuple(values[name] for name in self.positions)


_COMPILED: dict[tuple[str, int], DriverStatement] = {}


def driver_statement(dialect: sa.Dialect, statement: sa.ClauseElement) -> DriverStatement:
    """`statement` compiled once for `dialect`, as the SQL text its driver runs."""
    key = (dialect.name, id(statement))
    found = _COMPILED.get(key)
    if found is None:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        positions = tuple(compiled.positiontup or ()) if compiled.positional else None
        found = DriverStatement(str(compiled), positions)
        _COMPILED[key] = found
    return found


def fetch_one(engine: Engine, statement: sa.Select[Any], values: dict[str, Any]
              ) -> tuple[Any, ...] | None:
    """The first row of `statement` run alone (no explicit transaction) on a pooled
    connection, as a plain tuple; None when there is none."""
    dialect = engine.dialect
    query = driver_statement(dialect, statement)
    parameters = query.parameters(values)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute(query.sql, parameters)
            row = cursor.fetchone()
        except dialect.loaded_dbapi.Error as error:
            disconnect = dialect.is_disconnect(error, raw.dbapi_connection, cursor)
            if disconnect:
                raw.invalidate(error)
            raise sa_exc.DBAPIError.instance(
                query.sql, parameters, error, dialect.loaded_dbapi.Error,
                connection_invalidated=disconnect, dialect=dialect,
            ) from error
        finally:
            cursor.close()
    finally:
        raw.close()  # back to the pool, which ends any implicit transaction
    return None if row is None else tuple(row)


def get_object(engine: Engine, bucket: str, key: str, version_id: str | None
               ) -> ObjectRecord | None:
    """The latest version of a key (which may be a delete marker) or the named version."""
    if version_id is None:
        row = fetch_one(engine, LATEST_OBJECT, {"bucket": bucket, "key": key})
    else:
        row = fetch_one(engine, OBJECT_VERSION,
                        {"bucket": bucket, "key": key, "version_id": version_id})
    return None if row is None else schema.object_record(dict(zip(_COLUMNS, row, strict=True)))
