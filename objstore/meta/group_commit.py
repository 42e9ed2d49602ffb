"""Group commit: the writes a DB writer thread finds queued, run in ONE transaction, so
a burst of concurrent PUTs pays one COMMIT (one WAL fsync on SQLite) instead of one each.

`run_group` runs on a writer thread (meta/pool.py `DbPool` calls it when it takes a
groupable write and another one is queued behind it). It opens the group's transaction
(`dialect.group_transaction`: BEGIN IMMEDIATE inside the write gate on SQLite), makes it
the thread's write group (meta/write_group.py) and runs the writes one after the other,
taking more from the queue while the limits allow (`GroupLimits`: a bound on writes and on
time, so the first write of a group is not held back long). Each write's own transaction
is a SAVEPOINT on the group's connection (`dialect.write_transaction` and
`driver.driver_transaction` see the group): a write that fails with the store's own errors
(RowChanged, PreconditionNotMet, RecordNotFound, a refused quota) rolls back only its own
changes and gets its own error. Then ONE COMMIT, and only after it does any write hear of
its outcome: durability is unchanged (DESIGN invariant 1: nothing is answered before its
COMMIT). The object-cache bump of each write (`database.changes_objects`) runs once, after
the COMMIT.

When the group can not commit as one, its writes run again alone, each exactly as without
group commit (its own transaction, its own retries): on a driver error inside the group
(SQLITE_BUSY, a PostgreSQL deadlock or serialization failure, a lost connection, a
unique violation, a full disk: the retry loop of meta/retry.py does not retry inside a
group but marks it broken), when the group's BEGIN fails, and when its COMMIT fails. So
a write is answered success only after a COMMIT that included it, a transient error is
retried as before, a full disk is answered as before, and a deadlock between two groups
on PostgreSQL (the database aborts one) costs the aborted group's writes one more
transaction each, never a hang. Rerunning is safe: a write rolled back left nothing, and
the store's queries keep no state between attempts (meta/database.py).

Which writes are grouped: an allow-list (`GROUPED_QUERIES`, `MetaStore` marks them): the
one-transaction writes of object rows with their outbox entry (put_object, update_object,
delete_object_version), a peer's replicated row or deletion (apply_replicated_object,
apply_replicated_delete: a 3-node quorum PUT waited ~40 ms per peer for its row's own
commit behind the others) and the audit log's batch insert. Each opens exactly one write
transaction on the store's engine and reads nothing outside it: a write that read through
another connection would not see the uncommitted writes before it in its group, and one
that commits by itself, opens a second connection or runs long (migrations, maintenance
batches, bucket and IAM changes) would break the rules above. Every other write runs
alone, in queue order.

Seq stays unique and commit-ordered: the writes of a group take their seqs one after the
other in its one transaction (a write rolled back to its savepoint gives its seq back to
the next), and they all commit together; on PostgreSQL the counter row's lock, taken by
the group's first object write, is held to the group's COMMIT, so groups of several writer
threads commit their object writes one group after the other. No Twisted here.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy.engine import Connection, Engine

from objstore.meta import write_group
from objstore.meta.dialect import group_transaction
from objstore.meta.retry import driver_error

_J = TypeVar("_J")

# The store's queries that may share a transaction with other writes (see above).
GROUPED_QUERIES = frozenset({
    "put_object",
    "update_object",
    "delete_object_version",
    "insert_audit_records",
    # A peer's row or deletion applied here (engine/replication_apply.py): one write
    # transaction that reads only through its own connection, as the ones above.
    "apply_replicated_object",
    "apply_replicated_delete",
})


@dataclass(frozen=True)
class GroupLimits:
    """How much one group takes: at most `max_writes` writes, and no more once
    `max_seconds` have passed since its first began (a group that keeps finding writes
    queued must commit some time)."""

    max_writes: int = 64
    max_seconds: float = 0.05


@dataclass(frozen=True)
class Outcome(Generic[_J]):
    """What one write of a group came to: its result, or the exception it raised."""

    job: _J
    ok: bool
    value: Any


@dataclass
class GroupStats:
    """Counts for tests and diagnostics: groups committed, writes they held, groups that
    fell back to running their writes alone, and the sizes of the last groups."""

    groups: int = 0
    grouped_writes: int = 0
    fallbacks: int = 0
    sizes: deque[int] = field(default_factory=lambda: deque(maxlen=64))


def _commit(conn: Connection) -> None:
    conn.commit()


def outcome_of(job: _J, call: Callable[[_J], Any]) -> Outcome[_J]:
    """Run one write alone (outside any group)."""
    try:
        return Outcome(job, True, call(job))
    except BaseException as error:  # delivered to the write's caller, as a Failure
        return Outcome(job, False, error)


class _Broken(Exception):
    """The group can not commit as one; its writes run alone."""


def run_group(
    engine: Engine,
    taken: Sequence[_J],
    more: Callable[[], _J | None],
    call: Callable[[_J], Any],
    *,
    limits: GroupLimits = GroupLimits(),
    clock: Callable[[], float] = time.monotonic,
    commit: Callable[[Connection], None] = _commit,
    stats: GroupStats | None = None,
) -> list[Outcome[_J]]:
    """Run the writes `taken` (at least one), and those `more` hands out while the limits
    allow, in one transaction on `engine`; `call(job)` runs one write. Returns each
    write's outcome, in order, once the group committed, or once its writes ran alone
    after it could not (see the module docstring). `commit` is the group's COMMIT
    (tests make it fail)."""
    jobs = list(taken)
    hooks: list[Callable[[], Any]] = []
    try:
        outcomes = _in_one_transaction(engine, jobs, more, call, limits, clock, commit, hooks)
    except Exception:  # noqa: BLE001 - whatever broke the group, the writes run alone
        if stats is not None:
            stats.fallbacks += 1
        try:
            _run_hooks(hooks)
        except Exception:  # noqa: BLE001, S110 - the writes run alone, and call them again
            pass
        return [outcome_of(job, call) for job in jobs]
    if stats is not None:
        stats.groups += 1
        stats.grouped_writes += len(outcomes)
        stats.sizes.append(len(outcomes))
    try:
        _run_hooks(hooks)
    except Exception as error:  # noqa: BLE001
        # Committed, but a write's after-transaction step failed: as a write alone would
        # have, each write reports that failure (never a rerun: they are committed).
        return [Outcome(o.job, False, error) for o in outcomes]
    return outcomes


def _run_hooks(hooks: list[Callable[[], Any]]) -> None:
    for hook in hooks:
        hook()


def _in_one_transaction(
    engine: Engine, jobs: list[_J], more: Callable[[], _J | None],
    call: Callable[[_J], Any], limits: GroupLimits, clock: Callable[[], float],
    commit: Callable[[Connection], None], hooks: list[Callable[[], Any]],
) -> list[Outcome[_J]]:
    with group_transaction(engine) as conn:
        group = write_group.WriteGroup(engine, conn)
        group.hooks = hooks
        write_group.enter(group)
        try:
            outcomes = _run_writes(group, jobs, more, call, limits, clock)
        finally:
            write_group.enter(None)
        commit(conn)  # raises: leaving the block rolls the group back
        return outcomes


def _run_writes(
    group: write_group.WriteGroup, jobs: list[_J], more: Callable[[], _J | None],
    call: Callable[[_J], Any], limits: GroupLimits, clock: Callable[[], float],
) -> list[Outcome[_J]]:
    started = clock()
    outcomes: list[Outcome[_J]] = []
    while True:
        outcome = outcome_of(jobs[len(outcomes)], call)
        if not outcome.ok and driver_error(outcome.value) is not None:
            write_group.mark_broken(outcome.value)
        if group.broken is not None:
            raise _Broken() from group.broken
        outcomes.append(outcome)
        if len(outcomes) == len(jobs):
            if len(jobs) >= limits.max_writes or clock() - started >= limits.max_seconds:
                return outcomes
            job = more()
            if job is None:
                return outcomes
            jobs.append(job)
