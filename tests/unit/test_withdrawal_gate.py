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


def waiter(gate: WithdrawalGate) -> tuple[threading.Thread, list[BaseException | None]]:
    outcome: list[BaseException | None] = []

    def wait() -> None:
        try:
            gate.wait()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - what the test looks at
            outcome.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, outcome


def test_the_commit_waits_until_the_withdrawal_ended() -> None:
    gate = WithdrawalGate()
    writing, release = threading.Event(), threading.Event()

    def withdraw(name: str) -> str:
        writing.set()
        release.wait(10)
        return name

    io = threading.Thread(target=lambda: gate.run(withdraw, "manifest"))
    io.start()
    writing.wait(10)
    thread, outcome = waiter(gate)
    thread.join(0.05)
    assert thread.is_alive() and outcome == []  # still waiting: the withdrawal runs
    release.set()
    thread.join(10)
    io.join(10)
    assert outcome == [None]


def test_a_failed_withdrawal_fails_the_commit_with_its_cause() -> None:
    gate = WithdrawalGate()
    refused = OSError("Input/output error")

    def withdraw() -> None:
        raise refused

    with pytest.raises(OSError):
        gate.run(withdraw)
    with pytest.raises(WithdrawalFailed) as raised:
        gate.wait()
    assert raised.value.__cause__ is refused


def test_a_withdrawal_that_does_not_end_in_time_fails_the_commit() -> None:
    with pytest.raises(WithdrawalFailed):
        WithdrawalGate(timeout_seconds=0).wait()


def test_nothing_to_withdraw_opens_the_gate() -> None:
    gate = WithdrawalGate()
    gate.open()
    gate.wait()


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
