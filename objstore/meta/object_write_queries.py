"""The lean write of one object row: `put_object`'s transaction, the one transaction of
every PutObject, CopyObject and delete marker.

Through SQLAlchemy Core each statement of that transaction was built, coerced and
cache-keyed per call, and BEGIN, every statement and COMMIT went through the Connection's
event and result machinery: about half of the DB writer's CPU per PUT. Here the statements
are compiled once per dialect (`object_queries.driver_statement`) and run on a pooled DBAPI
connection inside one explicit transaction: `BEGIN IMMEDIATE` on SQLite (the write lock up
front, as `engine.write_transaction` takes it; pysqlite runs with autocommit off its own
BEGIN), the implicit one of psycopg2 on PostgreSQL; COMMIT on success, ROLLBACK on any
exception. Parameters are plain Python values of the column types (text, integers,
floats, booleans), which both drivers bind without SQLAlchemy's processors.

The order of the statements is the store's contract: the seq counter FIRST (its row lock
is the one lock every object writer queues on, which makes seq commit-ordered on
PostgreSQL and serialises writers of a key around the checks), then the bucket under FOR
KEY SHARE together with the configuration document of the usage rule (the quota, read
under the same lock instead of in a read transaction before the write), the precondition,
the usage check, the replaced row, the demotion of the previous latest, the insert.

Driver errors are raised as SQLAlchemy's `DBAPIError` (disconnects invalidate the
connection), so the retry rules of `async_store.py` apply unchanged. No Twisted here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from objstore.meta import schema
from objstore.meta.engine import write_gate
from objstore.meta.object_queries import driver_statement
from objstore.meta.records import ObjectRecord, PutResult, WritePrecondition

# A bucket's usage, (object version count, total bytes) as `bucket_usage` counts it.
Usage = tuple[int, int]
# Given the usage before and after a write, raises to refuse it (the engine's quota rule).
UsageCheck = Callable[[Usage, Usage], None]


class UsageRule(Protocol):
    """A limit on a bucket's usage set by one of the bucket's configuration documents (the
    engine's quota). The store reads the document inside the write transaction."""

    @property
    def config_key(self) -> str: ...

    def check_for(self, bucket: str, document: str) -> UsageCheck | None:
        """The check a write must pass under this document (None: no limit)."""
        ...


class PreconditionFailed(Exception):
    """Raised with the reason ("exists", "missing", "mismatch"); the store turns it into
    its own `PreconditionNotMet`."""


class BucketMissing(LookupError):
    """The bucket of the record does not exist (the store's `RecordNotFound`)."""


_o = schema.objects
_b = schema.buckets
_c = schema.bucket_config
_counter = schema.seq_counter


def _param(name: str) -> sa.BindParameter[Any]:
    # Prefixed: a bind named like a column of the table an UPDATE changes is reserved.
    return sa.bindparam(f"p_{name}")


_SAME_KEY = (_o.c.bucket == _param("bucket"), _o.c.key == _param("key"))
_SAME_VERSION = (*_SAME_KEY, _o.c.version_id == _param("version_id"))
_LIVE = _o.c.is_delete_marker == sa.false()

NEXT_SEQ = (
    sa.update(_counter)
    .where(_counter.c.name == _param("name"))
    .values(value=_counter.c.value + _param("count"))
    .returning(_counter.c.value)
)
BUCKET = (
    sa.select(_b.c.name).where(_b.c.name == _param("bucket"))
    .with_for_update(read=True, key_share=True)
)
BUCKET_WITH_DOCUMENT = (
    sa.select(
        _b.c.name,
        sa.select(_c.c.value)
        .where(_c.c.bucket == _param("bucket"), _c.c.key == _param("config_key"))
        .scalar_subquery(),
    )
    .where(_b.c.name == _param("bucket"))
    .with_for_update(of=_b, read=True, key_share=True)
)
LATEST_STATE = sa.select(_o.c.etag, _o.c.is_delete_marker).where(
    *_SAME_KEY, schema.LATEST_PREDICATE)
_BYTES = sa.func.coalesce(sa.func.sum(_o.c.size), sa.literal_column("0"))
BUCKET_USAGE = sa.select(sa.func.count(), _BYTES).where(_o.c.bucket == _param("bucket"), _LIVE)
REPLACED_SIZE = sa.select(_o.c.size).where(*_SAME_VERSION, _LIVE)
DELETE_VERSION = sa.delete(_o).where(*_SAME_VERSION).returning(_o.c.blob_id, _o.c.parts)
DEMOTE_LATEST = (
    sa.update(_o).where(*_SAME_KEY, schema.LATEST_PREDICATE).values(is_latest=sa.false())
)
INSERT_OBJECT = sa.insert(_o).values({c.name: _param(c.name) for c in _o.c})


class DriverTransaction:
    """Statements run on one DBAPI cursor; driver errors become `DBAPIError`."""

    def __init__(self, engine: Engine, raw: Any, cursor: Any) -> None:
        self._dialect = engine.dialect
        self._raw = raw
        self._cursor = cursor

    def _wrap(self, sql: str, parameters: Any, error: Any) -> sa_exc.StatementError:
        dialect = self._dialect
        disconnect = dialect.is_disconnect(error, self._raw.dbapi_connection, self._cursor)
        if disconnect:
            self._raw.invalidate(error)
        return sa_exc.DBAPIError.instance(
            sql, parameters, error, dialect.loaded_dbapi.Error,
            connection_invalidated=disconnect, dialect=dialect,
        )

    def execute(self, statement: sa.ClauseElement, values: dict[str, Any]) -> Any:
        """Run `statement` (bind names without their `p_` prefix); returns the cursor."""
        query = driver_statement(self._dialect, statement)
        parameters = query.parameters(values)
        try:
            self._cursor.execute(query.sql, parameters)
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrap(query.sql, parameters, error) from error
        return self._cursor

    def first(self, statement: sa.ClauseElement, values: dict[str, Any]
              ) -> tuple[Any, ...] | None:
        try:
            row = self.execute(statement, values).fetchone()
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrap("(fetch)", None, error) from error
        return None if row is None else tuple(row)

    def _driver_call(self, sql: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except self._dialect.loaded_dbapi.Error as error:
            raise self._wrap(sql, None, error) from error

    def begin(self) -> None:
        if self._dialect.name == "sqlite":
            self._driver_call("BEGIN IMMEDIATE",
                              lambda: self._cursor.execute("BEGIN IMMEDIATE"))
        # psycopg2 opens a transaction implicitly at the first statement.

    def commit(self) -> None:
        self._driver_call("COMMIT", self._raw.commit)

    def rollback(self) -> None:
        self._driver_call("ROLLBACK", self._raw.rollback)


@contextmanager
def driver_transaction(engine: Engine) -> Iterator[DriverTransaction]:
    """One write transaction on a pooled DBAPI connection, inside the engine's write gate
    (`engine.write_gate`): committed on normal exit, rolled back on an exception."""
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
            cursor.close()
    finally:
        raw.close()  # back to the pool (which rolls back anything left open)


def _named(values: dict[str, Any]) -> dict[str, Any]:
    return {f"p_{name}": value for name, value in values.items()}


def next_seq(tx: DriverTransaction, count: int = 1) -> int:
    row = tx.first(NEXT_SEQ, _named({"name": schema.OBJECTS_SEQ_NAME, "count": count}))
    assert row is not None, "the objects seq counter row is missing"
    return int(row[0])


def put_object(
    engine: Engine, record: ObjectRecord, precondition: WritePrecondition | None,
    usage_check: UsageCheck | None, usage_rule: UsageRule | None,
) -> PutResult:
    """`SqlMetaStore.put_object` (see there); raises BucketMissing and PreconditionFailed
    for the store to translate."""
    with driver_transaction(engine) as tx:
        seq = next_seq(tx)
        bucket = record.bucket
        if usage_rule is None:
            found = tx.first(BUCKET, {"p_bucket": bucket})
        else:
            found = tx.first(BUCKET_WITH_DOCUMENT,
                             {"p_bucket": bucket, "p_config_key": usage_rule.config_key})
        if found is None:
            raise BucketMissing(bucket)
        if usage_rule is not None and found[1] is not None:
            ruled = usage_rule.check_for(bucket, str(found[1]))
            if ruled is not None:
                check_usage(tx, record, ruled)
        if precondition is not None:
            check_precondition(tx, record, precondition)
        if usage_check is not None:
            check_usage(tx, record, usage_check)
        stored, old = _insert_latest(tx, record, seq)
    return PutResult(record=stored, orphaned_blob_ids=unreferenced(old, stored))


class RowSource(Protocol):
    """What the checks below read through: a `DriverTransaction`, or `CoreRows` over a
    SQLAlchemy connection (the store's other writes, e.g. `complete_upload`)."""

    def first(self, statement: sa.ClauseElement, values: dict[str, Any]
              ) -> tuple[Any, ...] | None: ...


class CoreRows:
    """A SQLAlchemy Core connection as a `RowSource` (bind names as given, `p_` included)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def first(self, statement: sa.ClauseElement, values: dict[str, Any]
              ) -> tuple[Any, ...] | None:
        row = self._conn.execute(statement, values).first()  # type: ignore[call-overload]
        return None if row is None else tuple(row)


def check_precondition(
    tx: RowSource, record: ObjectRecord, precondition: WritePrecondition
) -> None:
    """Raise PreconditionFailed when `precondition` does not hold for the key's latest
    version, read under the seq row lock."""
    current = tx.first(LATEST_STATE, {"p_bucket": record.bucket, "p_key": record.key})
    exists = current is not None and not current[1]
    if precondition.if_absent and exists:
        raise PreconditionFailed("exists")
    if precondition.if_match_etag is not None:
        if not exists:
            raise PreconditionFailed("missing")
        assert current is not None
        if current[0] != precondition.if_match_etag:
            raise PreconditionFailed("mismatch")


def check_usage(tx: RowSource, record: ObjectRecord, check: UsageCheck) -> None:
    """Run `check` on the bucket's usage before and after storing `record` (which replaces
    any row of the same version), under the seq row lock."""
    totals = tx.first(BUCKET_USAGE, {"p_bucket": record.bucket})
    assert totals is not None
    before = (int(totals[0]), int(totals[1]))
    replaced = tx.first(REPLACED_SIZE, {"p_bucket": record.bucket, "p_key": record.key,
                                        "p_version_id": record.version_id})
    after_count, after_bytes = before
    if replaced is not None:
        after_count, after_bytes = after_count - 1, after_bytes - int(replaced[0])
    if not record.is_delete_marker:
        after_count, after_bytes = after_count + 1, after_bytes + record.size
    check(before, (after_count, after_bytes))


def _insert_latest(
    tx: DriverTransaction, record: ObjectRecord, seq: int
) -> tuple[ObjectRecord, list[str | None]]:
    """Store `record` as the latest version of its key under `seq`, replacing a row of the
    same version. Returns the stored record and the blob ids the replaced row used."""
    same_key = {"p_bucket": record.bucket, "p_key": record.key}
    replaced = tx.first(DELETE_VERSION, {**same_key, "p_version_id": record.version_id})
    tx.execute(DEMOTE_LATEST, same_key)
    stored = replace(record, is_latest=True, seq=seq)
    tx.execute(INSERT_OBJECT, _named(schema.object_values(stored)))
    if replaced is None:
        return stored, []
    return stored, [replaced[0], *(p.blob_id for p in schema.part_refs(replaced[1]))]


def unreferenced(blob_ids: Sequence[str | None], record: ObjectRecord) -> tuple[str, ...]:
    """The given blob ids that `record` does not use, once each, in order."""
    kept = {record.blob_id, *(p.blob_id for p in record.parts)}
    return tuple(dict.fromkeys(b for b in blob_ids if b and b not in kept))
