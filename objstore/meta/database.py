"""`Database`: what every query function of the metadata store runs on, and how the
store is opened from the `[storage]` configuration.

A query function (in the `*_queries.py` module of its table family) takes a `Database`
first and runs ONE transaction on it: `dialect.read_transaction` or
`dialect.write_transaction` on `db.engine`, or, on the two hot paths, a statement compiled
once and run on a pooled DBAPI connection (`meta/driver.py`). The same function is called
inline by the offline tools (through `SyncMetaStore`) and on the DB thread pools by the
daemon (through `MetaStore`), which retries it whole after a transient error: a function
therefore never keeps state between attempts.

`changes_objects` marks every function that takes a seq (changes object rows): once its
transaction is over, `db.objects_changed` runs, which is how the node keeps its object
caches coherent (meta/object_cache.py). Nothing here imports Twisted.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy.engine import Engine

from objstore.meta import write_group
from objstore.meta.dialect import connection_count, create_db_engine

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _no_change_listener() -> None:
    return None


class Database:
    """The metadata database: an Engine, the clock stored times come from, and the
    listener told after every transaction that may have changed object rows. Safe to use
    from several threads at once; each query takes its own connection from the pool."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock
        # Called on the DB thread after each object-changing transaction, before its
        # caller hears of it: the node bumps its OBJECTS coherence counter here.
        self.objects_changed: Callable[[], None] = _no_change_listener

    @property
    def backend(self) -> str:
        return "postgres" if self.engine.dialect.name == "postgresql" else "sqlite"


def changes_objects(
    fn: Callable[Concatenate[Database, _P], _R]
) -> Callable[Concatenate[Database, _P], _R]:
    """Marks a query function that may change object rows (every one that takes a seq):
    once it has returned or raised, its transaction is over and `db.objects_changed` is
    called (on the calling thread). `test_object_cache.py` checks that every function
    taking a seq carries it."""

    @functools.wraps(fn)
    def changing(db: Database, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(db, *args, **kwargs)
        finally:
            # Inside a write group the transaction is over at the group's COMMIT.
            if not write_group.after_group(db.objects_changed):
                db.objects_changed()

    return changing


class StorageSettings(Protocol):
    """What opening the store reads from the `[storage]` configuration section."""

    @property
    def data_dir(self) -> str | os.PathLike[str]: ...

    @property
    def metadata_backend(self) -> str: ...

    @property
    def postgres_url(self) -> str | None: ...

    @property
    def sqlite_path(self) -> str | os.PathLike[str] | None: ...

    @property
    def db_pool_size(self) -> int: ...


def sqlite_path_for(storage: StorageSettings) -> str:
    if storage.sqlite_path:
        return os.fspath(storage.sqlite_path)
    return os.path.join(os.fspath(storage.data_dir), "meta", "objstore.db")


def engine_for(storage: StorageSettings) -> Engine:
    """A new engine sized for the DB thread pools."""
    backend = storage.metadata_backend
    return create_db_engine(
        backend,
        sqlite_path_for(storage) if backend == "sqlite" else None,
        storage.postgres_url,
        connection_count(backend, storage.db_pool_size),
    )
