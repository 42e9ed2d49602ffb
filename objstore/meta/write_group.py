"""The write group a DB writer thread may be running: the state group commit shares
between its loop (meta/group_commit.py) and the transactions opened inside it.

While a writer thread runs several queued writes in one transaction, `current` names the
group's SQLAlchemy connection (whose DBAPI connection the raw-driver transactions of
meta/driver.py use too), and each write's own transaction becomes a SAVEPOINT on it
(`dialect.write_transaction`, `driver.driver_transaction`). What must wait until the
group's COMMIT (the object-cache bump of `database.changes_objects`) is deferred with
`after_group`. A thread-local: one group per writer thread, none on any other thread.
Imports nothing of the store, so every module of it may import this one. No Twisted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection, Engine


class WriteGroup:
    """The open group of one writer thread: its engine and connection, the hooks to run
    once it is over, and the error that broke it (a driver error met inside it: the
    group is rolled back and its writes run alone)."""

    def __init__(self, engine: Engine, conn: Connection) -> None:
        self.engine = engine
        self.conn = conn
        self.hooks: list[Callable[[], Any]] = []
        self.broken: BaseException | None = None
        self._savepoints = 0

    def savepoint_name(self) -> str:
        self._savepoints += 1
        return f"objstore_group_{self._savepoints}"


_local = threading.local()


def current(engine: Engine | None = None) -> WriteGroup | None:
    """The group open on this thread (on `engine`, when given), else None."""
    group: WriteGroup | None = getattr(_local, "group", None)
    if group is None or (engine is not None and group.engine is not engine):
        return None
    return group


def enter(group: WriteGroup | None) -> None:
    """Make `group` this thread's open group (None: close it)."""
    _local.group = group


def after_group(hook: Callable[[], Any]) -> bool:
    """Run `hook` once the thread's open group is over (once, however often it is
    asked); False, doing nothing, when no group is open."""
    group = current()
    if group is None:
        return False
    if hook not in group.hooks:
        group.hooks.append(hook)
    return True


def mark_broken(error: BaseException) -> None:
    """Record that a driver error happened inside the open group, if any."""
    group = current()
    if group is not None and group.broken is None:
        group.broken = error
