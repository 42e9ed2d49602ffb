"""The rules of anti-entropy's cursor toward one peer, and of the node's `syncing` state.

A node pulls each eligible peer's changed-since manifest (POST /cluster/v1/manifest) from
its cursor: the peer's seq up to which every entry has been applied here (or skipped).
This module decides, without I/O or Twisted, what the cursor becomes:

* `page_end`: where a page fully applied leaves the cursor: its last entry's seq while more
  follow, else the peer's max_seq (every seq up to it was scanned: gaps are rows that moved
  to a later seq, and the seq is commit-ordered, spec rule 4).
* `advanced`: the cursor moved forward, the peer's max_seq at that advance remembered.
* `rewound` / `reset_after_rewind` (rule 8): a peer whose max_seq, reported after the last
  advance, is below the stored cursor lost history (a restored backup, a rebuilt
  database): the cursor goes back to 0, with a warning, and everything is pulled again
  (identical rows are no-ops).
* `entry_failed` (rule 9): the pass stops at an entry that fails; the same seq failing on
  SKIP_AFTER_PASSES consecutive passes is skipped (the cursor moves past it, a warning,
  `skipped_entries` + 1), so one poison row never stalls a peer's sync; a failure the
  caller knows is permanent (the row refused as invalid, a 400) is skipped at once, as no
  later pass would apply it. An entry that then
  succeeds clears the count (`advanced` past it). A pass retries its object rows once
  after its extra steps (anti_entropy.py); the seq it stopped at failing again in that
  retry is not counted twice (`again_this_pass`): the rule counts passes, not attempts.
* `split_batches`: a page's entries cut into the batches anti-entropy applies at once
  (one transaction each) and fetches the bytes of ahead, bounded in rows and bytes.
* `pass_completed`: the peer was caught up (and its extra steps succeeded): first pass done.
* `cursor_to_forget`: a peer the membership pruned (unseen for peer_prune_days) loses its
  cursor, unless another known address still carries its node id (a node that moved).

`syncing` (Health states): a node is syncing while some eligible peer has had no complete
pass since this process started, except a brand-new peer (never synced with, while this
node is established) once its first attempt is over: a new peer joining holds established
nodes in syncing for one tick at most. With no eligible peers the node is not syncing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

T = TypeVar("T")

SKIP_AFTER_PASSES = 5


def cursor_to_forget(pruned_node_id: str | None, remaining_node_ids: Iterable[str | None]
                     ) -> str | None:
    """The node id whose cursor goes when a peer with `pruned_node_id` is pruned: None
    when it never answered (no node id, no cursor) or another known peer carries it."""
    if pruned_node_id is None or pruned_node_id in set(remaining_node_ids):
        return None
    return pruned_node_id


@dataclass(frozen=True, slots=True)
class SyncCursor:
    """This node's cursor toward one peer (the `sync_cursors` row)."""

    peer_node_id: str
    cursor: int = 0
    peer_max_seq: int | None = None  # the peer's max_seq at the last advance
    first_pass_done: bool = False  # ever: a full pass toward this peer completed
    last_reconcile: float | None = None  # when the last full pass completed
    failing_seq: int | None = None
    failed_passes: int = 0
    skipped_entries: int = 0


def page_end(since: int, last_seq: int | None, max_seq: int, more: bool) -> int:
    """The cursor after a page read from `since` was applied entry by entry: the last
    entry's seq while more follow; else the peer's `max_seq` (never backwards)."""
    if more and last_seq is not None:
        return max(since, last_seq)
    return max(since, max_seq, last_seq or 0)


def advanced(cursor: SyncCursor, to_seq: int, peer_max_seq: int) -> SyncCursor:
    """The cursor moved to `to_seq` (never backwards); a failing entry at or below it is
    done with."""
    failing = cursor.failing_seq is not None and cursor.failing_seq > to_seq
    return replace(cursor, cursor=max(cursor.cursor, to_seq), peer_max_seq=peer_max_seq,
                   failing_seq=cursor.failing_seq if failing else None,
                   failed_passes=cursor.failed_passes if failing else 0)


def rewound(cursor: SyncCursor, reported_max_seq: int) -> bool:
    """Rule 8: the peer's max_seq, reported after the last advance (a manifest answer
    always is), is lower than the stored cursor."""
    return reported_max_seq < cursor.cursor


def reset_after_rewind(cursor: SyncCursor) -> SyncCursor:
    return replace(cursor, cursor=0, peer_max_seq=None, failing_seq=None, failed_passes=0)


def entry_failed(cursor: SyncCursor, seq: int, *, again_this_pass: bool = False,
                 permanent: bool = False) -> tuple[SyncCursor, bool]:
    """The entry at `seq` failed on this pass: (the cursor now, whether it is skipped).
    Skipped on the SKIP_AFTER_PASSES-th consecutive pass failing on the same seq, or at
    once when the failure is `permanent` (the row was refused as invalid: no later pass
    would apply it). With `again_this_pass` (the pass's retry), the seq this pass already
    counted (the cursor's `failing_seq`) is not counted again."""
    if again_this_pass and cursor.failing_seq == seq and not permanent:
        return cursor, False
    passes = cursor.failed_passes + 1 if cursor.failing_seq == seq else 1
    if passes >= SKIP_AFTER_PASSES or permanent:
        return replace(cursor, cursor=max(cursor.cursor, seq), failing_seq=None,
                       failed_passes=0, skipped_entries=cursor.skipped_entries + 1), True
    return replace(cursor, failing_seq=seq, failed_passes=passes), False


def split_batches(entries: Sequence[T], size_of: Callable[[T], int], max_rows: int,
                  max_bytes: int) -> list[list[T]]:
    """A page's entries cut, in order, into batches of at most `max_rows` entries whose
    sizes (`size_of`: the bytes a row may need fetched) add up to at most `max_bytes`;
    an entry larger than that alone is a batch of its own."""
    batches: list[list[T]] = []
    current: list[T] = []
    size = 0
    for entry in entries:
        weight = max(0, size_of(entry))
        if current and (len(current) >= max_rows or size + weight > max_bytes):
            batches.append(current)
            current, size = [], 0
        current.append(entry)
        size += weight
    if current:
        batches.append(current)
    return batches


def pass_completed(cursor: SyncCursor, now: float) -> SyncCursor:
    return replace(cursor, first_pass_done=True, last_reconcile=now)


def lag(cursor: SyncCursor | None, peer_max_seq: int | None) -> int | None:
    """How many of the peer's seqs are beyond the cursor (None: nothing known)."""
    known = [v for v in (peer_max_seq, cursor.peer_max_seq if cursor else None)
             if v is not None]
    if not known:
        return None
    return max(0, max(known) - (cursor.cursor if cursor else 0))


# -- syncing --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerProgress:
    """What this process did toward a peer since it started."""

    attempted: bool = False  # a pass toward it ended (caught up or not)
    passed: bool = False  # a full pass (object rows and the extra steps) completed
    known_before: bool = False  # a full pass toward it had completed before (persisted)


def established(progress: Mapping[str, PeerProgress]) -> bool:
    """This node has been in sync with a peer: a full pass completed, now or before."""
    return any(p.passed or p.known_before for p in progress.values())


def peer_holds_syncing(progress: PeerProgress | None, node_established: bool) -> bool:
    """Whether an eligible peer keeps this node syncing: no full pass since start, unless
    it is brand-new to an established node and its first attempt is over."""
    if progress is None:
        return True
    if progress.passed:
        return False
    brand_new = not progress.known_before
    return not (brand_new and node_established and progress.attempted)


def syncing(eligible_peer_ids: Iterable[str], progress: Mapping[str, PeerProgress],
            *, loaded: bool = True) -> bool:
    """The node's syncing state toward its eligible peers (none: not syncing). Before the
    cursors were read (`loaded` False) every eligible peer holds it."""
    ids = list(eligible_peer_ids)
    if not ids:
        return False
    if not loaded:
        return True
    node_established = established(progress)
    return any(peer_holds_syncing(progress.get(peer), node_established) for peer in ids)
