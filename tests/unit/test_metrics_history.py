"""The metrics history timer without a reactor: samples per interval from the running
totals, storage figures from the cached snapshot, retention purge, and a timer that
survives a failing database."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import Logger

from objstore import timers as timers_module
from objstore.meta.metrics_queries import MetricsSample
from objstore.metrics.history import MetricsHistory
from objstore.metrics.registry import RequestTotals
from objstore.metrics.storage import StorageFigures

START = 1_700_000_000.0


class FakeHistoryStore:
    def __init__(self) -> None:
        self.samples: list[MetricsSample] = []
        self.purged_before: list[float] = []
        self.failures = 0

    def insert_metrics_sample(self, sample: MetricsSample) -> Deferred[None]:
        if self.failures:
            self.failures -= 1
            return defer.fail(RuntimeError("database unavailable"))
        self.samples.append(sample)
        return defer.succeed(None)

    def purge_metrics_history(self, before_ts: float) -> Deferred[int]:
        self.purged_before.append(before_ts)
        return defer.succeed(0)


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    monkeypatch.setattr(timers_module, "log", Logger(observer=found.append))
    return found


def make(store: FakeHistoryStore, totals: RequestTotals,
         figures: list[StorageFigures | None]) -> tuple[MetricsHistory, Clock]:
    clock = Clock()
    clock.advance(START)
    history = MetricsHistory(
        store, totals=lambda: totals, storage=lambda: figures[0], node_id="node-a",
        clock=clock, interval_seconds=60, retention_hours=2,
    )
    return history, clock


def test_samples_hold_the_figures_of_their_interval() -> None:
    store = FakeHistoryStore()
    totals = RequestTotals()
    figures: list[StorageFigures | None] = [None]
    history, clock = make(store, totals, figures)
    history.startService()
    assert store.samples == []  # the first tick only takes the starting point
    totals.requests, totals.errors, totals.server_errors = 10, 3, 1
    totals.bytes_in, totals.bytes_out = 100, 2000
    figures[0] = StorageFigures(START, 2, 7, 7000, ())
    clock.advance(60)
    totals.requests += 5
    clock.advance(60)
    first, second = store.samples
    assert first == MetricsSample(
        ts=START + 60, node_id="node-a", interval_seconds=60, requests=10, errors=3,
        server_errors=1, bytes_in=100, bytes_out=2000, buckets=2, objects=7, stored_bytes=7000)
    assert (second.requests, second.errors, second.bytes_out) == (5, 0, 0)
    assert store.purged_before == [START + 60 - 7200, START + 120 - 7200]


def test_a_failing_database_does_not_stop_the_timer(quiet: list[dict[str, Any]]) -> None:
    store = FakeHistoryStore()
    history, clock = make(store, RequestTotals(), [None])
    history.startService()
    store.failures = 1
    clock.advance(60)
    assert store.samples == [] and quiet
    clock.advance(60)
    assert len(store.samples) == 1
    history.stopService()
    assert not clock.getDelayedCalls()
