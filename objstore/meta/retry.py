"""The retry of transient database errors, the one place it is decided.

Retried: SQLite "database is locked/busy", PostgreSQL serialization failures and deadlocks
(the transaction was rolled back, so re-running it is safe), and psycopg2 connection errors
(dropped or refused connections). A connection lost during COMMIT leaves the outcome
unknown; re-running is still the better choice for our statements: puts of the same version
replace themselves, and a blob the record still references is never reported orphaned.

The loop runs inside the DB worker thread (`MetaStore` wraps each query call in it), so a
retried call keeps its place in the pool and the reactor never sleeps. No Twisted here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import exc as sa_exc

_R = TypeVar("_R")

_RETRYABLE_PG_CODES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock
_SQLITE_BUSY_MESSAGES = ("database is locked", "database is busy", "database table is locked")


def is_transient(error: BaseException) -> bool:
    """True for database errors after which running the same transaction again may work."""
    if not isinstance(error, sa_exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    original = error.orig
    if getattr(original, "pgcode", None) in _RETRYABLE_PG_CODES:
        return True
    if not isinstance(error, sa_exc.OperationalError):
        return False
    if type(original).__module__.startswith("psycopg2"):
        return True
    message = str(original).lower()
    return any(text in message for text in _SQLITE_BUSY_MESSAGES)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with doubling delays: 0.05 s, 0.1 s, 0.2 s by default."""

    attempts: int = 4
    first_delay_seconds: float = 0.05
    max_delay_seconds: float = 1.0

    def delays(self) -> list[float]:
        return [
            min(self.first_delay_seconds * 2**n, self.max_delay_seconds)
            for n in range(max(0, self.attempts - 1))
        ]


def call_with_retries(
    policy: RetryPolicy,
    fn: Callable[[], _R],
    sleep: Callable[[float], None] = time.sleep,
) -> _R:
    """Call `fn`, again after each transient error while the policy allows; runs in a DB
    worker thread, where sleeping is allowed."""
    for delay in policy.delays():
        try:
            return fn()
        except sa_exc.DBAPIError as error:
            if not is_transient(error):
                raise
        sleep(delay)
    return fn()
