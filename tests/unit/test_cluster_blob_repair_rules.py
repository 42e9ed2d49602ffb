"""The pure rules of blob repair (cluster/blob_repair_rules.py): what a row expects, the
verification of fetched bytes, a local blob's state, the tick's budget and the cursor."""

from __future__ import annotations

import hashlib

from objstore.cluster.blob_repair_rules import (
    RETRY_CAP_SECONDS,
    BlobState,
    ExpectedBlob,
    TickBudget,
    Unavailable,
    accepts,
    after_failure,
    content_md5,
    expected_blobs,
    local_state,
    needs_hash,
    next_cursor,
    retry_due,
)
from objstore.meta.records import ObjectRecord, PartRef

BLOB = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
PART_1 = "0000000a-0000-4000-8000-000000000001"
PART_2 = "0000000a-0000-4000-8000-000000000002"
DATA = b"hello"
MD5 = hashlib.md5(DATA).hexdigest()


def row(**fields: object) -> ObjectRecord:
    values: dict[str, object] = {"size": len(DATA), "etag": MD5, **fields}
    return ObjectRecord("b", "k", "null", values.pop("blob_id", BLOB),  # type: ignore[arg-type]
                        last_modified=10.0, **values)  # type: ignore[arg-type]


def test_a_plain_row_expects_its_blob_with_size_md5_and_its_own_sidecar() -> None:
    [expected] = expected_blobs(row(tags={"t": "1"}))
    assert (expected.blob_id, expected.size, expected.md5) == (BLOB, len(DATA), MD5)
    assert expected.sidecar["kind"] == "object" and expected.sidecar["tags"] == {"t": "1"}
    assert expected.sidecar["blob_id"] == BLOB and "seq" not in expected.sidecar


def test_a_composite_expects_each_part_with_the_part_etag() -> None:
    parts = (PartRef(1, PART_1, 3, "a" * 32), PartRef(2, PART_2, 2, "b" * 32))
    first, second = expected_blobs(row(size=5, etag="c" * 32 + "-2", parts=parts))
    assert (first.blob_id, first.size, first.md5) == (PART_1, 3, "a" * 32)
    assert (second.blob_id, second.size, second.md5) == (PART_2, 2, "b" * 32)
    assert first.sidecar["kind"] == "part" and first.sidecar["part_number"] == 1
    assert "upload_id" not in first.sidecar  # recover reopens no completed upload


def test_a_delete_marker_expects_nothing() -> None:
    assert expected_blobs(row(is_delete_marker=True, size=0, etag="")) == []


def test_stored_through_a_stage_neither_size_nor_md5_is_known() -> None:
    for staged in ({"encryption_algorithm": "SSE-C"}, {"compression": "zstd"}):
        [expected] = expected_blobs(row(**staged))
        assert (expected.size, expected.md5) == (None, None)
        assert accepts(expected, 12345, "0" * 32)  # copied as stored, never decoded


def test_only_a_plain_md5_etag_is_a_content_hash() -> None:
    assert content_md5(MD5) == MD5
    assert content_md5('"' + MD5.upper() + '"') == MD5
    assert content_md5(MD5 + "-3") is None
    assert content_md5("") is None
    [expected] = expected_blobs(row(etag="imported-etag"))
    assert expected.md5 is None and expected.size == len(DATA)


def test_fetched_bytes_must_match_size_and_md5() -> None:
    [expected] = expected_blobs(row())
    assert accepts(expected, len(DATA), MD5)
    assert not accepts(expected, len(DATA) + 1, MD5)
    assert not accepts(expected, len(DATA), hashlib.md5(b"jello").hexdigest())
    assert accepts(expected, len(DATA), MD5.upper())


def test_a_local_blob_is_missing_corrupt_or_intact() -> None:
    [expected] = expected_blobs(row())
    assert local_state(expected, None, None) is BlobState.MISSING
    assert local_state(expected, len(DATA) - 1, None) is BlobState.CORRUPT
    assert local_state(expected, len(DATA), "0" * 32) is BlobState.CORRUPT
    assert local_state(expected, len(DATA), MD5) is BlobState.INTACT
    unknown = ExpectedBlob(BLOB, None, None, {})
    assert local_state(unknown, 7, None) is BlobState.INTACT


def test_a_blob_is_read_only_when_its_md5_can_tell_something() -> None:
    [expected] = expected_blobs(row())
    assert needs_hash(expected, len(DATA))
    assert not needs_hash(expected, None)
    assert not needs_hash(expected, len(DATA) + 1)  # the size condemned it already
    assert not needs_hash(ExpectedBlob(BLOB, 5, None, {}), 5)


def test_the_budget_is_checked_between_rows_only() -> None:
    budget = TickBudget(fetch_budget=1)
    assert budget.may_start()
    budget.fetches += 3  # one row's three missing parts: fetched together
    assert not budget.may_start()
    assert not TickBudget(fetch_budget=5, rows_limit=2, rows=2).may_start()
    assert not TickBudget(fetch_budget=5, bytes_limit=10, bytes_read=10).may_start()


def test_the_cursor_resumes_and_wraps_after_the_last_row() -> None:
    assert next_cursor("id-9", 200, 200, True) == ("id-9", False)  # a full page: more
    assert next_cursor("id-9", 120, 200, False) == ("id-9", False)  # budget ran out
    assert next_cursor("id-9", 120, 200, True) == (None, True)  # the end: wrap
    assert next_cursor(None, 0, 200, True) == (None, True)  # no rows at all


def test_a_blob_no_peer_gave_is_asked_again_after_a_doubling_delay() -> None:
    first = after_failure(None, 100.0, base_seconds=30.0)
    assert first == Unavailable(1, 130.0)
    assert not retry_due(first, 129.9) and retry_due(first, 130.0)
    second = after_failure(first, 130.0, base_seconds=30.0)
    assert second == Unavailable(2, 190.0)
    third = after_failure(second, 190.0, base_seconds=30.0)
    assert third == Unavailable(3, 310.0)


def test_the_delay_is_capped_and_never_below_a_second() -> None:
    state = None
    for _ in range(200):  # no overflow however long the blob stays away
        state = after_failure(state, 0.0, base_seconds=30.0)
    assert state is not None and state.retry_at == RETRY_CAP_SECONDS
    assert after_failure(None, 0.0, base_seconds=0.01).retry_at == 1.0


def test_a_blob_not_remembered_is_always_due() -> None:
    assert retry_due(None, 0.0)
