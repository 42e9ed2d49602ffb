"""`complete_upload` and the multipart queries around it, on SQLite and on PostgreSQL: the
object row, the removal of the upload and its parts and the upload tombstone happen in one
transaction, or nothing changes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from objstore.meta.records import (
    NULL_VERSION,
    BucketRecord,
    ObjectRecord,
    PartRecord,
    PartRef,
    UploadRecord,
    WritePrecondition,
)
from objstore.meta.store import (
    TOMBSTONE_UPLOAD,
    PartsChanged,
    PreconditionNotMet,
    RecordNotFound,
    SyncMetaStore,
)
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

BUCKET = "media"
KEY = "video.mp4"


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def open_upload(store: SyncMetaStore, upload_id: str = "up-1", key: str = KEY,
                parts: int = 3) -> list[PartRecord]:
    store.create_upload(UploadRecord(upload_id, BUCKET, key, initiated_at=10.0))
    made = [PartRecord(upload_id, n, f"{upload_id}-blob-{n}", 100 * n, f"etag{n}", 20.0 + n)
            for n in range(1, parts + 1)]
    for part in made:
        assert store.put_part(part) is None
    return made


def composite(parts: list[PartRecord], *, key: str = KEY, version_id: str = NULL_VERSION,
              blob_id: str = "composite-1", etag: str = "abc-2") -> ObjectRecord:
    return ObjectRecord(
        bucket=BUCKET, key=key, version_id=version_id, blob_id=blob_id,
        size=sum(p.size for p in parts), etag=etag, last_modified=50.0,
        parts=tuple(PartRef(p.part_number, p.blob_id, p.size, p.etag) for p in parts),
        checksum_type="COMPOSITE", checksums={"crc32": "AAAAAA==-2"},
    )


def test_complete_commits_object_and_closes_upload(store: SyncMetaStore) -> None:
    parts = open_upload(store)
    record = composite([parts[0], parts[2]])
    result = store.complete_upload("up-1", record)
    assert result.record.is_latest and result.record.seq > 0
    assert store.get_object(BUCKET, KEY) == result.record
    assert store.get_object(BUCKET, KEY).parts == record.parts  # type: ignore[union-attr]
    assert store.get_upload("up-1") is None
    assert store.list_parts("up-1") == []
    assert store.get_tombstone(TOMBSTONE_UPLOAD, "up-1") is not None
    assert result.orphaned_blob_ids == ("up-1-blob-2",)  # uploaded, not listed
    assert store.delete_upload("up-1") == []  # an abort after the commit frees nothing


def test_complete_replacing_an_object_orphans_its_blobs(store: SyncMetaStore) -> None:
    store.put_object(ObjectRecord(BUCKET, KEY, NULL_VERSION, "old-blob", 5, "e", 1.0))
    parts = open_upload(store, parts=1)
    result = store.complete_upload("up-1", composite(parts))
    assert result.orphaned_blob_ids == ("old-blob",)
    assert store.get_object(BUCKET, KEY).blob_id == "composite-1"  # type: ignore[union-attr]


def test_complete_on_a_versioned_key_keeps_the_history(store: SyncMetaStore) -> None:
    store.put_object(ObjectRecord(BUCKET, KEY, "v1", "blob-v1", 5, "e", 1.0))
    parts = open_upload(store, parts=2)
    result = store.complete_upload("up-1", composite(parts, version_id="v2"))
    assert result.orphaned_blob_ids == ()
    versions = store.list_versions(BUCKET)
    assert [(v.version_id, v.is_latest) for v in versions] == [("v2", True), ("v1", False)]


@pytest.mark.parametrize("case", ["missing", "other_key", "other_bucket"])
def test_complete_of_an_unknown_upload_changes_nothing(store: SyncMetaStore, case: str) -> None:
    parts = open_upload(store)
    record = composite(parts)
    upload_id = "up-1"
    if case == "missing":
        upload_id = "nope"
    elif case == "other_key":
        record = composite(parts, key="elsewhere")
    else:
        store.create_bucket(BucketRecord("other", "u-1", "us-east-1", 1.0))
        record = ObjectRecord(**{**record.__dict__, "bucket": "other"})
    with pytest.raises(RecordNotFound):
        store.complete_upload(upload_id, record)
    assert store.get_object(BUCKET, KEY) is None
    assert store.get_object(BUCKET, "elsewhere") is None
    assert [p.blob_id for p in store.list_parts("up-1")] == [p.blob_id for p in parts]


def test_complete_refuses_parts_replaced_meanwhile(store: SyncMetaStore) -> None:
    parts = open_upload(store)
    record = composite(parts)
    assert store.put_part(PartRecord("up-1", 2, "newer-blob", 300, "etag2b", 40.0)) \
        == "up-1-blob-2"
    with pytest.raises(PartsChanged):
        store.complete_upload("up-1", record)
    assert store.get_object(BUCKET, KEY) is None
    assert store.get_upload("up-1") is not None


@pytest.mark.parametrize(
    ("existing", "precondition", "reason"),
    [
        (True, WritePrecondition(if_absent=True), "exists"),
        (True, WritePrecondition(if_match_etag="other"), "mismatch"),
        (False, WritePrecondition(if_match_etag="e"), "missing"),
    ],
)
def test_conditional_complete_that_fails_changes_nothing(
    store: SyncMetaStore, existing: bool, precondition: WritePrecondition, reason: str
) -> None:
    if existing:
        store.put_object(ObjectRecord(BUCKET, KEY, NULL_VERSION, "old-blob", 5, "e", 1.0))
    parts = open_upload(store)
    seq_before = store.max_seq()
    with pytest.raises(PreconditionNotMet) as caught:
        store.complete_upload("up-1", composite(parts), precondition)
    assert caught.value.reason == reason
    current = store.get_object(BUCKET, KEY)
    assert (current.blob_id if current else None) == ("old-blob" if existing else None)
    assert len(store.list_parts("up-1")) == 3
    assert store.max_seq() == seq_before


@pytest.mark.parametrize(
    ("existing", "precondition"),
    [(False, WritePrecondition(if_absent=True)), (True, WritePrecondition(if_match_etag="e"))],
)
def test_conditional_complete_that_holds(
    store: SyncMetaStore, existing: bool, precondition: WritePrecondition
) -> None:
    if existing:
        store.put_object(ObjectRecord(BUCKET, KEY, NULL_VERSION, "old-blob", 5, "e", 1.0))
    parts = open_upload(store)
    result = store.complete_upload("up-1", composite(parts), precondition)
    assert result.record.blob_id == "composite-1"
    assert result.orphaned_blob_ids == (("old-blob",) if existing else ())


def test_complete_into_a_deleted_bucket(store: SyncMetaStore) -> None:
    with pytest.raises(RecordNotFound):
        store.complete_upload("up-1", ObjectRecord("gone", KEY, NULL_VERSION, "b", 1, "e", 1.0))


def test_abort_takes_the_parts_with_it(store: SyncMetaStore) -> None:
    parts = open_upload(store)
    assert store.delete_upload("up-1") == parts
    assert store.get_upload("up-1") is None
    with pytest.raises(RecordNotFound):
        store.put_part(PartRecord("up-1", 4, "late-blob", 1, "e", 1.0))
    with pytest.raises(RecordNotFound):
        store.complete_upload("up-1", composite(parts))


def test_two_uploads_of_one_key_complete_in_turn(store: SyncMetaStore) -> None:
    first = open_upload(store, "up-a", parts=1)
    second = open_upload(store, "up-b", parts=1)
    store.complete_upload("up-b", composite(second, blob_id="comp-b"))
    result = store.complete_upload("up-a", composite(first, blob_id="comp-a"))
    assert result.orphaned_blob_ids == ("comp-b", "up-b-blob-1")
    assert store.list_uploads(BUCKET) == []


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at once in threads; each outcome is a result or the exception."""
    barrier = threading.Barrier(len(calls))

    def attempt(call: Callable[[], Any]) -> Any:
        barrier.wait()
        try:
            return call()
        except Exception as error:  # the outcome under test
            return error

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(attempt, calls))


@pytest.mark.parametrize("round_", range(5))
def test_complete_racing_abort_never_shares_blobs(store: SyncMetaStore, round_: int) -> None:
    parts = open_upload(store, f"up-{round_}", key=f"k{round_}")
    record = composite(parts, key=f"k{round_}")
    completed, aborted = race(lambda: store.complete_upload(f"up-{round_}", record),
                              lambda: store.delete_upload(f"up-{round_}"))
    stored = store.get_object(BUCKET, f"k{round_}")
    if isinstance(completed, RecordNotFound):
        assert stored is None and aborted == parts  # the abort won: its blobs may go
    else:
        assert stored is not None and aborted == []  # the completion won: nothing to free
    assert store.get_upload(f"up-{round_}") is None


@pytest.mark.parametrize("round_", range(5))
def test_complete_racing_a_part_replacement(store: SyncMetaStore, round_: int) -> None:
    parts = open_upload(store, f"up-{round_}", key=f"k{round_}")
    record = composite(parts, key=f"k{round_}")
    replacement = PartRecord(f"up-{round_}", 2, f"new-{round_}", 200, "etag-new", 60.0)
    completed, replaced = race(lambda: store.complete_upload(f"up-{round_}", record),
                               lambda: store.put_part(replacement))
    if isinstance(completed, PartsChanged):
        assert replaced == f"up-{round_}-blob-2" and store.get_object(BUCKET, f"k{round_}") is None
    else:
        # The completion won; the late part found no upload and must delete its own blob.
        assert isinstance(replaced, RecordNotFound)
        assert completed.record.parts == record.parts
