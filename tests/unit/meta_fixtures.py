"""Fixtures for the metadata store tests: a migrated `SyncMetaStore` on each backend.

The PostgreSQL backend runs against the local server (override the address with
OBJSTORE_TEST_POSTGRES_URL, which names the maintenance database to connect to). Each test
module gets a database of its own, `objstore_test_<random>` (with an ICU en-US default
collation when the server has ICU), dropped afterwards; each test starts from an empty schema
in it, or for `meta_store` from a freshly migrated one. Migrating takes ~0.3 s on
PostgreSQL (every table and index created) and ran for each of ~340 tests, so a module's
first migrated schema is kept: the next test asking for one gets it emptied (every row
deleted, the sequences restarted, the rows migrate writes put back), ~10 ms, when its
structure is still the one migrate built (`_structure`: a test may drop a column or a
table to test an upgrade; then the schema is rebuilt). Tests skip with the reason only when
the server cannot be reached.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from objstore.meta import schema
from objstore.meta.dialect import create_db_engine
from objstore.meta.migrations import migrate
from objstore.meta.store import SyncMetaStore

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
TEST_POOL_SIZE = 12


def admin_url() -> str:
    return os.environ.get("OBJSTORE_TEST_POSTGRES_URL", DEFAULT_ADMIN_URL)


def _admin_connection() -> object:
    import psycopg2

    url = make_url(admin_url())
    conn = psycopg2.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        user=url.username or "postgres",
        password=url.password,
        dbname=url.database or "postgres",
        connect_timeout=5,
    )
    conn.autocommit = True
    return conn


@dataclass(frozen=True)
class MigratedSchema:
    """What migrate left in a new database: its structure and its rows."""

    structure: str
    rows: dict[str, list[dict[str, object]]]


@dataclass
class PostgresDatabase:
    name: str
    url: str
    migrated: MigratedSchema | None = None  # kept while its schema is migrate's (make_engine)


@pytest.fixture(scope="module")
def postgres_database() -> Iterator[PostgresDatabase]:
    """A fresh database for the test module, dropped afterwards."""
    import psycopg2

    try:
        admin = _admin_connection()
    except psycopg2.OperationalError as error:
        pytest.skip(f"PostgreSQL at {admin_url()} is unreachable: {error}".strip())
    name = f"objstore_test_{secrets.token_hex(6)}"
    cursor = admin.cursor()  # type: ignore[attr-defined]
    try:
        # A linguistic default collation, so that a key column missing COLLATE "C" would
        # sort wrongly and fail the listing tests.
        cursor.execute(
            f'CREATE DATABASE "{name}" TEMPLATE template0 '
            "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    except psycopg2.Error:
        cursor.execute(f'CREATE DATABASE "{name}"')
    url = make_url(admin_url()).set(drivername="postgresql+psycopg2", database=name)
    try:
        yield PostgresDatabase(name, url.render_as_string(hide_password=False))
    finally:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()  # type: ignore[attr-defined]


def reset_postgres_schema(url: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE")
            conn.exec_driver_sql("CREATE SCHEMA public")
    finally:
        engine.dispose()


# One text naming every table, column (with its type), index, constraint, trigger and
# function of the public schema: equal only while the structure is migrate's.
STRUCTURE_SQL = """
SELECT md5(coalesce(string_agg(item, ',' ORDER BY item), '')) FROM (
  SELECT c.relkind::text || ':' || c.relname || '.' || coalesce(a.attname, '') || ':'
         || coalesce(a.atttypid::text, '') AS item
  FROM pg_class c LEFT JOIN pg_attribute a
    ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL SELECT 'con:' || conname FROM pg_constraint
    WHERE connamespace = 'public'::regnamespace
  UNION ALL SELECT 'trg:' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
  UNION ALL SELECT 'fn:' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
) AS items
"""


def _structure(conn: sa.Connection) -> str:
    return str(conn.exec_driver_sql(STRUCTURE_SQL).scalar())


def _migrated_tables(conn: sa.Connection) -> list[sa.Table]:
    """The schema's tables, children before their parents (the order rows are deleted in)."""
    present = set(sa.inspect(conn).get_table_names())
    return [t for t in reversed(schema.metadata.sorted_tables) if t.name in present]


def _snapshot(conn: sa.Connection) -> MigratedSchema:
    rows = {table.name: [dict(row._mapping) for row in conn.execute(sa.select(table))]
            for table in _migrated_tables(conn)}
    return MigratedSchema(_structure(conn), {name: got for name, got in rows.items() if got})


def _empty_migrated(conn: sa.Connection, migrated: MigratedSchema) -> None:
    """Back to what migrate left: every row deleted (DELETE: ~10 ms where TRUNCATE of the
    27 tables took ~75), sequences restarted, migrate's own rows put back."""
    for table in _migrated_tables(conn):
        conn.execute(sa.delete(table))
    for (sequence,) in conn.exec_driver_sql(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"):
        conn.exec_driver_sql(f'ALTER SEQUENCE "{sequence}" RESTART')
    for name, rows in migrated.rows.items():
        conn.execute(sa.insert(schema.metadata.tables[name]), rows)


def make_engine(backend: str, tmp_path: Path, request: pytest.FixtureRequest, *,
                migrated: bool = False) -> sa.Engine:
    """An engine on an empty database of `backend`; with `migrated`, on a database that
    migrate has just built (what migrate left there and nothing else)."""
    if backend == "sqlite":
        engine = create_db_engine("sqlite", str(tmp_path / "meta" / "test.db"), None,
                                  TEST_POOL_SIZE)
        if migrated:
            migrate(engine, clock=FakeClock())
        return engine
    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    engine = create_db_engine("postgres", None, database.url, TEST_POOL_SIZE)
    try:
        if migrated and database.migrated is not None:
            with engine.begin() as conn:
                if _structure(conn) == database.migrated.structure:
                    _empty_migrated(conn, database.migrated)
                    return engine
        database.migrated = None
        reset_postgres_schema(database.url)
        if migrated:
            migrate(engine, clock=FakeClock())
            with engine.connect() as conn:
                database.migrated = _snapshot(conn)
    except BaseException:
        engine.dispose()
        raise
    return engine


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_engine(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[sa.Engine]:
    """An empty database, or a migrated one for a test that asks for `meta_store`."""
    engine = make_engine(backend, tmp_path, request,
                         migrated="meta_store" in request.fixturenames)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def meta_store(db_engine: sa.Engine) -> Iterator[SyncMetaStore]:
    """A migrated store on an empty database, closed afterwards."""
    store = SyncMetaStore(db_engine, clock=FakeClock())
    store.migrate()  # done already (`db_engine`): a no-op that checks it
    try:
        yield store
    finally:
        store.close()


class FakeClock:
    """A clock that advances one second per reading, so stored times are distinct."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now
