"""The control-plane merge rules (Cluster rules 6 and 13), pure: no Twisted, no I/O.

The control plane is a set of families (users, credentials, teams, grants, attachments,
memberships, buckets, bucket configuration keys, server settings, multipart uploads and
parts). Each family holds entities under a string key (`FamilySpec.key_of`), each entity
a row (its column values, as the database stores them) stamped with `updated_at` (parts:
`last_modified`), and the tombstones of deleted entities (`tombstones` table: key ->
deleted_at). A node's state is a `ControlState`; a peer's control-plane snapshot is one
too.

`plan(local, incoming)` says what this node must write to hold the merged state, per
family, in `FAMILIES` order (parents before children):

- **Tombstones first.** An incoming tombstone newer than the local one (or the only one) is
  adopted (`ControlPlan.tombstones`), before any upsert or delete.
- **Last-writer-wins per entity.** Of the two rows of one key, the strictly newer stamp
  wins; on a tie the larger canonical JSON of the row, so every node keeps the same row
  whatever order snapshots arrive in. A tombstone beats a row unless the row is strictly
  newer. The kept row is the newest that can live here: one whose parent is dead (or,
  incoming, whose unique name another entity holds) gives way to the other row of its
  key, if that one can.
- **Children of dead parents are skipped**: credentials of a dead user, memberships and
  attachments of a dead team/user/grant, bucket configuration and uploads of a dead
  bucket, parts of a dead upload. An incoming row whose parent is dead here is not
  applied (the local row of its key, if it can live, stays); a local row whose parent
  dies in this merge is removed. A parent is dead when it will not exist here after the
  merge (beaten by a tombstone, unknown on both sides, or skipped itself). A child row
  not newer than its parent's tombstone belonged to a previous incarnation of the parent
  (a bucket deleted and created again) and is dead too.
- **No information is not deletion.** Only a tombstone deletes: a family (or a row)
  missing from a snapshot changes nothing here, so a peer of an older version that lacks
  a family is "no information" for it.
- **Unique names.** Users, teams and grants have a unique name besides their id: an
  incoming row whose name another entity holds here (two nodes created "alice" apart) is
  skipped and counted in `conflicts`; each node keeps its own.
- **Maintenance jobs** (`job`): rows only, never deleted; the unique `active` flag is
  merged like a name (NULL, an ended job, is never taken).
- **Node-local settings** (rule 13): the caller's `replicated_setting(key)` says which
  setting keys travel; the others are left out of both sides (never applied, never
  deleted, their tombstones ignored).

Nodes that merge each other's states in any order end equal, and merging again changes
nothing (property-tested); `apply_plan(local, plan)` is the state the database holds
after the plan is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One control-plane family: its name (also its tombstone family), the columns of its
    key (joined with ':'), its stamp column, its parents (family, column holding the
    parent's key) and its unique name column, if any."""

    name: str
    key_columns: tuple[str, ...]
    stamp_column: str = "updated_at"
    parents: tuple[tuple[str, str], ...] = ()
    unique_column: str | None = None
    has_tombstones: bool = True

    def key_of(self, row: Row) -> str:
        return ":".join(str(row[column]) for column in self.key_columns)


BUCKET = "bucket"
BUCKET_CONFIG = "bucket_config"
SETTING = "setting"
USER = "user"
CREDENTIAL = "credential"
TEAM = "team"
GRANT = "grant"
TEAM_MEMBER = "team_member"
USER_GRANT = "user_grant"
TEAM_GRANT = "team_grant"
UPLOAD = "upload"
PART = "part"
JOB = "job"

# Parents before children: upserts go in this order, deletions in the reverse.
FAMILIES: tuple[FamilySpec, ...] = (
    FamilySpec(BUCKET, ("name",)),
    FamilySpec(BUCKET_CONFIG, ("bucket", "key"), parents=((BUCKET, "bucket"),)),
    FamilySpec(SETTING, ("key",)),
    FamilySpec(USER, ("user_id",), unique_column="username"),
    FamilySpec(CREDENTIAL, ("access_key_id",), parents=((USER, "user_id"),)),
    FamilySpec(TEAM, ("team_id",), unique_column="name"),
    FamilySpec(GRANT, ("grant_id",), unique_column="name"),
    FamilySpec(TEAM_MEMBER, ("team_id", "user_id"),
               parents=((TEAM, "team_id"), (USER, "user_id"))),
    FamilySpec(USER_GRANT, ("user_id", "grant_id"),
               parents=((USER, "user_id"), (GRANT, "grant_id"))),
    FamilySpec(TEAM_GRANT, ("team_id", "grant_id"),
               parents=((TEAM, "team_id"), (GRANT, "grant_id"))),
    FamilySpec(UPLOAD, ("upload_id",), parents=((BUCKET, "bucket"),)),
    FamilySpec(PART, ("upload_id", "part_number"), stamp_column="last_modified",
               parents=((UPLOAD, "upload_id"),), has_tombstones=False),
    # Maintenance jobs (never deleted): the worker leader's progress reaches every node,
    # so a new leader resumes the job; `active` (1 or NULL) is unique like a name: a node
    # holding another active job keeps its own until that one ends.
    FamilySpec(JOB, ("id",), unique_column="active", has_tombstones=False),
)
FAMILY_BY_NAME: dict[str, FamilySpec] = {spec.name: spec for spec in FAMILIES}


@dataclass(frozen=True, slots=True)
class FamilyState:
    """One family of one node: rows by key, tombstones (key -> deleted_at)."""

    rows: Mapping[str, Row] = field(default_factory=dict)
    tombstones: Mapping[str, float] = field(default_factory=dict)


# family name -> its state; a family absent is "no information".
ControlState = Mapping[str, FamilyState]


@dataclass(slots=True)
class FamilyPlan:
    """What to write for one family: tombstones to adopt (key -> deleted_at), rows to
    insert or replace, keys of local rows to delete (no tombstone of their own: they lost
    to an adopted tombstone, or their parent is dead)."""

    tombstones: dict[str, float] = field(default_factory=dict)
    upserts: dict[str, Row] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    skipped: int = 0  # incoming rows of dead parents
    conflicts: int = 0  # incoming rows whose unique name another entity holds here

    @property
    def changed(self) -> bool:
        return bool(self.tombstones or self.upserts or self.deletes)


ControlPlan = dict[str, FamilyPlan]


def canonical(row: Row) -> str:
    """The row's content as one comparable string (the tie-break of equal stamps)."""
    return json.dumps(dict(row), sort_keys=True, separators=(",", ":"), default=str)


def stamp_of(spec: FamilySpec, row: Row) -> float:
    value = row.get(spec.stamp_column)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return float(value)


def newer_row(spec: FamilySpec, first: Row | None, second: Row | None) -> Row | None:
    """The last writer of two rows of one key (deterministic on a tie)."""
    if first is None:
        return second
    if second is None:
        return first
    a, b = stamp_of(spec, first), stamp_of(spec, second)
    if a != b:
        return first if a > b else second
    return first if canonical(first) >= canonical(second) else second


def newer_tombstone(first: float | None, second: float | None) -> float | None:
    if first is None:
        return second
    if second is None:
        return first
    return max(first, second)


def row_survives(spec: FamilySpec, row: Row, tombstone: float | None) -> bool:
    """A tombstone beats a row unless the row is strictly newer."""
    return tombstone is None or stamp_of(spec, row) > tombstone


def only_replicated(state: ControlState, replicated_setting: Callable[[str], bool]
                    ) -> dict[str, FamilyState]:
    """`state` without node-local settings (rule 13) and unknown families."""
    kept: dict[str, FamilyState] = {}
    for name, family in state.items():
        if name not in FAMILY_BY_NAME:
            continue
        if name == SETTING:
            family = FamilyState(
                rows={k: r for k, r in family.rows.items() if replicated_setting(k)},
                tombstones={k: t for k, t in family.tombstones.items()
                            if replicated_setting(k)})
        kept[name] = family
    return kept


def _all_replicated(_key: str) -> bool:
    return True


def plan(local: ControlState, incoming: ControlState,
         replicated_setting: Callable[[str], bool] = _all_replicated,
         pinned: Mapping[str, set[str]] | None = None) -> ControlPlan:
    """What this node writes to hold the merge of `local` and `incoming` (module
    docstring). Families neither side has are left out. `pinned`: keys of local rows that
    must stay whatever the merge says (a bucket that still holds objects here: its
    deletion waits until the objects are gone); they keep their local row."""
    pinned = pinned or {}
    local = only_replicated(local, replicated_setting)
    incoming = only_replicated(incoming, replicated_setting)
    present: dict[str, set[str]] = {}  # keys that exist here after the plan, per family
    buried: dict[str, Mapping[str, float]] = {}  # tombstones after the plan, per family
    result: ControlPlan = {}
    for spec in FAMILIES:
        mine = local.get(spec.name, FamilyState())
        theirs = incoming.get(spec.name)
        family_plan = FamilyPlan()
        tombstones = dict(mine.tombstones)
        if theirs is not None and spec.has_tombstones:
            for key, deleted_at in theirs.tombstones.items():
                known = tombstones.get(key)
                if known is None or deleted_at > known:
                    family_plan.tombstones[key] = deleted_at
                    tombstones[key] = deleted_at
        buried[spec.name] = tombstones
        keys = set(mine.rows) | (set(theirs.rows) if theirs is not None else set())
        alive: set[str] = set()
        names = _names(spec, mine.rows)
        for key in sorted(keys):
            local_row = mine.rows.get(key)
            incoming_row = theirs.rows.get(key) if theirs is not None else None
            if incoming_row is not None and incoming_row == local_row:
                incoming_row = None  # the same row: nothing to choose
            chosen = _choose(spec, key, local_row, incoming_row, tombstones.get(key),
                             present, buried, names, key in pinned.get(spec.name, ()),
                             family_plan)
            if chosen is None:
                if local_row is not None:
                    family_plan.deletes.append(key)
                    _rename(spec, names, local_row, None, key)
                continue
            if chosen is not local_row:
                family_plan.upserts[key] = chosen
                _rename(spec, names, local_row, chosen, key)
            alive.add(key)
        present[spec.name] = alive
        if theirs is not None or family_plan.changed:
            result[spec.name] = family_plan
    return result


def _choose(spec: FamilySpec, key: str, local_row: Row | None, incoming_row: Row | None,
            tombstone: float | None, present: Mapping[str, set[str]],
            buried: Mapping[str, Mapping[str, float]], names: Mapping[Any, str],
            pinned: bool, family_plan: FamilyPlan) -> Row | None:
    """The row of `key` this node keeps (None: none): the newest that survives the
    tombstone, whose parents live and (incoming) whose unique name is free here; a pinned
    local row stays whatever. Counts what it passes over in `family_plan`."""
    for candidate in _newest_first(spec, local_row, incoming_row):
        is_local = candidate is local_row
        if not row_survives(spec, candidate, tombstone):
            continue
        if not _parents_live(spec, candidate, present, buried) and not (is_local and pinned):
            family_plan.skipped += 0 if is_local else 1
            continue
        if not is_local and _name_taken(spec, names, candidate, key):
            family_plan.conflicts += 1
            continue
        return candidate
    return local_row if pinned and local_row is not None else None


def _newest_first(spec: FamilySpec, local: Row | None, incoming: Row | None
                  ) -> list[Row]:
    """The rows of one key, the last writer first."""
    winner = newer_row(spec, local, incoming)
    if winner is None:
        return []
    other = incoming if winner is local else local
    return [winner] if other is None else [winner, other]


def _name_taken(spec: FamilySpec, names: Mapping[Any, str], row: Row, key: str) -> bool:
    if spec.unique_column is None or row.get(spec.unique_column) is None:
        return False  # NULL is never taken (as in SQL: a job that is not active)
    holder = names.get(row.get(spec.unique_column))
    return holder is not None and holder != key


def _names(spec: FamilySpec, rows: Mapping[str, Row]) -> dict[Any, str]:
    if spec.unique_column is None:
        return {}
    return {row.get(spec.unique_column): key for key, row in rows.items()
            if row.get(spec.unique_column) is not None}


def _rename(spec: FamilySpec, names: dict[Any, str], old: Row | None, new: Row | None,
            key: str) -> None:
    if spec.unique_column is None:
        return
    if old is not None and names.get(old.get(spec.unique_column)) == key:
        del names[old.get(spec.unique_column)]
    if new is not None and new.get(spec.unique_column) is not None:
        names[new.get(spec.unique_column)] = key


def _parents_live(spec: FamilySpec, row: Row, present: Mapping[str, set[str]],
                  buried: Mapping[str, Mapping[str, float]]) -> bool:
    for parent, column in spec.parents:
        parent_key = str(row.get(column))
        if parent_key not in present.get(parent, ()):
            return False
        parent_tombstone = buried.get(parent, {}).get(parent_key)
        if parent_tombstone is not None and stamp_of(spec, row) <= parent_tombstone:
            return False  # a child of a previous incarnation of the parent
    return True


def apply_plan(local: ControlState, control_plan: ControlPlan) -> dict[str, FamilyState]:
    """`local` after `control_plan` (what the database holds after the transaction)."""
    after: dict[str, FamilyState] = {name: FamilyState(dict(state.rows),
                                                       dict(state.tombstones))
                                     for name, state in local.items()}
    for name, family_plan in control_plan.items():
        state = after.setdefault(name, FamilyState({}, {}))
        rows = dict(state.rows)
        tombstones = dict(state.tombstones)
        tombstones.update(family_plan.tombstones)
        for key in family_plan.deletes:
            rows.pop(key, None)
        rows.update(family_plan.upserts)
        after[name] = FamilyState(rows, tombstones)
    return after


def merged(first: ControlState, second: ControlState,
           replicated_setting: Callable[[str], bool] = _all_replicated
           ) -> dict[str, FamilyState]:
    """The state a node holding `first` reaches after merging `second`."""
    first = only_replicated(first, replicated_setting)
    return apply_plan(first, plan(first, second, replicated_setting))


__all__ = ["BUCKET", "BUCKET_CONFIG", "CREDENTIAL", "FAMILIES", "FAMILY_BY_NAME", "GRANT",
           "PART", "SETTING", "TEAM", "TEAM_GRANT", "TEAM_MEMBER", "UPLOAD", "USER",
           "USER_GRANT", "ControlPlan", "ControlState", "FamilyPlan", "FamilySpec",
           "FamilyState", "apply_plan", "canonical", "merged", "newer_row",
           "newer_tombstone", "only_replicated", "plan", "row_survives"]
