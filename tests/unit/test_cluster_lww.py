"""Last-writer-wins for replicated object rows (cluster rule 5), the write stamp against
clock skew and the far-future flag: each rule as a case, then the properties every node's
convergence rests on (a total, commutative, idempotent choice) with Hypothesis."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.blobs.sidecar import record_to_sidecar
from objstore.convergence import lww
from objstore.convergence.lww import MergeDecision, Verdict
from objstore.meta.records import NULL_VERSION, ObjectRecord, PartRef

T = 1_900_000_000.0


def row(version_id: str = "v1", *, at: float = T, lock_at: float | None = None,
        blob: str | None = "b-1", **fields: object) -> ObjectRecord:
    values: dict[str, object] = {"size": 3, "etag": "e", **fields}
    return ObjectRecord(bucket="bkt", key="k", version_id=version_id, blob_id=blob,
                        last_modified=at, lock_updated_at=lock_at,
                        **values)  # type: ignore[arg-type]


# -- the order ------------------------------------------------------------------------


def test_no_local_row_applies() -> None:
    assert lww.merge(None, row(), now=T) == MergeDecision(Verdict.APPLY)


@pytest.mark.parametrize("incoming_at, expected", [
    (T + 1, Verdict.APPLY), (T - 1, Verdict.KEEP_LOCAL),
    (T + 1e-6, Verdict.APPLY), (T - 1e-6, Verdict.KEEP_LOCAL),
])
def test_strictly_newer_last_modified_wins(incoming_at: float, expected: Verdict) -> None:
    local = row(at=T, etag="local", lock_at=T + 500)  # lock stamps do not outrank time
    incoming = row(at=incoming_at, etag="incoming")
    assert lww.merge(local, incoming, now=T).verdict is expected


def test_on_a_tie_the_newer_lock_change_wins() -> None:
    local = row(lock_at=T + 5, retention_mode="GOVERNANCE", retain_until_date=T + 99)
    incoming = row(lock_at=T + 6, retention_mode="GOVERNANCE", retain_until_date=T + 999)
    assert lww.merge(local, incoming, now=T).verdict is Verdict.APPLY
    assert lww.merge(incoming, local, now=T).verdict is Verdict.KEEP_LOCAL


def test_a_tie_never_erases_a_retention() -> None:
    # The local version got a retention (lock_updated_at set); a late copy of the row as it
    # was before (same last_modified, lock never changed) must not wipe it.
    locked = row(lock_at=T + 5, retention_mode="COMPLIANCE", retain_until_date=T + 86400,
                 legal_hold_status="ON")
    stale = row(lock_at=None)
    assert lww.merge(locked, stale, now=T).verdict is Verdict.KEEP_LOCAL
    assert lww.merge(stale, locked, now=T).verdict is Verdict.APPLY
    assert lww.winner(stale, locked) is locked and lww.winner(locked, stale) is locked


def test_on_a_tie_of_both_stamps_the_newer_tag_change_wins() -> None:
    local = row(tags={"a": "1"}, tags_updated_at=T + 5)
    incoming = row(tags={"b": "2"}, tags_updated_at=T + 6)
    assert lww.merge(local, incoming, now=T).verdict is Verdict.APPLY
    assert lww.merge(incoming, local, now=T).verdict is Verdict.KEEP_LOCAL
    # the tags a version was written with (None) are older than any change
    written = row(tags={"z": "9"})
    assert lww.merge(written, local, now=T).verdict is Verdict.APPLY
    assert lww.merge(local, written, now=T).verdict is Verdict.KEEP_LOCAL


def test_the_tag_stamp_ranks_below_time_and_the_lock_stamp() -> None:
    tagged = row(tags={"a": "1"}, tags_updated_at=T + 500)
    assert lww.merge(tagged, row(at=T + 1), now=T).verdict is Verdict.APPLY
    assert lww.merge(tagged, row(lock_at=T + 1, legal_hold_status="ON"),
                     now=T).verdict is Verdict.APPLY


def test_a_row_without_the_tag_stamp_digests_as_before_the_field() -> None:
    import hashlib
    import json

    plain = row(tags={"a": "1"})
    content = lww.replicated_content(plain)
    del content["tags_updated_at"], content["stages_updated_at"]
    del content["acl"]
    before = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":"),
                                       default=str).encode()).hexdigest()
    assert lww.content_digest(plain) == before
    assert lww.content_digest(replace(plain, tags_updated_at=T)) != before
    assert lww.content_digest(replace(plain, stages_updated_at=T)) != before
    assert lww.content_digest(replace(plain, acl='{"owner":"o","grants":[]}')) != before


def test_a_jobs_rewrite_wins_over_the_old_form_never_over_a_client_change() -> None:
    old = row(tags={"a": "1"}, lock_at=T + 1)
    rewritten = replace(old, blob_id="0b1e6f7c-0000-4000-8000-00000000000e",
                        encryption_algorithm="AES256", stages_updated_at=T + 5)
    assert lww.newer(rewritten, old) and not lww.newer(old, rewritten)
    assert lww.merge(old, rewritten, now=T).verdict is Verdict.APPLY
    assert lww.merge(rewritten, old, now=T).verdict is Verdict.KEEP_LOCAL
    # A tag or lock change made on another node meanwhile (a newer stamp of a stronger
    # rank) wins over the rewrite everywhere, whatever the stages stamp says.
    for change in (replace(old, tags={"b": "2"}, tags_updated_at=T + 2),
                   replace(old, legal_hold_status="ON", lock_updated_at=T + 2),
                   replace(old, last_modified=old.last_modified + 1)):
        assert lww.newer(change, rewritten) and not lww.newer(rewritten, change)
    assert lww.row_stamps(rewritten)[-1] == T + 5
    assert not lww.has_finite_stamps(replace(rewritten, stages_updated_at=float("nan")))


@pytest.mark.parametrize("lock_at", [None, T + 3])
def test_null_version_register_breaks_ties_on_blob_id(lock_at: float | None) -> None:
    low = row(NULL_VERSION, blob="0b1e6f7c-0000-4000-8000-000000000001", lock_at=lock_at)
    high = row(NULL_VERSION, blob="0b1e6f7c-0000-4000-8000-000000000002", lock_at=lock_at,
               etag="other")
    # the content digest would say the opposite for one of the two orders; blob_id rules
    assert lww.merge(low, high, now=T).verdict is Verdict.APPLY
    assert lww.merge(high, low, now=T).verdict is Verdict.KEEP_LOCAL


def test_null_version_delete_marker_loses_the_blob_tiebreak() -> None:
    marker = row(NULL_VERSION, blob=None, is_delete_marker=True)
    write = row(NULL_VERSION, blob="a")
    assert lww.winner(marker, write) is write and lww.winner(write, marker) is write


def test_blob_id_is_no_tiebreak_for_real_versions() -> None:
    # Two copies of version v1 that differ in blob id only: the order falls through to the
    # content digest, not to blob_id. Pick a pair where the two orders disagree.
    low, high = next((row(blob=f"a{i}"), row(blob=f"b{i}")) for i in range(100)
                     if lww.content_digest(row(blob=f"a{i}"))
                     > lww.content_digest(row(blob=f"b{i}")))
    assert lww.winner(low, high) is low and lww.winner(high, low) is low
    # the same two blob ids in the null version: blob_id decides
    null_low, null_high = replace(low, version_id=NULL_VERSION), replace(
        high, version_id=NULL_VERSION)
    assert lww.winner(null_low, null_high) is null_high


def test_equal_stamps_different_content_converge_on_either_side() -> None:
    # A tag change keeps both stamps: both nodes must still end with one and the same row.
    one, two = row(tags={"a": "1"}), row(tags={"a": "2"})
    assert lww.merge(one, two, now=T).verdict is not lww.merge(two, one, now=T).verdict
    assert lww.winner(one, two) == lww.winner(two, one)


def test_rows_of_different_registers_are_not_compared() -> None:
    with pytest.raises(ValueError):
        lww.merge(row("v1"), row("v2"), now=T)
    with pytest.raises(ValueError):
        lww.newer(row(), replace(row(), key="other"))


def test_non_finite_stamps_are_refused() -> None:
    bad = row(at=float("nan"))
    assert not lww.has_finite_stamps(bad)
    assert not lww.has_finite_stamps(row(lock_at=float("inf")))
    assert not lww.has_finite_stamps(row(tags_updated_at=float("nan")))
    with pytest.raises(ValueError):
        lww.merge(row(), bad, now=T)


# -- identical rows -------------------------------------------------------------------


def test_identical_replicated_content_is_a_no_op_whatever_the_node_local_fields() -> None:
    local = row(seq=41, is_latest=True, tags={"t": "v"},
                parts=(PartRef(1, "p1", 5, "e1"),))
    incoming = replace(local, seq=7, is_latest=False)
    assert lww.merge(local, incoming, now=T) == MergeDecision(Verdict.IDENTICAL)
    assert not lww.merge(local, incoming, now=T).applies


def test_any_replicated_field_makes_a_difference() -> None:
    local = row()
    for name in lww.REPLICATED_FIELDS:
        if name in ("bucket", "key", "version_id", "last_modified", "lock_updated_at",
                    "tags_updated_at", "stages_updated_at"):
            continue
        changed = replace(local, **{name: _other_value(getattr(local, name))})
        assert lww.merge(local, changed, now=T).verdict is not Verdict.IDENTICAL, name


def _other_value(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, dict):
        return {**value, "x": "y"}
    if isinstance(value, tuple):
        return (PartRef(9, "p", 1, "e"),)
    if isinstance(value, str):
        return value + "x"
    return "set"  # an optional field that was None


def test_replicated_content_is_exactly_what_a_sidecar_holds() -> None:
    sidecar = record_to_sidecar(row())
    sidecar.pop("kind")
    assert set(lww.REPLICATED_FIELDS) == set(sidecar)
    assert {"seq", "is_latest"} == lww.NODE_LOCAL_FIELDS


# -- tombstones -----------------------------------------------------------------------


def test_only_a_strictly_newer_write_survives_a_tombstone() -> None:
    assert lww.row_survives_tombstone(row(NULL_VERSION, at=T + 1), deleted_at=T)
    assert not lww.row_survives_tombstone(row(at=T), deleted_at=T)
    assert not lww.row_survives_tombstone(row(at=T - 1), deleted_at=T)


@pytest.mark.parametrize("removed", [T - 5, T, T + 10, 1e300])
def test_a_deletion_on_a_lagging_node_still_beats_the_row_it_removes(removed: float) -> None:
    stamp = lww.tombstone_stamp(T, removed)
    assert not lww.row_survives_tombstone(row(at=removed), deleted_at=stamp)
    assert stamp > removed  # strictly after the row it removes
    assert stamp == max(T, lww.stamp_write(T, removed))  # and raised no further
    assert lww.tombstone_stamp(T, None) == T


# -- the stamp of a change of a key: a hybrid logical clock per key --------------------


def test_a_change_follows_the_newest_stamp_seen_of_its_key() -> None:
    # The key's latest row, the register's tombstone, the replaced row: the newest counts.
    assert lww.stamp_after(T, T - 30, None, T - 40) == T
    assert lww.stamp_after(T - 30, T, None, None) == T + lww.STAMP_STEP_SECONDS
    assert lww.stamp_after(T - 30, T - 60, T + 5, T - 60) == T + 5 + lww.STAMP_STEP_SECONDS
    assert lww.stamp_after(T - 30, None, None, None) == T - 30
    assert lww.stamp_after(T - 30) == T - 30


def test_an_overwrite_through_a_node_30_s_behind_wins_on_every_node() -> None:
    # Node 1 writes; node 2, 30 s behind, has applied it, then overwrites: the overwrite's
    # stamp follows node 1's row, so rule 5 picks it wherever the two meet.
    first = row(NULL_VERSION, at=T, blob="bbbb")
    second = row(NULL_VERSION, at=lww.stamp_after(T - 30, first.last_modified), blob="aaaa")
    assert second.last_modified > first.last_modified
    assert lww.winner(first, second) is second and lww.winner(second, first) is second
    # After a deletion of the null version applied from node 1, a new write follows it.
    deleted_at = lww.tombstone_stamp(T, first.last_modified)
    again = row(NULL_VERSION, at=lww.stamp_after(T - 30, None, deleted_at), blob="aaaa")
    assert lww.row_survives_tombstone(again, deleted_at)


def test_concurrent_writes_through_different_nodes_still_order_by_clock() -> None:
    # Neither node saw the other's write: each stamps its clock, the later clock wins.
    on_fast = row(NULL_VERSION, at=lww.stamp_after(T, None), blob="aaaa")
    on_slow = row(NULL_VERSION, at=lww.stamp_after(T - 30, None), blob="ffff")
    assert lww.winner(on_fast, on_slow) is on_fast
    assert lww.winner(on_slow, on_fast) is on_fast


def test_a_stamp_too_far_ahead_is_named() -> None:
    assert lww.too_far_ahead((T + 300, None, None), T, 300) is None
    assert lww.too_far_ahead((T + 301, None, None), T, 300) == T + 301
    assert lww.too_far_ahead((T, T + 3600, None), T, 300) == T + 3600
    assert lww.too_far_ahead((T - 1e6, None, T + 400), T, 300) == T + 400
    assert lww.too_far_ahead((), T, 300) is None
    record = row(at=T + 10, lock_at=T + 3600)
    assert lww.too_far_ahead(lww.row_stamps(record), T, 300) == T + 3600


# -- clock skew -----------------------------------------------------------------------


def test_a_write_is_stamped_now_when_the_clock_is_ahead_of_the_replaced_row() -> None:
    assert lww.stamp_write(T, None) == T
    assert lww.stamp_write(T, T - 5) == T


@pytest.mark.parametrize("replaced", [T, T + 10, 1.0, 0.0, 2.0**52, 1e300])
def test_a_lagging_clock_still_stamps_after_the_replaced_row(replaced: float) -> None:
    stamp = lww.stamp_write(T, replaced)
    assert stamp > replaced
    if replaced >= T:
        assert stamp - replaced <= max(1e-6, replaced * 1e-15) * 1.5


def test_an_overwrite_on_a_lagging_node_wins_everywhere() -> None:
    # Node A (clock right) wrote the null version at T; node B's clock lags 10 s. B's
    # overwrite, stamped by stamp_write, must beat A's row on every node.
    on_a = row(NULL_VERSION, at=T, blob="zzzz")
    b_now = T - 10
    on_b = row(NULL_VERSION, at=lww.stamp_write(b_now, on_a.last_modified), blob="aaaa")
    assert lww.merge(on_a, on_b, now=T).verdict is Verdict.APPLY
    assert lww.merge(on_b, on_a, now=b_now).verdict is Verdict.KEEP_LOCAL


def test_a_row_stamped_far_in_the_future_is_flagged_and_still_ordered() -> None:
    ahead = row(at=T + 3600, etag="ahead")
    decision = lww.merge(row(), ahead, now=T)
    assert decision == MergeDecision(Verdict.APPLY, future_stamped=True)
    assert lww.merge(None, row(lock_at=T + 3600), now=T).future_stamped
    assert lww.merge(None, row(tags_updated_at=T + 3600), now=T).future_stamped
    assert not lww.merge(row(), row(at=T + 30, etag="x"), now=T).future_stamped
    assert lww.merge(row(), row(at=T + 30, etag="x"), now=T,
                     future_tolerance_seconds=10).future_stamped
    # a flagged row that loses is still reported
    assert lww.merge(row(at=T + 7200), ahead, now=T) == MergeDecision(Verdict.KEEP_LOCAL, True)


def test_tombstone_stamps_far_in_the_future_are_flagged() -> None:
    assert lww.stamp_is_future(T + 3600, T)
    assert not lww.stamp_is_future(T + 1, T)


# -- properties -----------------------------------------------------------------------

# Few distinct values so that ties, at every level of the order, are common.
stamps = st.sampled_from([T, T + 1])
rows = st.builds(
    lambda version_id, at, lock_at, tags_at, blob, tags, etag, seq, latest: row(
        version_id, at=at, lock_at=lock_at, tags_updated_at=tags_at, blob=blob, tags=tags,
        etag=etag, seq=seq, is_latest=latest),
    version_id=st.just(NULL_VERSION) | st.just("v1"),
    at=stamps,
    lock_at=st.none() | stamps,
    tags_at=st.none() | stamps,
    blob=st.none() | st.sampled_from(["a", "b"]),
    tags=st.sampled_from([{}, {"k": "1"}, {"k": "2"}]),
    etag=st.sampled_from(["e", "f"]),
    seq=st.integers(0, 5),
    latest=st.booleans(),
)
same_register = st.sampled_from([NULL_VERSION, "v1"]).flatmap(
    lambda v: st.lists(rows.map(lambda r: replace(r, version_id=v)), min_size=2, max_size=4))


@given(same_register)
def test_the_choice_is_commutative(pair: list[ObjectRecord]) -> None:
    a, b = pair[0], pair[1]
    assert lww.same_content(lww.winner(a, b), lww.winner(b, a))
    assert not (lww.newer(a, b) and lww.newer(b, a))


@given(same_register)
def test_the_merge_is_deterministic_and_blind_to_node_local_fields(
        pair: list[ObjectRecord]) -> None:
    a, b = pair[0], pair[1]
    decision = lww.merge(a, b, now=T)
    assert lww.merge(a, b, now=T) == decision
    assert lww.merge(replace(a, seq=99, is_latest=not a.is_latest),
                     replace(b, seq=0, is_latest=not b.is_latest), now=T) == decision


@given(same_register)
def test_the_merge_is_idempotent(pair: list[ObjectRecord]) -> None:
    a, b = pair[0], pair[1]
    held = b if lww.merge(a, b, now=T).applies else a
    assert lww.merge(held, b, now=T).verdict is not Verdict.APPLY
    assert lww.merge(held, held, now=T).verdict is Verdict.IDENTICAL


@settings(max_examples=50)
@given(same_register)
def test_every_delivery_order_converges(batch: list[ObjectRecord]) -> None:
    finals = set()
    for order in itertools.permutations(batch):
        held: ObjectRecord | None = None
        for incoming in order:
            if lww.merge(held, incoming, now=T).applies:
                held = incoming
        assert held is not None
        finals.add(lww.content_digest(held))
    assert len(finals) == 1


@given(same_register)
def test_the_order_is_transitive(batch: list[ObjectRecord]) -> None:
    for a, b, c in itertools.permutations(batch, 3):
        if lww.newer(a, b) and lww.newer(b, c):
            assert lww.newer(a, c)


@settings(max_examples=50)
@given(st.lists(st.tuples(st.sampled_from([{}, {"k": "1"}, {"k": "2"}, {"j": "3"}]),
                          st.floats(T, T + 10)),
                min_size=1, max_size=4, unique_by=lambda change: change[1]))
def test_the_newest_tag_change_wins_in_every_delivery_order(
        changes: list[tuple[dict[str, str], float]]) -> None:
    """Tag changes of one version made on different nodes (the row as written, then each
    change with its stamp): every node ends with the tags of the newest change, whatever
    order the rows reach it in."""
    written = row(tags={"orig": "0"})
    batch = [written, *(replace(written, tags=tags, tags_updated_at=at)
                        for tags, at in changes)]
    newest = max(changes, key=lambda change: change[1])[0]
    for order in itertools.permutations(batch):
        held: ObjectRecord | None = None
        for incoming in order:
            if lww.merge(held, incoming, now=T).applies:
                held = incoming
        assert held is not None and held.tags == newest


@given(st.floats(0, 4e9), st.none() | st.floats(0, 4e9))
def test_a_stamp_is_never_older_than_now_nor_than_the_replaced_row(
        now: float, replaced: float | None) -> None:
    stamp = lww.stamp_write(now, replaced)
    assert stamp >= now
    if replaced is not None:
        assert stamp > replaced
