"""The apply of replicated object rows and deletes: what a node does with a row or a
deletion a cluster peer sends it, each in one transaction on both backends, or many rows
in one transaction (`apply_replicated_objects`, anti-entropy's batch: the same per-row
reads, verdicts and writes, one commit); `register_states` reads what the verdicts of a
page of rows need in one read transaction.

The order is `convergence/lww.py`'s (the spec's cluster rule 5, and a tombstone beats a row of
its register unless the row is strictly newer); this module only reads the register's
local state, asks that order and writes what wins, with the rules every object-row write
shares (`object_write_queries.py`: `next_seq` first, `insert_latest`, `promote_newest`,
`unreferenced`). An incoming row that loses, or is identical in replicated content to the
local one, changes nothing and takes no seq (the transaction is rolled back, counter
included): otherwise rows would bounce between nodes forever. A replicated delete records
(or moves later) the register's tombstone with the peer's stamp and removes the row when
the tombstone beats it; a tombstone already as new changes nothing.

The applied row is not necessarily the newest version of its key (a late copy of an old
version): is_latest is recomputed, newest `last_modified` first, and on a tie the row
written last (the highest seq), as for a local write.

A single row's apply and a single deletion, and `register_states`, run on the driver with
statements compiled once (`apply_statements.py`: the register's row, its tombstone, the
key's newest other version and the bucket in one statement; the row and tombstone of a
whole page of registers in one statement), as PutObject does: they are what a peer's part
of every quorum write, and every anti-entropy page, costs. The batch stays on a SQLAlchemy
Core transaction, running the same compiled statements through `CoreRows` (the registers'
state, and every version's stamp of their keys, each read in one statement).

Quota and preconditions are not checked: the peer that accepted the write checked them.
Every function that takes a seq is marked `changes_objects`. No Twisted here.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from objstore.convergence import lww
from objstore.meta import schema
from objstore.meta.apply_statements import (
    APPLY_STATE,
    DELETE_REPLACED,
    KEY_STAMPS,
    REGISTER_STATE,
    REGISTER_STATES,
    key_stamps_values,
    register_of,
    register_states_values,
    register_values,
    stamp_of,
)
from objstore.meta.database import Database, changes_objects
from objstore.meta.dialect import write_transaction
from objstore.meta.driver import (
    CoreRows,
    RowSource,
    driver_statement,
    driver_transaction,
    fetch_all,
    fetch_one,
)
from objstore.meta.errors import RecordNotFound
from objstore.meta.object_write_queries import (
    BUCKET,
    DELETE_ROW,
    INSERT_OBJECT,
    LEAVE_TOMBSTONE,
    NEWEST_VERSION,
    PROMOTE,
    insert_latest,
    next_seq,
    unreferenced,
)
from objstore.meta.records import ObjectRecord
from objstore.meta.tombstones import TOMBSTONE_OBJECT


class ApplyVerdict(enum.Enum):
    APPLIED = "applied"  # the incoming row was written with a fresh seq
    IDENTICAL = "identical"  # the same replicated content is stored: nothing written
    KEEP_LOCAL = "keep_local"  # the local row wins: nothing written
    DELETED = "deleted"  # the register's tombstone beats the row: nothing written


@dataclass(frozen=True)
class ApplyResult:
    """What applying a replicated row did. `record`: the register's row now stored (the
    incoming one as written, or the local one that stands; None when there is none).
    `orphaned_blob_ids`: the blobs of the replaced row the new one does not use, to remove
    after the commit (the replaced version's own blob first, then its parts)."""

    verdict: ApplyVerdict
    record: ObjectRecord | None
    orphaned_blob_ids: tuple[str, ...] = ()
    future_stamped: bool = False  # the incoming row is stamped far ahead of this clock

    @property
    def applied(self) -> bool:
        return self.verdict is ApplyVerdict.APPLIED


@dataclass(frozen=True)
class TombstoneResult:
    """What applying a replicated delete did. `recorded`: the tombstone was recorded or
    moved later (a fresh seq); `deleted_at`: the register's tombstone stamp now;
    `removed`: the row it beat, whose files go after the commit; `new_latest`: the version
    that became latest in its place."""

    recorded: bool
    deleted_at: float
    removed: ObjectRecord | None = None
    new_latest: ObjectRecord | None = None
    future_stamped: bool = False

    @property
    def orphaned_blob_ids(self) -> tuple[str, ...]:
        if self.removed is None:
            return ()
        ids = [self.removed.blob_id, *(p.blob_id for p in self.removed.parts)]
        return tuple(dict.fromkeys(b for b in ids if b))


def decide(local: ObjectRecord | None, deleted_at: float | None, incoming: ObjectRecord,
           now: float) -> tuple[ApplyVerdict, bool]:
    """The verdict on `incoming` given its register's local row and tombstone stamp, and
    whether it is stamped far in the future. Pure: the engine asks it before any file work
    (to write no sidecar for a row that loses), the transaction asks it again."""
    decision = lww.merge(local, incoming, now=now)
    if deleted_at is not None and not lww.row_survives_tombstone(incoming, deleted_at):
        return ApplyVerdict.DELETED, decision.future_stamped
    verdict = {lww.Verdict.APPLY: ApplyVerdict.APPLIED,
               lww.Verdict.IDENTICAL: ApplyVerdict.IDENTICAL,
               lww.Verdict.KEEP_LOCAL: ApplyVerdict.KEEP_LOCAL}[decision.verdict]
    return verdict, decision.future_stamped


class _Unchanged(Exception):
    """Rolls the transaction back (the seq counter with it) and carries the answer."""

    def __init__(self, result: ApplyResult | TombstoneResult) -> None:
        super().__init__("nothing to write")
        self.result = result


@changes_objects
def apply_replicated_object(db: Database, record: ObjectRecord) -> ApplyResult:
    """Apply a peer's row of (bucket, key, version_id) by last-writer-wins against the
    local row and tombstone of that register; when it wins, store it under a fresh seq
    (replacing the local row) and recompute the key's latest. Raises RecordNotFound when
    the bucket does not exist, ValueError for a row with a non-finite stamp."""
    if not lww.has_finite_stamps(record):
        raise ValueError("a replicated row with a non-finite stamp")
    try:
        with driver_transaction(db.engine) as tx:
            seq = next_seq(tx)
            state = tx.first(APPLY_STATE, register_values(record.bucket, record.key,
                                                          record.version_id))
            if state is None:
                raise RecordNotFound(f"bucket {record.bucket!r}")
            local = register_of(state[3:])
            verdict, future = decide(local, stamp_of(state[1]), record, db.clock())
            if verdict is not ApplyVerdict.APPLIED:
                raise _Unchanged(ApplyResult(verdict, local, future_stamped=future))
            stored, replaced_blobs = _store_applied(tx, db.engine.dialect, record, seq,
                                                    stamp_of(state[2]))
            return ApplyResult(verdict, stored, unreferenced(replaced_blobs, stored), future)
    except _Unchanged as unchanged:
        assert isinstance(unchanged.result, ApplyResult)
        return unchanged.result


@changes_objects
def apply_replicated_objects(db: Database, records: Sequence[ObjectRecord]
                             ) -> list[ApplyResult | Exception]:
    """Apply many peers' rows in ONE transaction (anti-entropy's batch: one commit, one
    fsync, instead of one per row): for each row in order the same verdict and writes as
    `apply_replicated_object`, each applied row under a fresh seq; the registers' rows and
    tombstones and the other versions' stamps of their keys are read at once (a
    register named twice is read again for its later rows). A row whose
    bucket does not exist (RecordNotFound) or whose stamp is not finite (ValueError) gets
    that exception in its place of the answer and writes nothing; the other rows go on.
    Nothing applied: the transaction is rolled back, counter included. Any other error
    rolls back the whole batch and is raised (the caller may apply row by row)."""
    answers: list[ApplyResult | Exception] = []
    try:
        with write_transaction(db.engine) as conn:
            rows = CoreRows(conn)
            seq = next_seq(rows)  # the counter's lock first, as a single apply
            _apply_each(rows, records, answers, seq, db.clock())
            if not any(isinstance(a, ApplyResult) and a.applied for a in answers):
                raise _Unchanged(ApplyResult(ApplyVerdict.IDENTICAL, None))  # roll back
    except _Unchanged:
        pass
    return answers


def _apply_each(rows: CoreRows, records: Sequence[ObjectRecord],
                answers: list[ApplyResult | Exception], first_seq: int, now: float
                ) -> None:
    """The rows of `apply_replicated_objects`, in its transaction (the counter's lock
    held): the first stored row takes `first_seq`, each later one a fresh seq."""
    buckets: dict[str, bool] = {}
    registers = [(r.bucket, r.key, r.version_id) for r in records]
    # The registers' state read at once (as `register_states`); a register the batch
    # names twice is read at its row's turn (an earlier row may have changed it).
    states = {}
    if len(set(registers)) == len(registers) and registers:
        states = _states_of(registers, rows.all(REGISTER_STATES[rows.conn.dialect.name],
                                                register_states_values(registers)))
    stamps = _KeyStamps(rows, records)
    first = True
    for record, register in zip(records, registers, strict=True):
        if not lww.has_finite_stamps(record):
            answers.append(ValueError("a replicated row with a non-finite stamp"))
            continue
        if record.bucket not in buckets:
            buckets[record.bucket] = rows.first(BUCKET, {"p_bucket": record.bucket}) \
                is not None
        if not buckets[record.bucket]:
            answers.append(RecordNotFound(f"bucket {record.bucket!r}"))
            continue
        if register in states:
            local, deleted_at = states[register]
        else:
            local, deleted_at = _state_of(rows.first(REGISTER_STATE,
                                                     register_values(*register)))
        verdict, future = decide(local, deleted_at, record, now)
        if verdict is not ApplyVerdict.APPLIED:
            answers.append(ApplyResult(verdict, local, future_stamped=future))
            continue
        seq = first_seq if first else next_seq(rows)
        first = False
        stored, replaced_blobs = _store_applied(rows, rows.conn.dialect, record, seq,
                                                stamps.newest_other(record))
        stamps.stored(stored)
        answers.append(ApplyResult(verdict, stored, unreferenced(replaced_blobs, stored),
                                   future))


@changes_objects
def apply_replicated_delete(
    db: Database, bucket: str, key: str, version_id: str, deleted_at: float,
    expired_before: float | None = None,
) -> TombstoneResult:
    """Apply a peer's deletion of (bucket, key, version_id) stamped `deleted_at`: the
    register's tombstone takes the later of its stamp and this one (with a fresh seq), and
    the local row goes unless it is strictly newer than the tombstone (a newest remaining
    version becomes latest). Nothing changes, and no seq is taken, when the tombstone is
    already as new and no row loses to it, and when the deletion is stamped before
    `expired_before` (past the tombstone grace) while this node holds neither the row nor
    a tombstone: it has nothing to delete, and recording it would only hand, under a fresh
    seq, a tombstone this node may have purged to peers that may have purged it too
    (cluster/tombstone_purge.py). Raises RecordNotFound when the bucket does not exist."""
    if not math.isfinite(deleted_at):
        raise ValueError("a replicated delete with a non-finite stamp")
    register = register_values(bucket, key, version_id)
    dialect = db.engine.dialect
    try:
        with driver_transaction(db.engine) as tx:
            seq = next_seq(tx)
            state = tx.first(APPLY_STATE, register)
            if state is None:
                raise RecordNotFound(f"bucket {bucket!r}")
            known = stamp_of(state[1])
            stamp = deleted_at if known is None else max(known, deleted_at)
            future = lww.stamp_is_future(deleted_at, db.clock())
            local = register_of(state[3:])
            beaten = local is not None and not lww.row_survives_tombstone(local, stamp)
            if not beaten and known is not None and known >= deleted_at:
                raise _Unchanged(TombstoneResult(False, known, future_stamped=future))
            if (known is None and local is None and expired_before is not None
                    and deleted_at < expired_before):
                raise _Unchanged(TombstoneResult(False, deleted_at))
            removed = new_latest = None
            if beaten:
                row = tx.first(DELETE_ROW, register)
                assert row is not None  # read above, under the counter's lock
                removed = register_of(row)
                assert removed is not None
                if removed.is_latest:
                    new_latest = _promote_newest(tx, dialect, bucket, key)
            tx.execute(LEAVE_TOMBSTONE[dialect.name], {
                "p_family": TOMBSTONE_OBJECT, "p_tombstone_key": register["p_tombstone_key"],
                "p_deleted_at": stamp, "p_seq": seq})
            return TombstoneResult(True, stamp, removed, new_latest, future)
    except _Unchanged as unchanged:
        assert isinstance(unchanged.result, TombstoneResult)
        return unchanged.result


def register_states(db: Database, registers: Sequence[tuple[str, str, str]]
                    ) -> list[tuple[ObjectRecord | None, float | None]]:
    """For each (bucket, key, version_id): its local row and its tombstone's stamp (None
    when absent): what `decide` needs, for a page of replicated rows at once (anti-entropy
    asks it before fetching any bytes). On the driver with statements compiled once: one
    register is `REGISTER_STATE`, several (any number) are one `REGISTER_STATES`
    statement. One statement reads one snapshot, so a register's row
    and tombstone are never of different moments (a verdict never rests on an
    inconsistent pair), and the page is read as of one moment, on both backends. (No
    verdict depends on another register, and the apply decides again in its own
    transaction: `apply_replicated_object(s)`.)"""
    unique = list(dict.fromkeys(registers))
    if not unique:
        return []
    if len(unique) == 1:
        states = {unique[0]: _state_of(fetch_one(db.engine, REGISTER_STATE,
                                                 register_values(*unique[0])))}
    else:
        found = fetch_all(db.engine, REGISTER_STATES[db.engine.dialect.name],
                          register_states_values(unique))
        states = _states_of(unique, found)
    return [states[register] for register in registers]


def _states_of(registers: Sequence[tuple[str, str, str]], found: Sequence[Sequence[Any]]
               ) -> dict[tuple[str, str, str], tuple[ObjectRecord | None, float | None]]:
    """The distinct `registers`' states from the rows of their `REGISTER_STATES`."""
    return {registers[row[0]]: _state_of(row[1:]) for row in found}


def _state_of(row: Sequence[Any] | None) -> tuple[ObjectRecord | None, float | None]:
    """A `REGISTER_STATE` row as (local row, tombstone stamp)."""
    assert row is not None, "REGISTER_STATE returns one row"
    return register_of(row[1:]), stamp_of(row[0])


# -- the pieces ---------------------------------------------------------------------------


class _KeyStamps:
    """The `last_modified` of every version of a batch's keys, read at once and kept up
    to date as the batch stores rows: the newest other stamp without a query per row."""

    def __init__(self, rows: CoreRows, records: Sequence[ObjectRecord]) -> None:
        self._versions: dict[tuple[str, str], dict[str, float]] = {}
        keys = list(dict.fromkeys((r.bucket, r.key) for r in records))
        if not keys:
            return
        for bucket, key, version_id, stamp in rows.all(KEY_STAMPS[rows.conn.dialect.name],
                                                      key_stamps_values(keys)):
            self._versions.setdefault((str(bucket), str(key)), {})[str(version_id)] = \
                float(stamp)

    def newest_other(self, record: ObjectRecord) -> float | None:
        others = [stamp for version_id, stamp
                  in self._versions.get((record.bucket, record.key), {}).items()
                  if version_id != record.version_id]
        return max(others, default=None)

    def stored(self, record: ObjectRecord) -> None:
        self._versions.setdefault((record.bucket, record.key), {})[record.version_id] = \
            record.last_modified


def _store_applied(rows: RowSource, dialect: sa.Dialect, record: ObjectRecord, seq: int,
                   newest: float | None) -> tuple[ObjectRecord, list[str | None]]:
    """Store the winning row under `seq`, replacing the local row of its version, given
    the newest `last_modified` among the key's other versions (`newest`). As the key's
    newest version (or on a tie: it is written last) it becomes latest through
    `insert_latest`; else it goes in as not latest, and should the row it replaced have
    been latest, the newest version is promoted. Returns the stored row and the blob ids
    the replaced row used."""
    if newest is None or record.last_modified >= newest:
        return insert_latest(rows, record, seq)
    replaced = rows.first(DELETE_REPLACED, {
        "p_bucket": record.bucket, "p_key": record.key, "p_version_id": record.version_id})
    stored = replace(record, is_latest=False, seq=seq)
    rows.execute(INSERT_OBJECT, {f"p_{name}": value
                                 for name, value in schema.object_values(stored).items()})
    if replaced is None:
        return stored, []
    if replaced[2]:
        _promote_newest(rows, dialect, record.bucket, record.key)
    return stored, [replaced[0], *(p.blob_id for p in schema.part_refs(replaced[1]))]


def _promote_newest(rows: RowSource, dialect: sa.Dialect, bucket: str, key: str
                    ) -> ObjectRecord | None:
    """`object_write_queries.promote_newest` through a `RowSource`: the key's newest
    remaining version (last_modified, then seq) becomes latest with a fresh seq; None
    when the key has no version left."""
    same_key = {"p_bucket": bucket, "p_key": key}
    newest = rows.first(NEWEST_VERSION, {**driver_statement(dialect, NEWEST_VERSION).defaults,
                                         **same_key})
    if newest is None:
        return None
    row = rows.first(PROMOTE, {**same_key, "p_version_id": newest[0],
                               "p_new_seq": next_seq(rows)})
    assert row is not None
    return register_of(row)
