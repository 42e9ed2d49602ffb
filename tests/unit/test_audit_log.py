"""The audit log service without a reactor: a Clock drives its timers, a fake store stands
for the database (answering at once, failing, or holding a write open)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import Logger

from objstore import timers as timers_module
from objstore.audit import log as log_module
from objstore.audit import queue as queue_module
from objstore.audit.log import AuditLog, AuditSink
from objstore.audit.queue import BoundedQueue
from objstore.meta.audit_queries import PURGE_BATCH, AuditRecord

START = 1_700_000_000.0


class FakeStore:
    def __init__(self) -> None:
        self.batches: list[list[AuditRecord]] = []
        self.failures = 0
        self.held: list[Deferred[int]] = []
        self.hold = False
        self.purges: list[float] = []
        self.purge_results: list[Any] = []

    def insert_audit_records(self, records: Sequence[AuditRecord]) -> Deferred[int]:
        if self.failures:
            self.failures -= 1
            return defer.fail(RuntimeError("database unavailable"))
        self.batches.append(list(records))
        if self.hold:
            held: Deferred[int] = Deferred()
            self.held.append(held)
            return held
        return defer.succeed(len(records))

    def purge_audit(self, before_ts: float, batch_size: int = PURGE_BATCH) -> Deferred[int]:
        self.purges.append(before_ts)
        result = self.purge_results.pop(0) if self.purge_results else 0
        if isinstance(result, Exception):
            return defer.fail(result)
        return defer.succeed(result)

    @property
    def written(self) -> list[AuditRecord]:
        return [r for batch in self.batches for r in batch]


def make_log(store: FakeStore, clock: Clock, **options: Any) -> AuditLog:
    options.setdefault("batch_size", 3)
    return AuditLog(store, node_id="node-a", clock=clock, **options)


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.advance(START)
    return clock


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    monkeypatch.setattr(queue_module, "log", Logger(observer=found.append))
    monkeypatch.setattr(log_module, "log", Logger(observer=found.append))
    monkeypatch.setattr(timers_module, "log", Logger(observer=found.append))
    return found


def test_records_are_written_by_the_timer_in_batches(clock: Clock) -> None:
    store = FakeStore()
    audit = make_log(store, clock)
    audit.startService()
    for n in range(7):
        audit.record("Lifecycle::ExpireObject", bucket="b", key=f"k{n}")
    assert store.batches == []  # nothing on the caller's path
    clock.advance(1.0)
    assert [len(b) for b in store.batches] == [3, 3, 1]
    assert [r.key for r in store.written] == [f"k{n}" for n in range(7)]
    assert audit.depth == 0


def test_record_fills_columns_and_details_without_secrets(clock: Clock) -> None:
    store = FakeStore()
    audit = make_log(store, clock)
    sink: AuditSink = audit
    sink.record(
        "Lifecycle::ExpireObject", bucket="photos", key="old.jpg", status=204,
        error_code="", request_id="R1", duration_ms="2.5", rule_id="expire-30",
        version_id="v1", secret_access_key="s3cr3t", signature="abc", user_agent="x",
        note="url?X-Amz-Signature=deadbeef&x=1",
    )
    audit.startService()
    (written,) = store.written
    assert (written.operation, written.bucket, written.key, written.status) == (
        "Lifecycle::ExpireObject", "photos", "old.jpg", 204)
    assert (written.username, written.node_id, written.ts) == ("system", "node-a", START)
    assert (written.request_id, written.duration_ms, written.user_agent) == ("R1", 2.5, "x")
    assert written.details == {"rule_id": "expire-30", "version_id": "v1",
                               "note": "url?X-Amz-Signature=REDACTED&x=1"}
    assert "s3cr3t" not in repr(written) and "deadbeef" not in repr(written)


def test_full_queue_drops_the_oldest_and_warns_at_most_once_a_minute(
    clock: Clock, events: list[dict[str, Any]]
) -> None:
    store = FakeStore()
    audit = make_log(store, clock, capacity=2)
    for n in range(5):
        audit.record("Op", key=f"k{n}")
    assert audit.queue.dropped == 3
    warnings = [e for e in events if "dropped" in e["log_format"]]
    assert len(warnings) == 1
    clock.advance(61)
    audit.record("Op", key="k5")
    assert len([e for e in events if "dropped" in e["log_format"]]) == 2
    audit.startService()
    assert [r.key for r in store.written] == ["k4", "k5"]


def test_flushes_never_overlap(clock: Clock) -> None:
    store = FakeStore()
    store.hold = True
    audit = make_log(store, clock)
    audit.startService()
    audit.record("Op", key="a")
    clock.advance(1.0)
    audit.record("Op", key="b")
    clock.advance(1.0)
    clock.advance(1.0)
    assert len(store.batches) == 1  # the first write is still open
    store.held.pop(0).callback(1)
    assert [r.key for r in store.written] == ["a"]  # b came after that flush began
    clock.advance(1.0)
    store.held.pop(0).callback(1)
    assert [r.key for r in store.written] == ["a", "b"]


def test_a_flush_writes_what_was_queued_then_only_full_batches(clock: Clock) -> None:
    # Under a steady load a flush that chased the queue to empty wrote back-to-back
    # batches of the few records that arrived during each write.
    store = FakeStore()
    store.hold = True
    audit = make_log(store, clock, batch_size=3)
    audit.startService()
    for n in range(4):
        audit.record("Op", key=f"q{n}")
    clock.advance(1.0)  # the flush takes q0-q2 (one batch), q3 is due too
    audit.record("Op", key="late0")
    store.held.pop(0).callback(3)
    assert [len(batch) for batch in store.batches] == [3, 1]  # q3, not late0
    audit.record("Op", key="late1")
    audit.record("Op", key="late2")
    store.held.pop(0).callback(1)  # now a full batch is waiting: written in this flush
    assert [len(batch) for batch in store.batches] == [3, 1, 3]
    audit.record("Op", key="late3")
    store.held.pop(0).callback(3)
    assert [len(batch) for batch in store.batches] == [3, 1, 3]  # late3 waits for a tick
    assert audit.depth == 1
    clock.advance(1.0)
    store.held.pop(0).callback(1)
    assert [r.key for r in store.written] == [
        "q0", "q1", "q2", "q3", "late0", "late1", "late2", "late3"]


def test_a_failing_batch_is_retried_then_dropped(
    clock: Clock, events: list[dict[str, Any]]
) -> None:
    store = FakeStore()
    audit = make_log(store, clock, max_attempts=3)
    audit.startService()
    audit.record("Op", key="a")
    store.failures = 2
    clock.advance(1.0)
    clock.advance(1.0)
    assert store.written == [] and audit.depth == 1
    clock.advance(1.0)
    assert [r.key for r in store.written] == ["a"]
    assert audit.failed_writes == 2 and audit.queue.dropped == 0

    audit.record("Op", key="b")
    store.failures = 3
    for _ in range(3):
        clock.advance(1.0)
    assert audit.queue.dropped == 1 and audit.depth == 0
    audit.record("Op", key="c")
    clock.advance(1.0)
    assert [r.key for r in store.written] == ["a", "c"]


def test_stop_flushes_what_is_queued(clock: Clock) -> None:
    store = FakeStore()
    audit = make_log(store, clock)
    audit.startService()
    for n in range(5):
        audit.record("Op", key=f"k{n}")
    stopped = audit.stopService()
    assert stopped.called
    assert len(store.written) == 5
    assert not clock.getDelayedCalls()


def test_stop_waits_for_a_write_in_progress(clock: Clock) -> None:
    store = FakeStore()
    store.hold = True
    audit = make_log(store, clock)
    audit.startService()
    audit.record("Op", key="a")
    clock.advance(1.0)
    audit.record("Op", key="b")
    stopped = audit.stopService()
    assert not stopped.called
    store.held.pop(0).callback(1)
    store.held.pop(0).callback(1)
    assert stopped.called
    assert [r.key for r in store.written] == ["a", "b"]


def test_disabled_log_records_nothing_but_still_purges(clock: Clock) -> None:
    store = FakeStore()
    audit = make_log(store, clock, enabled=False, retention_days=2)
    audit.record("Op")
    audit.add(AuditRecord(ts=START, operation="GetObject"))
    audit.startService()
    clock.advance(1.0)
    assert store.batches == []
    assert store.purges == [START - 2 * 86400]


def test_purge_survives_errors_and_loops_over_full_batches(
    clock: Clock, events: list[dict[str, Any]]
) -> None:
    store = FakeStore()
    store.purge_results = [RuntimeError("boom"), PURGE_BATCH, PURGE_BATCH, 7]
    audit = make_log(store, clock, retention_days=1, purge_interval_seconds=3600)
    audit.startService()
    assert len(store.purges) == 1
    assert any(e.get("log_failure") for e in events)
    clock.advance(3600)
    assert len(store.purges) == 4  # two full batches, then a short one
    clock.advance(3600)
    assert len(store.purges) == 5


def test_bounded_queue_takes_oldest_first() -> None:
    queue: BoundedQueue[int] = BoundedQueue(3, clock=lambda: 0.0)
    for n in range(5):
        queue.put(n)
    assert (len(queue), queue.dropped) == (3, 2)
    assert queue.take(2) == [2, 3]
    assert queue.take(5) == [4]
    with pytest.raises(ValueError):
        BoundedQueue(0, clock=lambda: 0.0)


def test_stopping_a_log_never_started_does_nothing(clock: Clock) -> None:
    store = FakeStore()
    audit = make_log(store, clock)
    audit.record("Op")
    assert audit.stopService().called
    assert store.batches == []
