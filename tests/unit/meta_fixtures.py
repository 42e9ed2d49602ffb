"""Fixtures for the metadata store tests: a migrated `SyncMetaStore` on each backend.

The PostgreSQL backend runs against the local server (override the address with
OBJSTORE_TEST_POSTGRES_URL, which names the maintenance database to connect to). Each test
module gets a database of its own, `objstore_test_<random>` (with an ICU en-US default
collation when the server has ICU), dropped afterwards; each test starts from an empty schema
in it. Tests skip with the reason only when the server cannot be
reached.
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

from objstore.meta.dialect import create_db_engine
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
class PostgresDatabase:
    name: str
    url: str


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


def make_engine(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> sa.Engine:
    """An engine on an empty database of `backend`."""
    if backend == "sqlite":
        return create_db_engine("sqlite", str(tmp_path / "meta" / "test.db"), None, TEST_POOL_SIZE)
    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    reset_postgres_schema(database.url)
    return create_db_engine("postgres", None, database.url, TEST_POOL_SIZE)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_engine(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[sa.Engine]:
    engine = make_engine(backend, tmp_path, request)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def meta_store(db_engine: sa.Engine) -> Iterator[SyncMetaStore]:
    """A migrated store on an empty database, closed afterwards."""
    store = SyncMetaStore(db_engine, clock=FakeClock())
    store.migrate()
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
