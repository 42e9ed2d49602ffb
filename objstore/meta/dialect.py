"""The dialect set-up of each metadata backend: engine creation, the two kinds of
transaction the store opens, and the statements whose syntax differs per dialect.

This module owns the dialect set-up: SQLite in WAL mode with full fsync, a busy timeout,
foreign keys and our own `BEGIN` (pysqlite's implicit one breaks read-then-write
transactions), and PostgreSQL through psycopg2 with pre-ping and a fixed-size pool. It also
owns `write_transaction` / `read_transaction`, the ways the store opens a SQLAlchemy
transaction (the hot paths' driver transactions, meta/driver.py, keep the same rules): on
SQLite a write transaction starts with `BEGIN IMMEDIATE`, so the write lock is taken up
front and never upgraded mid-transaction. The few statements whose syntax differs per
dialect (insert-or-ignore, upsert) are built here too. It never imports Twisted.

A SQLite database is created owner-only (directory 0700, file 0600; objstore.private_files).

SQLite writers of several processes (the workers of a node) queue on a `WriteGate` first:
an `flock` on `<database>.write-lock` held around each write transaction. Without it a
writer that finds the database locked waits in SQLite's busy handler, which sleeps in
growing steps (1, 2, 5, ... 100 ms) and retries, while the writer of the other process takes
the lock again and again: measured with two workers, 4 KiB PUT p99 0.6-1.5 s. A blocked
`flock` is woken the moment the lock is released. Every engine made here takes the gate
(the offline tools' too); a writer that opens the database file some other way (the
sqlite3 shell) still meets the busy timeout.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import QueuePool

from objstore.meta import write_group
from objstore.meta.retry import driver_error
from objstore.private_files import create_private_file, make_private_dir

BACKENDS = ("sqlite", "postgres")

# Execution option marking a connection whose next transaction writes.
_WRITE_OPTION = "objstore_write"

SQLITE_BUSY_TIMEOUT_MS = 10_000
# How long a thread waits for a pooled connection before giving up.
POOL_TIMEOUT_SECONDS = 30.0


def thread_counts(backend: str, db_pool_size: int) -> tuple[int, int]:
    """(writer threads, reader threads) for a backend: SQLite has one writer, because it
    allows one at a time anyway and a single writer never meets `database is locked` from
    its own siblings; PostgreSQL writes in parallel."""
    size = max(1, db_pool_size)
    if backend == "sqlite":
        return 1, size
    return size, size


def connection_count(backend: str, db_pool_size: int) -> int:
    """Connections the engine needs so that every DB thread holds one without waiting."""
    writers, readers = thread_counts(backend, db_pool_size)
    return writers + readers


def create_db_engine(
    backend: str, sqlite_path: str | None, postgres_url: str | None, pool_size: int
) -> Engine:
    """An Engine configured for `backend` ("sqlite" or "postgres"). `pool_size` is the number
    of pooled connections, normally `connection_count(...)` of the thread pools."""
    if backend == "sqlite":
        if not sqlite_path:
            raise ValueError("the sqlite backend needs a database path")
        return _sqlite_engine(sqlite_path, pool_size)
    if backend == "postgres":
        if not postgres_url:
            raise ValueError("the postgres backend needs postgres_url")
        return _postgres_engine(postgres_url, pool_size)
    raise ValueError(f"unknown metadata backend {backend!r} (expected sqlite or postgres)")


class WriteGate:
    """Mutual exclusion of the SQLite write transactions of every process and thread that
    uses it: a thread lock, then an exclusive `flock` on the gate file. Blocking: call it
    from a DB thread, never the reactor."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0

    def _file(self) -> int:
        # An inherited descriptor would share the parent's lock: reopen after a fork.
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._pid = os.getpid()
        return self._fd

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            fd = self._file()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)


_WRITE_GATES: weakref.WeakKeyDictionary[Engine, WriteGate] = weakref.WeakKeyDictionary()


def write_gate(engine: Engine) -> AbstractContextManager[None]:
    """What a write transaction on `engine` holds around BEGIN ... COMMIT: the engine's
    `WriteGate` on SQLite, nothing on PostgreSQL (its row locks queue writers)."""
    gate = _WRITE_GATES.get(engine)
    return gate.held() if gate is not None else nullcontext()


def sqlite_files(path: str) -> tuple[str, ...]:
    """The files of a SQLite database: the database, its WAL and the WAL's index."""
    path = os.path.abspath(path)
    return path, path + "-wal", path + "-shm"


def _sqlite_engine(path: str, pool_size: int) -> Engine:
    # The database holds every credential's secret: its directory is made 0700 and the
    # file 0600 before SQLite creates it with 0644 minus the umask (its -wal and -shm
    # files take the database's mode).
    make_private_dir(os.path.dirname(os.path.abspath(path)))
    create_private_file(path)
    _enable_wal(path)
    engine = sa.create_engine(
        f"sqlite:///{os.path.abspath(path)}",
        poolclass=QueuePool,
        pool_size=max(1, pool_size),
        max_overflow=0,
        pool_timeout=POOL_TIMEOUT_SECONDS,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
    )
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    _WRITE_GATES[engine] = WriteGate(os.path.abspath(path) + ".write-lock")
    return engine


def _enable_wal(path: str) -> None:
    # journal_mode=WAL is persistent in the database file: set it once, outside any pool.
    raw = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
    try:
        raw.execute("PRAGMA journal_mode=WAL")
    finally:
        raw.close()


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Stop pysqlite from issuing its own (deferred) BEGIN and from committing before DDL;
    # `_sqlite_on_begin` emits BEGIN instead (SQLAlchemy's documented recipe).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # A 2xx means committed (DESIGN invariant 1): fsync the WAL on every commit.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    if conn.get_execution_options().get(_WRITE_OPTION):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.exec_driver_sql("BEGIN")


def _postgres_engine(url: str, pool_size: int) -> Engine:
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return sa.create_engine(
        url,
        poolclass=QueuePool,
        pool_size=max(1, pool_size),
        max_overflow=0,
        pool_timeout=POOL_TIMEOUT_SECONDS,
        pool_pre_ping=True,
    )


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: committed on normal exit, rolled back on an exception.
    On SQLite it starts with BEGIN IMMEDIATE (the write lock is taken at once), inside the
    engine's write gate. Inside a write group (meta/write_group.py, group commit) it is a
    SAVEPOINT on the group's connection instead: released on normal exit, rolled back to
    on an exception; the group commits."""
    group = write_group.current(engine)
    if group is not None:
        try:
            with group.conn.begin_nested():
                yield group.conn
        except BaseException as error:
            if driver_error(error) is not None:
                write_group.mark_broken(error)
            raise
        return
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE_OPTION: True})
        with write_gate(engine), conn.begin():
            yield conn


def abandon_write(conn: Connection) -> None:
    """Roll back, inside `write_transaction`, what it has written so far: its own
    transaction, or its SAVEPOINT inside a write group (never the group's)."""
    transaction = conn.get_nested_transaction() or conn.get_transaction()
    assert transaction is not None, "abandon_write outside a write transaction"
    transaction.rollback()


@contextmanager
def group_transaction(engine: Engine) -> Iterator[Connection]:
    """The outer transaction of a write group (meta/group_commit.py): begun as
    `write_transaction` begins one (BEGIN IMMEDIATE on SQLite, inside the write gate), but
    committed by the caller (`conn.commit()`); left uncommitted, it is rolled back."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE_OPTION: True})
        with write_gate(engine):
            conn.begin()
            yield conn


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that only reads (a consistent snapshot on SQLite WAL); never commits
    anything."""
    with engine.connect() as conn, conn.begin() as trans:
        yield conn
        trans.rollback()


# -- statements that differ per dialect ---------------------------------------------


def _dialect_insert(conn: Connection, table: sa.Table) -> Any:
    if conn.dialect.name == "postgresql":
        return pg_dialect.insert(table)
    return sqlite_dialect.insert(table)


def insert_ignore(conn: Connection, table: sa.Table, values: Mapping[str, Any]) -> bool:
    """INSERT unless any unique constraint conflicts; True when a row was inserted."""
    stmt = _dialect_insert(conn, table).values(**values).on_conflict_do_nothing()
    return bool(conn.execute(stmt).rowcount == 1)


def upsert(
    conn: Connection, table: sa.Table, values: Mapping[str, Any], keys: Sequence[str]
) -> None:
    """INSERT, or UPDATE the non-key columns of the row whose `keys` conflict."""
    stmt = _dialect_insert(conn, table).values(**values)
    changes = {name: stmt.excluded[name] for name in values if name not in keys}
    conn.execute(stmt.on_conflict_do_update(index_elements=list(keys), set_=changes))
