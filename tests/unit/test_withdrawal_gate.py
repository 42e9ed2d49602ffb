"""WithdrawalGate (engine/withdrawal_gate.py): the batch delete's COMMIT waits until its
withdrawal ended, and fails when the withdrawal failed or did not end in time; and
`delete_object_versions` runs `before_commit` before its COMMIT, whose failure rolls the
batch back. Threads sequenced by events, no sleeps."""

from __future__ import annotations

import threading
import time

import pytest

from objstore.engine.withdrawal_gate import WithdrawalFailed, WithdrawalGate
from objstore.meta.object_write_queries import VersionDelete
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)


def test_the_commit_waits_for_a_withdrawal_running_on_the_io_pool() -> None:
    writing, release = threading.Event(), threading.Event()

    def withdraw() -> str:
        writing.set()
        release.wait(10)
        return "manifest"

    gate = WithdrawalGate(withdraw)
    ran: list[str | None] = []
    io = threading.Thread(target=lambda: ran.append(gate.run()))
    io.start()
    writing.wait(10)
    waited: list[bool] = []
    writer = threading.Thread(target=lambda: (gate.wait(), waited.append(True)))
    writer.start()
    writer.join(0.05)
    assert writer.is_alive() and waited == []  # the withdrawal still runs
    release.set()
    writer.join(10)
    io.join(10)
    assert waited == [True] and ran == ["manifest"]


def test_the_writer_runs_a_withdrawal_no_io_thread_started_and_the_job_gets_its_result(
        ) -> None:
    threads: list[str] = []
    gate = WithdrawalGate(lambda: threads.append(threading.current_thread().name) or "m")
    writer = threading.Thread(target=gate.wait, name="writer")
    writer.start()
    writer.join(10)
    assert gate.run() == "m" and threads == ["writer"]  # run once, by the writer


def test_a_failed_withdrawal_fails_the_commit_with_its_cause() -> None:
    refused = OSError("Input/output error")

    def withdraw() -> None:
        raise refused

    gate = WithdrawalGate(withdraw)
    with pytest.raises(OSError):
        gate.run()
    with pytest.raises(WithdrawalFailed) as raised:
        gate.wait()
    assert raised.value.__cause__ is refused


def test_a_running_withdrawal_that_does_not_end_in_time_fails_the_commit() -> None:
    writing, release = threading.Event(), threading.Event()
    gate = WithdrawalGate(lambda: (writing.set(), release.wait(10))[1],
                          timeout_seconds=0)
    io = threading.Thread(target=gate.run)
    io.start()
    writing.wait(10)
    with pytest.raises(WithdrawalFailed):
        gate.wait()
    release.set()
    io.join(10)


# -- delete_object_versions' before_commit -------------------------------------------------
def rows(store: SyncMetaStore, count: int) -> list[ObjectRecord]:
    store.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    store.insert_recovered([
        ObjectRecord(bucket="b", key=f"k{n}", version_id="null", blob_id=None, size=0,
                     etag="e", content_type="binary/octet-stream", last_modified=time.time())
        for n in range(count)])
    found = store.get_object_versions("b", [(f"k{n}", "null") for n in range(count)])
    return list(found.values())


def test_the_batch_commits_only_after_before_commit_returned(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    records = rows(meta_store, 3)
    seen: list[int] = []
    meta_store.delete_object_versions(
        "b", [VersionDelete.of(r, None) for r in records],
        before_commit=lambda: seen.append(len(list(meta_store.iter_objects()))))
    assert seen == [3]  # not yet committed when it ran
    assert list(meta_store.iter_objects()) == []


def test_a_failing_before_commit_rolls_the_batch_back(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    records = rows(meta_store, 3)

    def refused() -> None:
        raise WithdrawalFailed("the withdrawal failed")

    with pytest.raises(WithdrawalFailed):
        meta_store.delete_object_versions("b", [VersionDelete.of(r, None) for r in records],
                                          before_commit=refused)
    assert len(list(meta_store.iter_objects())) == 3


def test_a_batch_that_removes_nothing_does_not_wait(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    records = rows(meta_store, 1)
    meta_store.delete_object_versions("b", [VersionDelete.of(records[0], None)])
    called: list[bool] = []
    meta_store.delete_object_versions("b", [VersionDelete.of(records[0], None)],
                                      before_commit=lambda: called.append(True))
    assert called == []
