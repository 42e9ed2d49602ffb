"""The retry of transient database errors, and what a database error that outlasts it
means to a client: the one place both are decided.

Retried: SQLite "database is locked/busy", PostgreSQL serialization failures and deadlocks
(the transaction was rolled back, so re-running it is safe), and psycopg2 connection errors
(dropped or refused connections). A connection lost during COMMIT leaves the outcome
unknown; re-running is still the better choice for our statements: puts of the same version
replace themselves, and a blob the record still references is never reported orphaned.

A transient error that outlasts the retries is the database being unreachable or
overloaded: `ServerCondition` ServiceUnavailable (503 + Retry-After). A full disk (SQLite
SQLITE_FULL, PostgreSQL disk_full) is never retried as such: it is InsufficientStorage
(507), except that a call that frees space (`frees_space`: deletes, removals, purges) may
first spend the database's reserve (`RetryPolicy.release_reserve`, blobs/space.py) and run
once more, so that space can always be freed through the API.

Inside a write group (group commit, meta/group_commit.py) nothing is retried: the driver
error breaks the group, which is rolled back, and each of its writes runs again alone with
these retries.

The loop runs inside the DB worker thread (`MetaStore` wraps each query call in it), so a
retried call keeps its place in the pool and the reactor never sleeps. No Twisted here.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import exc as sa_exc

from objstore.errors import ServerCondition, storage_full
from objstore.meta import write_group

_R = TypeVar("_R")

_RETRYABLE_PG_CODES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock
_SQLITE_BUSY_MESSAGES = ("database is locked", "database is busy", "database table is locked")
_PG_DISK_FULL = "53100"  # disk_full
# MetaStore queries whose name starts so make room rather than take it.
_FREEING_PREFIXES = ("delete_", "remove_", "detach_", "purge_")
UNAVAILABLE_MESSAGE = "The metadata database can not be reached; retry later."


def driver_error(error: BaseException) -> BaseException | None:
    """The database driver's own exception in `error`, else None. SQLAlchemy wraps it in a
    `DBAPIError`, except when a pooled connection can not be made for a raw DBAPI
    connection (`Engine.raw_connection`, the hot paths' meta/driver.py): then it is bare."""
    if isinstance(error, sa_exc.DBAPIError):
        return error.orig
    if isinstance(error, sqlite3.Error) or type(error).__module__.startswith("psycopg2"):
        return error
    return None


def is_disk_full(error: BaseException) -> bool:
    """True for a database error that says its disk (or quota) is full."""
    original = driver_error(error)
    if original is None:
        return False
    if getattr(original, "pgcode", None) == _PG_DISK_FULL:
        return True
    return (isinstance(original, sqlite3.Error)
            and getattr(original, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL)


def frees_space(query_name: str) -> bool:
    """A `MetaStore` query that removes rows, and so may spend the database's reserve."""
    return query_name.startswith(_FREEING_PREFIXES)


def is_transient(error: BaseException) -> bool:
    """True for database errors after which running the same transaction again may work."""
    original = driver_error(error)
    if original is None or is_disk_full(error):
        return False
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    if getattr(original, "pgcode", None) in _RETRYABLE_PG_CODES:
        return True
    if not _operational(error, original):
        return False
    if type(original).__module__.startswith("psycopg2"):
        return True
    message = str(original).lower()
    return any(text in message for text in _SQLITE_BUSY_MESSAGES)


def _operational(error: BaseException, original: BaseException) -> bool:
    """An OperationalError of PEP 249 (wrapped or bare): the database, not the statement."""
    if isinstance(error, sa_exc.OperationalError):
        return True
    return any(cls.__name__ == "OperationalError" for cls in type(original).__mro__)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with doubling delays: 0.05 s, 0.1 s, 0.2 s by default.
    `release_reserve` (blocking, DB thread) gives the database the space held back for it
    and says whether there was any to give."""

    attempts: int = 4
    first_delay_seconds: float = 0.05
    max_delay_seconds: float = 1.0
    release_reserve: Callable[[], bool] | None = None

    def delays(self) -> list[float]:
        return [
            min(self.first_delay_seconds * 2**n, self.max_delay_seconds)
            for n in range(max(0, self.attempts - 1))
        ]


def call_with_retries(
    policy: RetryPolicy,
    fn: Callable[[], _R],
    sleep: Callable[[float], None] = time.sleep,
    *,
    frees_space: bool = False,
) -> _R:
    """Call `fn`, again after each transient error while the policy allows; runs in a DB
    worker thread, where sleeping is allowed. Raises `ServerCondition` for a full disk
    and for a transient error that outlasted the retries; other errors pass unchanged.
    `frees_space`: a full disk may release the reserve for one more attempt."""
    delays = iter(policy.delays())
    may_release = frees_space and policy.release_reserve is not None
    while True:
        try:
            return fn()
        except Exception as error:
            if driver_error(error) is None:
                raise
            if write_group.current() is not None:
                # Inside a write group: the group is rolled back and every write of it
                # runs again alone, with these retries (meta/group_commit.py).
                write_group.mark_broken(error)
                raise
            if is_disk_full(error):
                if may_release and policy.release_reserve is not None:
                    may_release = False
                    if policy.release_reserve():
                        continue
                raise storage_full() from error
            if not is_transient(error):
                raise
            delay = next(delays, None)
            if delay is None:
                raise ServerCondition("ServiceUnavailable", UNAVAILABLE_MESSAGE) from error
        sleep(delay)
