"""The control-plane snapshot (Cluster rule 6) on the database: read every replicated
family's rows and tombstones (`control_state`, one consistent read), and merge a peer's
snapshot into this node (`merge_control_snapshot`, one write transaction per snapshot:
this node's state is read, `cluster.control_merge.plan` decides, the plan is written).

Which table each family lives in (`TABLES`) and the column checks of a row received from
a peer (`valid_row`) are here too. Node-local settings (rule 13) are left out of the
snapshot and never applied: the caller says which keys travel (`replicated_setting`,
from engine/settings.py). No Twisted here; on `SyncMetaStore` and `MetaStore`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from objstore.convergence.control_merge import (
    BUCKET,
    FAMILIES,
    FAMILY_BY_NAME,
    ControlPlan,
    FamilyPlan,
    FamilySpec,
    FamilyState,
    plan,
)
from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import upsert, write_transaction
from objstore.meta.job_records import STATUSES, is_active

TABLES: dict[str, sa.Table] = {
    "bucket": schema.buckets,
    "bucket_config": schema.bucket_config,
    "setting": schema.settings,
    "user": schema.users,
    "credential": schema.credentials,
    "team": schema.teams,
    "grant": schema.grants,
    "team_member": schema.team_members,
    "user_grant": schema.user_grants,
    "team_grant": schema.team_grants,
    "upload": schema.multipart_uploads,
    "part": schema.multipart_parts,
    "job": schema.maintenance_jobs,
}
# Job types that never leave their node (migrate-db copies and switches that node only).
NODE_LOCAL_JOBS = frozenset({"migrate-db"})
assert set(TABLES) == set(FAMILY_BY_NAME)

_t = schema.tombstones


@dataclass
class MergeOutcome:
    """What a merge changed here, for the caches to forget (and the log to count)."""

    families: dict[str, int] = field(default_factory=dict)  # family -> rows and tombstones
    buckets: set[str] = field(default_factory=set)  # buckets (or their config) changed
    settings: set[str] = field(default_factory=set)  # setting keys changed
    skipped: int = 0
    conflicts: int = 0
    written: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # rows upserted
    removed: dict[str, list[str]] = field(default_factory=dict)  # keys of rows deleted
    bucket_created_at: dict[str, float] = field(default_factory=dict)  # of buckets written to

    @property
    def changed(self) -> bool:
        return bool(self.families)

    @property
    def iam_changed(self) -> bool:
        return bool(set(self.families) & IAM_FAMILIES)


IAM_FAMILIES = frozenset({"user", "credential", "team", "grant", "team_member", "user_grant",
                          "team_grant"})


@contextmanager
def _snapshot_read(db: Database) -> Iterator[Connection]:
    """One consistent read of several tables (REPEATABLE READ on PostgreSQL; a read
    transaction on SQLite WAL is a snapshot already)."""
    with db.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin() as trans:
            yield conn
            trans.rollback()


def _family_state(conn: Connection, spec: FamilySpec,
                  replicated_setting: Callable[[str], bool]) -> FamilyState:
    table = TABLES[spec.name]
    rows: dict[str, Mapping[str, Any]] = {}
    for row in conn.execute(sa.select(table)).mappings():
        values = dict(row)
        key = spec.key_of(values)
        if spec.name == "setting" and not replicated_setting(key):
            continue
        if spec.name == "job" and values.get("job_type") in NODE_LOCAL_JOBS:
            continue
        rows[key] = values
    tombstones: dict[str, float] = {}
    if spec.has_tombstones:
        query = sa.select(_t.c.key, _t.c.deleted_at).where(_t.c.family == spec.name)
        for key, deleted_at in conn.execute(query).all():
            if spec.name == "setting" and not replicated_setting(str(key)):
                continue
            tombstones[str(key)] = float(deleted_at)
    return FamilyState(rows, tombstones)


def _all_keys(_key: str) -> bool:
    return True


def control_state(db: Database, replicated_setting: Callable[[str], bool] = _all_keys
                  ) -> dict[str, FamilyState]:
    """Every family's rows and tombstones, as one consistent read (the snapshot this node
    answers; it holds credential secrets: never log it)."""
    with _snapshot_read(db) as conn:
        return {spec.name: _family_state(conn, spec, replicated_setting) for spec in FAMILIES}


def merge_control_snapshot(db: Database, incoming: Mapping[str, FamilyState],
                           replicated_setting: Callable[[str], bool] = _all_keys
                           ) -> MergeOutcome:
    """Merge a peer's snapshot into this node in ONE transaction: tombstones adopted
    first, then deletions (children first), then upserts (parents first). A bucket that
    still holds objects here is not deleted (pinned) until they are gone."""
    with write_transaction(db.engine) as conn:
        local = {spec.name: _family_state(conn, spec, replicated_setting)
                 for spec in FAMILIES}
        decided = plan(local, incoming, replicated_setting)
        bucket_plan = decided.get(BUCKET)
        if bucket_plan is not None and bucket_plan.deletes:
            pinned = {name for name in bucket_plan.deletes if _has_objects(conn, name)}
            if pinned:
                decided = plan(local, incoming, replicated_setting, pinned={BUCKET: pinned})
                _outlive_tombstones(decided[BUCKET], local[BUCKET], pinned, now=db.clock())
        _write(conn, decided)
    return _outcome(decided, local, incoming)


def _outlive_tombstones(bucket_plan: FamilyPlan, local: FamilyState, pinned: set[str], *,
                        now: float) -> None:
    """A bucket deleted on a peer while this node took objects into it (a partition, or a
    write that raced the deletion's arrival) stays, and must win everywhere, or the
    deleting node would refuse its objects for good: its row is re-stamped newer than the
    tombstone, so the peers adopt it back at their next pull (its objects then apply; its
    configuration, older than the tombstone, stays dead)."""
    for name in pinned:
        row = local.rows.get(name)
        if row is None:
            continue
        buried = max(bucket_plan.tombstones.get(name, 0.0), local.tombstones.get(name, 0.0))
        stamp = max(now, buried + _STAMP_STEP, float(row.get("updated_at") or 0.0) + _STAMP_STEP)
        bucket_plan.upserts[name] = {**row, "updated_at": stamp}


_STAMP_STEP = 1e-6  # a stamp strictly newer than another (the database keeps microseconds)


def _has_objects(conn: Connection, bucket: str) -> bool:
    o = schema.objects
    return conn.execute(sa.select(o.c.key).where(o.c.bucket == bucket).limit(1)).first() \
        is not None


def _key_clause(spec: FamilySpec, table: sa.Table, key: str) -> sa.ColumnElement[bool]:
    parts = key.split(":", len(spec.key_columns) - 1)
    clauses = []
    for column, part in zip(spec.key_columns, parts, strict=True):
        value: Any = int(part) if isinstance(table.c[column].type, sa.Integer) else part
        clauses.append(table.c[column] == value)
    return sa.and_(*clauses)


def _write(conn: Connection, decided: ControlPlan) -> None:
    for spec in FAMILIES:
        family_plan = decided.get(spec.name)
        if family_plan is None:
            continue
        for key, deleted_at in family_plan.tombstones.items():
            upsert(conn, _t, {"family": spec.name, "key": key, "deleted_at": deleted_at,
                              "seq": None}, ("family", "key"))
    for spec in reversed(FAMILIES):
        family_plan = decided.get(spec.name)
        if family_plan is None:
            continue
        table = TABLES[spec.name]
        for key in family_plan.deletes:
            clause = _key_clause(spec, table, key)
            buried = family_plan.tombstones.get(key)
            if buried is not None:
                # Only a row the tombstone still beats: under PostgreSQL's READ COMMITTED a
                # write that committed after this merge read the row (an owner's
                # re-create, a change) is newer and must stay.
                clause = sa.and_(clause, table.c[spec.stamp_column] <= buried)
            conn.execute(sa.delete(table).where(clause))
    for spec in FAMILIES:
        family_plan = decided.get(spec.name)
        if family_plan is None:
            continue
        table = TABLES[spec.name]
        keys = [column.name for column in table.primary_key.columns]
        upserts = list(family_plan.upserts.items())
        unique = spec.unique_column
        if unique is not None:  # rows giving a unique value up go first
            upserts.sort(key=lambda item: item[1].get(unique) is not None)
        for key, row in upserts:
            values = {c.name: row[c.name] for c in table.columns if c.name in row}
            if unique is not None and row.get(unique) is not None \
                    and conn.dialect.name == "postgresql":
                if not _upsert_unless_taken(conn, table, values, keys):
                    del family_plan.upserts[key]
                    family_plan.conflicts += 1
                continue
            upsert(conn, table, values, keys)


def _upsert_unless_taken(conn: Connection, table: sa.Table, values: dict[str, Any],
                         keys: list[str]) -> bool:
    """Upsert a row holding a unique value (a user name, an active job), unless a row of
    this node took that value after the merge read this node's state: under PostgreSQL's
    READ COMMITTED a job created here meanwhile (or a user of that name) commits between
    the read and this write, and its unique constraint failed the whole pass. The row is
    then passed over like a conflict `plan` sees (this node keeps its own; the next pass
    decides again). In a savepoint, so the rest of the merge stands. (SQLite takes the
    write lock at the merge's start: nothing commits in between.)"""
    savepoint = conn.begin_nested()
    try:
        upsert(conn, table, values, keys)
    except sa.exc.IntegrityError:
        savepoint.rollback()
        return False
    savepoint.commit()
    return True


def _outcome(decided: ControlPlan, local: Mapping[str, FamilyState],
             incoming: Mapping[str, FamilyState]) -> MergeOutcome:
    outcome = MergeOutcome()
    for name, family_plan in decided.items():
        outcome.skipped += family_plan.skipped
        outcome.conflicts += family_plan.conflicts
        if not family_plan.changed:
            continue
        outcome.families[name] = (len(family_plan.tombstones) + len(family_plan.upserts)
                                  + len(family_plan.deletes))
        keys = set(family_plan.upserts) | set(family_plan.deletes)
        if family_plan.upserts:
            outcome.written[name] = [dict(row) for row in family_plan.upserts.values()]
        if family_plan.deletes:
            outcome.removed[name] = list(family_plan.deletes)
        if name == "setting":
            outcome.settings |= keys | set(family_plan.tombstones)
        elif name == BUCKET:
            outcome.buckets |= keys
        elif name == "bucket_config":
            outcome.buckets |= {key.split(":", 1)[0] for key in keys}
    for row in outcome.written.get("bucket_config", []):
        name = str(row["bucket"])
        held = (incoming.get(BUCKET, FamilyState()).rows.get(name)
                or local.get(BUCKET, FamilyState()).rows.get(name))
        if held is not None:
            outcome.bucket_created_at[name] = float(held["created_at"])
    return outcome


# -- rows received from a peer ------------------------------------------------------------


def _valid_value(column: sa.Column[Any], value: Any) -> bool:
    if value is None:
        return bool(column.nullable)
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return isinstance(value, bool)
    if isinstance(kind, sa.Integer):  # BigInteger, Integer
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(kind, sa.Double | sa.Float):
        return isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value)
    return isinstance(value, str)


def valid_row(family: str, row: Any) -> dict[str, Any] | None:
    """A peer's row of `family` as this node stores it: unknown fields dropped (rule 14),
    a column with a server default may be absent (defaulted); None when a known column has
    the wrong type or a required one is missing (the row is ignored)."""
    if not isinstance(row, dict):
        return None
    table = TABLES[family]
    values: dict[str, Any] = {}
    for column in table.c:
        if column.name not in row:
            if column.server_default is not None:
                continue
            if column.nullable and not column.primary_key:
                values[column.name] = None
                continue
            return None
        value = row[column.name]
        if not _valid_value(column, value):
            return None
        values[column.name] = value
    if family == "job" and not _valid_job(values):
        return None
    return values


def _valid_job(values: Mapping[str, Any]) -> bool:
    """A peer's job row: not node-local, a known status, `active` 1 exactly when the status
    is active (one active job per node stays true), params a JSON object."""
    status = values.get("status")
    if values.get("job_type") in NODE_LOCAL_JOBS or status not in STATUSES:
        return False
    if values.get("active") != (1 if is_active(str(status)) else None):
        return False
    try:
        return isinstance(json.loads(str(values.get("params"))), dict)
    except ValueError:
        return False


__all__ = ["IAM_FAMILIES", "TABLES", "MergeOutcome", "control_state",
           "merge_control_snapshot", "valid_row"]
