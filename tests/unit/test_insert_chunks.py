"""Multi-row INSERTs (meta/driver.py `insert_chunks`): the shapes a batch is cut into,
checked without a database (the round trip on SQLite and PostgreSQL is in
test_metastore_audit.py)."""

from __future__ import annotations

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.driver import driver_statement, insert_chunks, multi_row_insert


def _rows(count: int) -> list[dict[str, object]]:
    return [{"ts": float(n), "operation": f"Op{n}"} for n in range(count)]


def test_a_batch_is_cut_into_few_shapes_of_powers_of_two_keeping_its_order() -> None:
    chunks = list(insert_chunks(schema.audit_log, _rows(341)))  # 256 + 64 + 16 + 4 + 1
    assert [len(chunk.rows) for chunk in chunks] == [256, 64, 16, 4, 1]
    operations = [chunk.named()[f"operation__{row}"]
                  for chunk in chunks for row in range(len(chunk.rows))]
    assert operations == [f"Op{n}" for n in range(341)]
    assert [value for chunk in chunks for value in chunk.flat()] == [
        value for n in range(341) for value in (float(n), f"Op{n}")]


def test_no_rows_no_statement() -> None:
    assert list(insert_chunks(schema.audit_log, [])) == []


def test_a_shape_is_built_once_and_names_its_binds_by_column_and_row() -> None:
    first = multi_row_insert(schema.audit_log, ("ts", "operation"), 4)
    assert multi_row_insert(schema.audit_log, ("ts", "operation"), 4) is first
    sql = str(first.compile(dialect=sa.dialects.sqlite.dialect()))
    assert sql.count("(?, ?)") == 4
    names = {p for p in first.compile().params}
    assert names == {f"{column}__{row}" for column in ("ts", "operation") for row in range(4)}


def test_sqlite_binds_run_in_the_flat_order() -> None:
    """The flat values fit SQLite's compiled qmark statement: its binds run row by row,
    column by column (what `DriverTransaction.insert_many` checks once per shape)."""
    chunk = next(insert_chunks(schema.audit_log, _rows(4)))
    query = driver_statement(sa.dialects.sqlite.dialect(), chunk.statement)
    assert query.positions is not None
    named = chunk.named()
    assert [named[name] for name in query.positions] == chunk.flat()
