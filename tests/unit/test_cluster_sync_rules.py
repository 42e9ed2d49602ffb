"""Anti-entropy's pure rules (convergence/sync_rules.py), without a reactor: where a page leaves
the cursor, rewind detection (rule 8), the skip of an entry failing 5 passes in a row on
the same seq (rule 9) or at once when the failure is permanent, a page cut into
batches, first pass done, lag, and the node's syncing state."""

from __future__ import annotations

from dataclasses import replace

from objstore.convergence.sync_rules import (
    SKIP_AFTER_PASSES,
    PeerProgress,
    SyncCursor,
    advanced,
    cursor_to_forget,
    entry_failed,
    lag,
    page_end,
    pass_completed,
    reset_after_rewind,
    rewound,
    split_batches,
    syncing,
)

START = SyncCursor("node-b")


def test_a_full_page_leaves_the_cursor_at_its_last_entry() -> None:
    assert page_end(0, 7, 50, more=True) == 7


def test_the_last_page_leaves_the_cursor_at_the_peer_max_seq() -> None:
    assert page_end(0, 7, 50, more=False) == 50
    assert page_end(10, None, 50, more=False) == 50  # nothing new: gaps only


def test_a_page_never_moves_the_cursor_back() -> None:
    assert page_end(60, None, 50, more=False) == 60
    assert page_end(60, None, 50, more=True) == 60


def test_an_advance_remembers_the_peer_max_seq_and_clears_a_passed_failure() -> None:
    failing = replace(START, cursor=3, failing_seq=4, failed_passes=2)
    moved = advanced(failing, 9, 12)
    assert (moved.cursor, moved.peer_max_seq, moved.failing_seq, moved.failed_passes) == (
        9, 12, None, 0)
    short = advanced(replace(START, failing_seq=8, failed_passes=2), 5, 12)
    assert (short.cursor, short.failing_seq, short.failed_passes) == (5, 8, 2)
    assert advanced(replace(START, cursor=9), 4, 12).cursor == 9


def test_a_peer_reporting_a_max_seq_below_the_cursor_rewound() -> None:
    cursor = replace(START, cursor=40, peer_max_seq=40, failing_seq=41, failed_passes=3)
    assert rewound(cursor, 12) and not rewound(cursor, 40) and not rewound(cursor, 41)
    reset = reset_after_rewind(cursor)
    assert (reset.cursor, reset.peer_max_seq, reset.failing_seq, reset.failed_passes) == (
        0, None, None, 0)
    assert reset.skipped_entries == cursor.skipped_entries


def test_an_entry_failing_five_passes_in_a_row_is_skipped_and_counted() -> None:
    cursor = replace(START, cursor=6)
    for passes in range(1, SKIP_AFTER_PASSES):
        cursor, skipped = entry_failed(cursor, 7)
        assert not skipped and cursor.failed_passes == passes and cursor.cursor == 6
    cursor, skipped = entry_failed(cursor, 7)
    assert skipped and cursor.cursor == 7 and cursor.skipped_entries == 1
    assert cursor.failing_seq is None and cursor.failed_passes == 0


def test_a_failure_on_another_seq_starts_counting_again() -> None:
    cursor = replace(START, failing_seq=7, failed_passes=4)
    cursor, skipped = entry_failed(cursor, 9)
    assert not skipped and (cursor.failing_seq, cursor.failed_passes) == (9, 1)


def test_the_retry_of_a_pass_does_not_count_its_failing_seq_twice() -> None:
    cursor, _ = entry_failed(replace(START, failing_seq=7, failed_passes=3), 7)
    assert cursor.failed_passes == 4
    again, skipped = entry_failed(cursor, 7, again_this_pass=True)
    assert not skipped and again == cursor
    # another seq failing in the retry is a failure of its own
    other, skipped = entry_failed(cursor, 9, again_this_pass=True)
    assert not skipped and (other.failing_seq, other.failed_passes) == (9, 1)


def test_a_permanent_failure_is_skipped_at_once() -> None:
    cursor, skipped = entry_failed(replace(START, cursor=6), 7, permanent=True)
    assert skipped and cursor.cursor == 7 and cursor.skipped_entries == 1
    assert cursor.failing_seq is None and cursor.failed_passes == 0
    # also in a pass's retry, and after transient failures of the same seq
    counted = replace(START, cursor=6, failing_seq=7, failed_passes=2)
    cursor, skipped = entry_failed(counted, 7, again_this_pass=True, permanent=True)
    assert skipped and cursor.cursor == 7
    # a transient failure still counts passes
    cursor, skipped = entry_failed(replace(START, cursor=6), 7, permanent=False)
    assert not skipped and cursor.cursor == 6 and cursor.failed_passes == 1


def test_a_page_is_cut_into_batches_bounded_in_rows_and_bytes() -> None:
    sizes = [10, 10, 10, 10, 10]
    assert split_batches(sizes, lambda n: n, 2, 1000) == [[10, 10], [10, 10], [10]]
    assert split_batches(sizes, lambda n: n, 10, 25) == [[10, 10], [10, 10], [10]]
    # an entry larger than the byte bound goes alone; order is kept
    assert split_batches([5, 100, 5, 5], lambda n: n, 10, 20) == [[5], [100], [5, 5]]
    assert split_batches([], lambda n: n, 2, 10) == []
    assert split_batches([0] * 5, lambda n: n, 3, 0) == [[0, 0, 0], [0, 0]]


def test_a_completed_pass_is_recorded() -> None:
    done = pass_completed(START, 123.0)
    assert done.first_pass_done and done.last_reconcile == 123.0


def test_lag_is_the_peer_max_seq_beyond_the_cursor() -> None:
    assert lag(None, None) is None and lag(None, 5) == 5
    cursor = replace(START, cursor=8, peer_max_seq=10)
    assert lag(cursor, None) == 2 and lag(cursor, 15) == 7 and lag(cursor, 3) == 2
    assert lag(replace(cursor, cursor=20), None) == 0


# -- syncing ----------------------------------------------------------------------------------


def test_no_eligible_peer_is_not_syncing() -> None:
    assert not syncing([], {}) and not syncing([], {}, loaded=False)


def test_syncing_until_the_cursors_are_read_and_every_peer_passed() -> None:
    known = PeerProgress(known_before=True)
    assert syncing(["b"], {}, loaded=False)
    assert syncing(["b", "c"], {"b": replace(known, attempted=True, passed=True),
                                "c": known})
    assert syncing(["b", "c"], {"b": replace(known, passed=True),
                                "c": replace(known, attempted=True)})  # c failed
    assert not syncing(["b", "c"], {"b": replace(known, passed=True),
                                    "c": replace(known, passed=True)})


def test_a_returning_node_syncs_with_every_peer_it_knew() -> None:
    # Restarted: every peer was synced with before; none passed in this run yet.
    progress = {"b": PeerProgress(known_before=True), "c": PeerProgress(known_before=True)}
    assert syncing(["b", "c"], progress)
    progress["b"] = replace(progress["b"], attempted=True)
    assert syncing(["b", "c"], progress)


def test_a_brand_new_peer_holds_an_established_node_one_attempt_at_most() -> None:
    progress = {"b": PeerProgress(attempted=True, passed=True, known_before=True)}
    assert syncing(["b", "d"], progress)  # d just joined: not attempted yet
    progress["d"] = PeerProgress(attempted=True)  # its first attempt failed
    assert not syncing(["b", "d"], progress)


def test_a_brand_new_node_syncs_until_it_passed_with_a_peer() -> None:
    progress = {"b": PeerProgress(attempted=True), "c": PeerProgress(attempted=True)}
    assert syncing(["b", "c"], progress)  # not established: every peer holds it
    progress["b"] = replace(progress["b"], passed=True)
    assert not syncing(["b", "c"], progress)  # c is new to an established node


def test_a_pruned_peers_cursor_is_forgotten_unless_its_node_id_is_still_known() -> None:
    assert cursor_to_forget("node-b", ["node-c", None]) == "node-b"
    assert cursor_to_forget("node-b", []) == "node-b"
    assert cursor_to_forget("node-b", ["node-c", "node-b"]) is None  # moved address
    assert cursor_to_forget(None, ["node-c"]) is None  # never answered: no cursor
