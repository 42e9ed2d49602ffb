"""Statements compiled once per dialect and run with the driver's own parameters: the
machinery of the hot paths (GET/HEAD's point read, PUT's row transaction) and of the
listing pages.

Through SQLAlchemy Core a statement is built, coerced and cache-keyed per call, and BEGIN,
every statement and COMMIT go through the Connection's event and result machinery: most of
the Python time of a small GET or PUT. Here a statement is compiled the first time it runs
on a dialect (`driver_statement`), and then run as SQL text with plain Python parameters of
the column types (text, integers, floats, booleans), which both drivers bind without
SQLAlchemy's processors. Binds are named by the caller; the object-row statements prefix
theirs with `p_` (a bind named like a column of the table an UPDATE changes is reserved).

Three ways to run such statements, all reading and writing through the same `RowSource`
interface (`first`, `execute`):
- `fetch_one`: one statement alone on a pooled DBAPI connection (no explicit transaction:
  SQLite in autocommit mode reads one snapshot per statement; psycopg2 opens one
  implicitly and the pool rolls it back on return): one execute, one fetch.
  `fetch_all` is the same for every row.
- `driver_transaction`: one write transaction on a pooled DBAPI connection, inside the
  engine's write gate: `BEGIN IMMEDIATE` on SQLite (the write lock up front, as
  `dialect.write_transaction` takes it), the implicit transaction of psycopg2 on
  PostgreSQL; COMMIT on success, ROLLBACK on any exception.
- `CoreRows`: the same statements inside a SQLAlchemy Core transaction (the store's other
  writes of object rows, which mix them with Core statements).

Driver errors are raised as SQLAlchemy's `DBAPIError` (a disconnect invalidates the
connection), so the retry rules of `meta/retry.py` apply unchanged. No Twisted here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.compiler import SQLCompiler

from objstore.meta import write_group
from objstore.meta.dialect import write_gate
from objstore.meta.retry import driver_error


@dataclass(frozen=True)
class DriverStatement:
    sql: str
    positions: tuple[str, ...] | None  # parameter names in order (qmark), None when named
    # Values SQLAlchemy bound itself: SQLite's OFFSET 0 after a bound LIMIT (the listings;
    # `CoreRows.all` adds them). The hot paths' statements have none.
    defaults: Mapping[str, Any]

    def parameters(self, values: Mapping[str, Any]) -> Any:
        if self.positions is None:
            return values
        return tuple(values[name] for name in self.positions)


_COMPILED: dict[tuple[str, int, str | None], DriverStatement] = {}


def driver_statement(
    dialect: sa.Dialect, statement: sa.ClauseElement, sqlite_index: str | None = None
) -> DriverStatement:
    """`statement` compiled once for `dialect`, as the SQL text its driver runs. With
    `sqlite_index`, a read of `objects` names that index on SQLite (`INDEXED BY`; see
    listing_queries.py for why)."""
    key = (dialect.name, id(statement), sqlite_index)
    found = _COMPILED.get(key)
    if found is None:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        sql = str(compiled)
        if sqlite_index is not None and dialect.name == "sqlite":
            if sql.count("\nFROM objects \n") != 1:
                raise AssertionError(f"cannot place INDEXED BY in {sql!r}")
            sql = sql.replace("\nFROM objects \n", f"\nFROM objects INDEXED BY {sqlite_index} \n")
        positions = tuple(compiled.positiontup or ()) if compiled.positional else None
        defaults = {name: value for name, value in compiled.params.items() if value is not None}
        found = DriverStatement(sql, positions, defaults)
        _COMPILED[key] = found
    return found


# Rows per multi-row INSERT: powers of two down to 1, so a batch of any size runs as a few
# statements of at most len(_INSERT_CHUNKS) shapes, each compiled once per table.
_INSERT_CHUNKS = (256, 64, 16, 4, 1)
_MULTI_INSERTS: dict[tuple[int, tuple[str, ...], int], sa.ClauseElement] = {}


def multi_row_insert(table: sa.Table, columns: tuple[str, ...], count: int
                     ) -> sa.ClauseElement:
    """`INSERT INTO table (columns) VALUES (...), (...)` for `count` rows, with binds named
    `<column>__<row>` (built once per shape)."""
    key = (id(table), columns, count)
    found = _MULTI_INSERTS.get(key)
    if found is None:
        found = sa.insert(table).values([
            {name: sa.bindparam(f"{name}__{row}") for name in columns}
            for row in range(count)])
        _MULTI_INSERTS[key] = found
    return found


@dataclass(frozen=True)
class InsertChunk:
    """One multi-row INSERT of a batch: `statement` for `rows` (a slice of the batch)."""

    statement: sa.ClauseElement
    columns: tuple[str, ...]
    rows: Sequence[Mapping[str, Any]]

    def named(self) -> dict[str, Any]:
        """The values by bind name (`<column>__<row>`)."""
        return {f"{name}__{row}": each[name]
                for row, each in enumerate(self.rows) for name in self.columns}

    def flat(self) -> list[Any]:
        """The values row by row, column by column: the order of the binds in the SQL."""
        columns = self.columns
        return [each[name] for each in self.rows for name in columns]


def insert_chunks(table: sa.Table, rows: Sequence[Mapping[str, Any]]
                  ) -> Iterator[InsertChunk]:
    """`rows` (dicts of the same columns) as multi-row INSERT statements: one statement
    where the driver's executemany runs one per row. That matters on SQLite: its driver
    gives up and retakes the GIL around every row, and beside a busy reactor each retake
    waits (docs/ARCHITECTURE.md, "Threads and the GIL"; measured: 15 us a row alone,
    3.3 ms a row beside a busy thread)."""
    if not rows:
        return
    columns = tuple(rows[0])
    start = 0
    for size in _INSERT_CHUNKS:
        while len(rows) - start >= size:
            yield InsertChunk(multi_row_insert(table, columns, size), columns,
                              rows[start:start + size])
            start += size


# (dialect, statement) -> whether its positional binds run row by row, column by column
# (`InsertChunk.flat`'s order): checked once per compiled shape.
_ROW_MAJOR: dict[tuple[str, int], bool] = {}


def _row_major(dialect: sa.Dialect, query: DriverStatement, chunk: InsertChunk) -> bool:
    key = (dialect.name, id(chunk.statement))
    found = _ROW_MAJOR.get(key)
    if found is None:
        found = query.positions == tuple(f"{name}__{row}" for row in range(len(chunk.rows))
                                         for name in chunk.columns)
        _ROW_MAJOR[key] = found
    return found


class RowSource(Protocol):
    """Where the statements of the object-row writes run: a `DriverTransaction`, or
    `CoreRows` over a SQLAlchemy connection."""

    def first(self, statement: sa.ClauseElement, values: Mapping[str, Any]
              ) -> tuple[Any, ...] | None: ...

    def execute(self, statement: sa.ClauseElement, values: Mapping[str, Any]) -> Any: ...


def _driver_error(engine: Engine, raw: Any, cursor: Any, sql: str, parameters: Any,
                  error: Any) -> sa_exc.StatementError:
    dialect = engine.dialect
    disconnect = dialect.is_disconnect(error, raw.dbapi_connection, cursor)
    if disconnect:
        raw.invalidate(error)
    return sa_exc.DBAPIError.instance(
        sql, parameters, error, dialect.loaded_dbapi.Error,
        connection_invalidated=disconnect, dialect=dialect,
    )


def fetch_one(engine: Engine, statement: sa.ClauseElement, values: Mapping[str, Any]
              ) -> tuple[Any, ...] | None:
    """The first row of `statement` run alone (no explicit transaction) on a pooled
    connection, as a plain tuple; None when there is none."""
    row = _run_alone(engine, statement, values, _first_row)
    return None if row is None else tuple(row)


def fetch_all(engine: Engine, statement: sa.ClauseElement, values: Mapping[str, Any]
              ) -> list[tuple[Any, ...]]:
    """Every row of `statement` run alone (as `fetch_one`), as plain tuples."""
    return [tuple(row) for row in _run_alone(engine, statement, values, _all_rows)]


def _first_row(cursor: Any) -> Any:
    return cursor.fetchone()


def _all_rows(cursor: Any) -> Any:
    return cursor.fetchall()


def _run_alone(engine: Engine, statement: sa.ClauseElement, values: Mapping[str, Any],
               fetch: Callable[[Any], Any]) -> Any:
    """Run `statement` alone on a pooled connection and `fetch` its rows from the
    cursor; the connection goes back to the pool, which ends any implicit transaction."""
    dialect = engine.dialect
    query = driver_statement(dialect, statement)
    parameters = query.parameters(values)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute(query.sql, parameters)
            return fetch(cursor)
        except dialect.loaded_dbapi.Error as error:
            raise _driver_error(engine, raw, cursor, query.sql, parameters, error) from error
        finally:
            _close_cursor(raw, cursor)
    finally:
        raw.close()


def _close_cursor(raw: Any, cursor: Any) -> None:
    """Close `cursor`, unless a disconnect invalidated its connection (`_driver_error`),
    which closed the DBAPI connection and its cursors with it (sqlite3 then refuses the
    call)."""
    if raw.dbapi_connection is not None:
        cursor.close()


class DriverTransaction:
    """Statements run on one DBAPI cursor; driver errors become `DBAPIError`."""

    def __init__(self, engine: Engine, raw: Any, cursor: Any) -> None:
        self._engine = engine
        self._dialect = engine.dialect
        self._raw = raw
        self._cursor = cursor

    def _wrap(self, sql: str, parameters: Any, error: Any) -> sa_exc.StatementError:
        return _driver_error(self._engine, self._raw, self._cursor, sql, parameters, error)

    def execute(self, statement: sa.ClauseElement, values: Mapping[str, Any]) -> Any:
        """Run `statement`; returns the cursor."""
        query = driver_statement(self._dialect, statement)
        parameters = query.parameters(values)
        try:
            self._cursor.execute(query.sql, parameters)
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrap(query.sql, parameters, error) from error
        return self._cursor

    def execute_many(self, statement: sa.ClauseElement,
                     values: Sequence[Mapping[str, Any]]) -> None:
        """Run `statement` once per item of `values` (the driver's executemany)."""
        query = driver_statement(self._dialect, statement)
        parameters = [query.parameters(each) for each in values]
        try:
            self._cursor.executemany(query.sql, parameters)
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrap(query.sql, None, error) from error

    def insert_many(self, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert `rows` (dicts of the same columns) with multi-row INSERTs
        (`insert_chunks`). On a positional driver (SQLite's qmark) the values go as one
        flat list, without naming each of them first: naming, then reading back by name,
        the values of the 256-row chunks of the audit log cost ~10 us a row of the writer
        thread's Python, with the GIL held that the reactor waits for."""
        for chunk in insert_chunks(table, rows):
            query = driver_statement(self._dialect, chunk.statement)
            if query.positions is not None and _row_major(self._dialect, query, chunk):
                parameters: Any = chunk.flat()
            else:
                parameters = query.parameters(chunk.named())
            try:
                self._cursor.execute(query.sql, parameters)
            except self._dialect.loaded_dbapi.Error as error:
                raise self._wrap(query.sql, parameters, error) from error

    def first(self, statement: sa.ClauseElement, values: Mapping[str, Any]
              ) -> tuple[Any, ...] | None:
        cursor = self.execute(statement, values)
        try:
            row = cursor.fetchone()
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrap("(fetch)", None, error) from error
        return None if row is None else tuple(row)

    def _driver_call(self, sql: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrap(sql, None, error) from error

    def run_sql(self, sql: str) -> None:
        """Run a statement without parameters (transaction control)."""
        self._driver_call(sql, lambda: self._cursor.execute(sql))

    def begin(self) -> None:
        if self._dialect.name == "sqlite":
            self._driver_call("BEGIN IMMEDIATE",
                              lambda: self._cursor.execute("BEGIN IMMEDIATE"))
        # psycopg2 opens a transaction implicitly at the first statement.

    def commit(self) -> None:
        self._driver_call("COMMIT", self._raw.commit)

    def rollback(self) -> None:
        """Roll back, unless a disconnect invalidated the connection (`_driver_error`):
        the server ended the transaction with it, and the pooled connection no longer
        has a DBAPI connection to call (its attributes raised AttributeError, which then
        hid the disconnect's own error)."""
        if self._raw.dbapi_connection is None:
            return
        self._driver_call("ROLLBACK", self._raw.rollback)


@contextmanager
def driver_transaction(engine: Engine) -> Iterator[DriverTransaction]:
    """One write transaction on a pooled DBAPI connection, inside the engine's write gate
    (`dialect.write_gate`): committed on normal exit, rolled back on an exception. Inside
    a write group (meta/write_group.py) a SAVEPOINT on the group's DBAPI connection
    instead (`_group_savepoint`)."""
    group = write_group.current(engine)
    if group is not None:
        with _group_savepoint(engine, group) as transaction:
            yield transaction
        return
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            with write_gate(engine):
                transaction = DriverTransaction(engine, raw, cursor)
                transaction.begin()
                try:
                    yield transaction
                except BaseException:
                    try:
                        transaction.rollback()
                    except sa_exc.DBAPIError:
                        pass  # the original error matters; the pool resets the connection
                    raise
                transaction.commit()
        finally:
            _close_cursor(raw, cursor)
    finally:
        raw.close()  # back to the pool (which rolls back anything left open)


@contextmanager
def _group_savepoint(engine: Engine, group: write_group.WriteGroup
                     ) -> Iterator[DriverTransaction]:
    """A SAVEPOINT on the DBAPI connection of the group's SQLAlchemy connection (one
    connection, one transaction for both kinds of statement): released on normal exit,
    rolled back to on an exception. A driver error marks the group broken."""
    raw = group.conn.connection
    cursor = raw.cursor()
    try:
        transaction = DriverTransaction(engine, raw, cursor)
        name = group.savepoint_name()
        try:
            transaction.run_sql(f"SAVEPOINT {name}")
            try:
                yield transaction
            except BaseException:
                transaction.run_sql(f"ROLLBACK TO SAVEPOINT {name}")
                transaction.run_sql(f"RELEASE SAVEPOINT {name}")
                raise
            transaction.run_sql(f"RELEASE SAVEPOINT {name}")
        except BaseException as error:
            if driver_error(error) is not None:
                write_group.mark_broken(error)
            raise
    finally:
        _close_cursor(raw, cursor)


class CoreRows:
    """The compiled statements run inside a SQLAlchemy Core transaction (`conn`)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def execute(self, statement: sa.ClauseElement, values: Mapping[str, Any]) -> Any:
        query = driver_statement(self.conn.dialect, statement)
        return self.conn.exec_driver_sql(query.sql, query.parameters(values))

    def first(self, statement: sa.ClauseElement, values: Mapping[str, Any]
              ) -> tuple[Any, ...] | None:
        query = driver_statement(self.conn.dialect, statement)
        row = self.conn.exec_driver_sql(query.sql, query.parameters(values)).first()
        return None if row is None else tuple(row)

    def all(self, statement: sa.ClauseElement, values: Mapping[str, Any],
            sqlite_index: str | None = None) -> Sequence[Any]:
        """Every row, as the driver returned them (tuple-like)."""
        query = driver_statement(self.conn.dialect, statement, sqlite_index)
        if query.defaults:
            values = {**query.defaults, **values}
        return self.conn.exec_driver_sql(query.sql, query.parameters(values)).all()
