"""Last-writer-wins for replicated object rows, and the write stamp that keeps it honest.

This module owns the one order in which two rows of the same register -- the same bucket,
key and version id -- are compared (the spec's cluster rule 5), the no-op test for an
incoming row identical to the local one, the rule a replicated delete (a tombstone) follows
against a row, the stamps a node gives a write that replaces a row and a deletion that
removes one, and the detection of
rows stamped far in the future. It never reads a clock, a database or the network: callers
pass `now` and the rows.

The order, strongest first:
1. strictly newer `last_modified` wins;
2. on a tie, strictly newer `lock_updated_at` wins, None older than any value (so a tie
   never erases a retention or a legal hold);
3. on a tie, strictly newer `tags_updated_at` wins, None older than any value (a tag
   change keeps the two stamps above and takes this one, so the newer tags win);
3b. on a tie, strictly newer `stages_updated_at` wins, None older than any value (a
   maintenance job's rewrite of the stored form, workers/stage_jobs.py and
   key_rotation.py, keeps every stamp above and takes this one, so its row replaces the
   old form on the peers while any client change made meanwhile still wins);
4. for the null version only (a register many writes share), the greater `blob_id` wins
   (compared as the verbatim string; None, older than any id);
5. beyond the spec, so that the choice is total and every node converges on the same row
   whichever it saw first: the greater SHA-256 of the row's replicated content. Only rows
   with equal stamps and different content get here (two changes stamped alike, or a row
   of a peer older than schema 5, which sends no `tags_updated_at`).

The row is one register: a lock change on one node and a tag change of the same version
on another, concurrent, end with the row of the lock change everywhere (rule 2 before
rule 3), the tag change lost (docs/CLUSTER.md, Known gaps).

"Replicated content" is every field but the node-local ones, `seq` and `is_latest`: exactly
what a sidecar holds (`objstore.blobs.sidecar`). An incoming row identical in replicated
content is a no-op without a new `seq`, or rows would bounce between nodes forever. A
`tags_updated_at` of None is left out of the digest, so a row without one digests as it
did before the field existed (nodes of both versions pick the same row).

Clock skew: a node whose clock lags would stamp an overwrite older than the row it
replaces, and the older row would win everywhere. Every stamp a node gives a change is
therefore a hybrid logical clock per key: `stamp_write` gives a write (a new version, a
delete marker, a tag or lock change) max(now, replaced + 1 µs), where the store passes
the newest of the key's latest row and the register's tombstone (`stamp_after`), read in
the write transaction; since both carry every stamp this node applied from a peer for the
key, a node never stamps a change of a key below what it has seen of it. `tombstone_stamp`
gives a deletion max(now, removed row's last_modified + 1 µs). Causally related writes
(one node saw the first before taking the second) then order right whatever the clocks
say; concurrent writes through different nodes still order by their clocks.

A row stamped far in the future (a clock that jumped ahead) shadows every later write to
its key until the clocks catch up. `too_far_ahead` is the rule the apply path refuses
such a row by (`[cluster] max_clock_ahead_seconds`), before it is stored anywhere; `merge`
still flags rows ahead by more than FUTURE_TOLERANCE_SECONDS for the caller to log and
count.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from objstore.meta.records import NULL_VERSION, ObjectRecord

NODE_LOCAL_FIELDS = frozenset({"seq", "is_latest"})
REPLICATED_FIELDS = tuple(f.name for f in dataclasses.fields(ObjectRecord)
                          if f.name not in NODE_LOCAL_FIELDS)
# Fields added after the first cluster protocol: left out of the digest while None.
_ADDED_FIELDS = ("tags_updated_at", "acl", "stages_updated_at")
STAMP_STEP_SECONDS = 1e-6
# A row stamped further ahead of the receiver's clock than this is reported. Well above
# any NTP-disciplined offset plus a request timeout, well below a clock that jumped.
FUTURE_TOLERANCE_SECONDS = 60.0


class Verdict(enum.Enum):
    APPLY = "apply"  # the incoming row wins (or there is no local row)
    KEEP_LOCAL = "keep_local"  # the local row is newer in the order above
    IDENTICAL = "identical"  # same replicated content: nothing to write, no new seq


@dataclass(frozen=True, slots=True)
class MergeDecision:
    verdict: Verdict
    future_stamped: bool = False  # the incoming row is stamped far ahead of `now`

    @property
    def applies(self) -> bool:
        return self.verdict is Verdict.APPLY


def replicated_content(record: ObjectRecord) -> dict[str, Any]:
    """The fields two nodes must agree on, as plain data."""
    return {name: _plain(getattr(record, name)) for name in REPLICATED_FIELDS}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def same_content(a: ObjectRecord, b: ObjectRecord) -> bool:
    return replicated_content(a) == replicated_content(b)


def content_digest(record: ObjectRecord) -> str:
    """SHA-256 of the canonical JSON of the replicated content: the last tiebreak."""
    content = replicated_content(record)
    for name in _ADDED_FIELDS:
        if content[name] is None:
            del content[name]
    text = json.dumps(content, sort_keys=True, separators=(",", ":"),
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _stamps(record: ObjectRecord) -> tuple[float, tuple[int, float], tuple[int, float],
                                         tuple[int, float], tuple[int, str]]:
    if not has_finite_stamps(record):
        raise ValueError("a row with a non-finite stamp can not be ordered")
    blob = (0, "")
    if record.version_id == NULL_VERSION and record.blob_id is not None:
        blob = (1, record.blob_id)
    return (record.last_modified, _optional(record.lock_updated_at),
            _optional(record.tags_updated_at), _optional(record.stages_updated_at), blob)


def _optional(stamp: float | None) -> tuple[int, float]:
    """An optional stamp in the order: None older than any value."""
    return (0, 0.0) if stamp is None else (1, stamp)


def has_finite_stamps(record: ObjectRecord) -> bool:
    """The apply path refuses rows failing this (NaN would make the order partial)."""
    return math.isfinite(record.last_modified) and all(
        stamp is None or math.isfinite(stamp)
        for stamp in (record.lock_updated_at, record.tags_updated_at,
                      record.stages_updated_at))


def _same_register(a: ObjectRecord, b: ObjectRecord) -> None:
    if (a.bucket, a.key, a.version_id) != (b.bucket, b.key, b.version_id):
        raise ValueError("rows of different registers (bucket, key, version id) compared")


def newer(a: ObjectRecord, b: ObjectRecord) -> bool:
    """True when `a` strictly wins over `b` (rows of the same register)."""
    _same_register(a, b)
    if _stamps(a) != _stamps(b):
        return _stamps(a) > _stamps(b)
    if same_content(a, b):
        return False
    return content_digest(a) > content_digest(b)


def winner(a: ObjectRecord, b: ObjectRecord) -> ObjectRecord:
    """The row both nodes keep, whichever of the two each one held."""
    return b if newer(b, a) else a


def merge(local: ObjectRecord | None, incoming: ObjectRecord, *, now: float,
          future_tolerance_seconds: float = FUTURE_TOLERANCE_SECONDS) -> MergeDecision:
    """What the apply path does with `incoming` given the `local` row of its register."""
    future = is_future_stamped(incoming, now, future_tolerance_seconds)
    if local is None:
        return MergeDecision(Verdict.APPLY, future)
    _same_register(local, incoming)
    if same_content(local, incoming):
        return MergeDecision(Verdict.IDENTICAL, future)
    verdict = Verdict.APPLY if newer(incoming, local) else Verdict.KEEP_LOCAL
    return MergeDecision(verdict, future)


def row_survives_tombstone(record: ObjectRecord, deleted_at: float) -> bool:
    """A row meets the tombstone of its register: only a write strictly newer than the
    deletion survives (a new null-version write after a delete); on a tie the delete wins,
    so a deleted version is never resurrected by a late copy of itself."""
    return record.last_modified > deleted_at


def stamp_write(now: float, replaced_last_modified: float | None) -> float:
    """The last_modified of a write on the node accepting it: never older than (nor equal
    to) the row it replaces, whatever this node's clock says."""
    if replaced_last_modified is None:
        return now
    return max(now, _step_after(replaced_last_modified))


def _step_after(stamp: float) -> float:
    """The smallest stamp this module calls strictly after `stamp`: 1 µs on, or the next
    float where 1 µs is below the float's resolution."""
    return max(stamp + STAMP_STEP_SECONDS, math.nextafter(stamp, math.inf))


def stamp_after(now: float, *seen: float | None) -> float:
    """The stamp of a change of a key given the stamps it follows on this node (the key's
    latest row, the register's tombstone, the row it replaces; None for those absent):
    `now`, raised to 1 µs after the newest of them. The hybrid logical clock of the key."""
    known = [stamp for stamp in seen if stamp is not None]
    return now if not known else stamp_write(now, max(known))


def tombstone_stamp(now: float, removed_last_modified: float | None) -> float:
    """The deleted_at of a deletion on the node accepting it: strictly after the row it
    removes, whatever this node's clock says, so that a late copy of that row loses to the
    tombstone everywhere (`row_survives_tombstone`; a tie would go to the delete too)."""
    return stamp_after(now, removed_last_modified)


def too_far_ahead(stamps: tuple[float | None, ...], now: float,
                  max_ahead_seconds: float) -> float | None:
    """The first of `stamps` (a replicated row's last_modified, lock_updated_at,
    tags_updated_at, or a deletion's deleted_at) further ahead of `now` than
    `max_ahead_seconds`, or None when every one is within it. The apply path refuses a
    change with such a stamp: stored, it would shadow every later write of its key on
    every node until the clocks catch up."""
    for stamp in stamps:
        if stamp is not None and stamp - now > max_ahead_seconds:
            return stamp
    return None


def row_stamps(record: ObjectRecord) -> tuple[float | None, ...]:
    """The stamps of a row `too_far_ahead` looks at."""
    return (record.last_modified, record.lock_updated_at, record.tags_updated_at,
            record.stages_updated_at)


def is_future_stamped(record: ObjectRecord, now: float,
                      tolerance_seconds: float = FUTURE_TOLERANCE_SECONDS) -> bool:
    """True for a row whose last_modified, lock_updated_at or tags_updated_at is further
    ahead of `now` than the tolerance."""
    return any(stamp is not None and stamp_is_future(stamp, now, tolerance_seconds)
               for stamp in (record.last_modified, record.lock_updated_at,
                             record.tags_updated_at, record.stages_updated_at))


def stamp_is_future(stamp: float, now: float,
                    tolerance_seconds: float = FUTURE_TOLERANCE_SECONDS) -> bool:
    """For tombstones and any other stamp: further ahead of `now` than the tolerance."""
    return stamp - now > tolerance_seconds
