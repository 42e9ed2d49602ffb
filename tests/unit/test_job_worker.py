"""The maintenance-job worker (workers/jobs.py) on a `task.Clock` and a real SQLite store
answered synchronously: progress and rate, pause, resume, cancel, a restart that resumes
from the recorded cursor, a runner's failure, a type without a runner, stopping mid-wait,
and the maintenance watch the health check reads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import task
from twisted.internet.defer import Deferred, maybeDeferred

from objstore.engine import job_rules as rules
from objstore.engine.job_rules import JobRecord, Progress
from objstore.http.health import HealthState
from objstore.meta.dialect import create_db_engine
from objstore.meta.store import SyncMetaStore
from objstore.workers.jobs import JobContext, JobWorker, MaintenanceWatch, NoopRunner
from tests.unit.meta_fixtures import FakeClock


class Answered:
    """A SyncMetaStore whose methods answer fired Deferreds (as MetaStore's would)."""

    def __init__(self, store: SyncMetaStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        query = getattr(self.store, name)
        return lambda *args, **kwargs: maybeDeferred(query, *args, **kwargs)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SyncMetaStore]:
    engine = create_db_engine("sqlite", str(tmp_path / "meta" / "jobs.db"), None, 4)
    meta = SyncMetaStore(engine, clock=FakeClock())
    meta.migrate()
    try:
        yield meta
    finally:
        meta.close()


def noop(store: SyncMetaStore, n: int, delay_ms: int = 0, mode: str = "live") -> JobRecord:
    return store.create_job(JobRecord(id=str(uuid.uuid4()), job_type="noop",
                                      status=rules.PENDING, mode=mode,
                                      params={"n": n, "delay_ms": delay_ms}))


def started(store: SyncMetaStore, clock: task.Clock, **runners: Any) -> JobWorker:
    worker = JobWorker(store=Answered(store), clock=clock, **runners)  # type: ignore[arg-type]
    worker.startService()
    return worker


def job(store: SyncMetaStore, job_id: str) -> JobRecord:
    found = store.get_job(job_id)
    assert found is not None
    return found


def messages(store: SyncMetaStore, job_id: str) -> list[str]:
    return [entry.message for entry in store.job_logs(job_id)]


def test_a_noop_job_runs_to_completion_with_progress_and_rate(store: SyncMetaStore) -> None:
    clock = task.Clock()
    created = noop(store, 4, delay_ms=500)
    worker = started(store, clock)  # the first tick runs at once
    running = job(store, created.id)
    assert running.status == "running" and running.started_at is not None
    assert worker.current == created.id
    clock.advance(0.5)
    assert (job(store, created.id).done, job(store, created.id).total) == (1, 4)
    clock.advance(0.5)
    halfway = job(store, created.id)
    assert (halfway.done, halfway.cursor, halfway.rate) == (2, "2", 2.0)
    clock.pump([0.5, 0.5])
    finished = job(store, created.id)
    assert (finished.status, finished.done, finished.total) == ("completed", 4, 4)
    assert finished.finished_at is not None and finished.rate == 0.0
    assert worker.current is None
    assert messages(store, created.id) == ["started", "completed: 4 done"]
    worker.stopService()


def test_without_delay_steps_are_batched(store: SyncMetaStore) -> None:
    created = noop(store, 250)
    worker = started(store, task.Clock())
    assert (job(store, created.id).status, job(store, created.id).done) == ("completed", 250)
    worker.stopService()


def test_pause_resume_and_cancel(store: SyncMetaStore) -> None:
    clock = task.Clock()
    created = noop(store, 10, delay_ms=1000)
    worker = started(store, clock)
    clock.advance(1)
    store.move_job(created.id, rules.PAUSE)
    clock.advance(1)  # the step in progress ends; its progress is not recorded
    paused = job(store, created.id)
    assert (paused.status, paused.done) == ("paused", 1)
    assert worker.current is None
    clock.pump([1] * 5)  # ticks find the job paused: nothing runs
    assert job(store, created.id).done == 1
    store.move_job(created.id, rules.RESUME)
    clock.advance(1)  # the next tick resumes it from its cursor
    assert worker.current == created.id
    clock.pump([1, 1])
    assert job(store, created.id).done == 3
    store.move_job(created.id, rules.CANCEL)
    clock.pump([1] * 5)
    cancelled = job(store, created.id)
    assert (cancelled.status, cancelled.done) == ("cancelled", 3)
    assert worker.current is None
    assert "resumed at 1/10" in messages(store, created.id)
    worker.stopService()


def test_a_restart_resumes_from_the_recorded_cursor(store: SyncMetaStore) -> None:
    clock = task.Clock()
    created = noop(store, 5, delay_ms=1000)
    first = started(store, clock)
    clock.pump([1, 1, 1])
    stopped = first.stopService()  # cuts the wait short: the job stays running
    assert stopped.called
    kept = job(store, created.id)
    assert (kept.status, kept.done, kept.cursor) == ("running", 3, "3")
    steps: list[str | None] = []

    class Counting(NoopRunner):
        async def step(self, cursor: str | None) -> Progress:
            steps.append(cursor)
            return await super().step(cursor)

    later = task.Clock()
    second = started(store, later, runners={"noop": Counting})
    later.pump([1, 1])
    assert steps[0] == "3"
    finished = job(store, created.id)
    assert (finished.status, finished.done) == ("completed", 5)
    assert "resumed at 3/5" in messages(store, created.id)
    second.stopService()


def test_a_failing_runner_fails_its_job(store: SyncMetaStore) -> None:
    class Broken:
        def __init__(self, job: JobRecord, context: JobContext) -> None:
            pass

        async def step(self, cursor: str | None) -> Progress:
            raise OSError("disk on fire")

    created = noop(store, 3)
    worker = started(store, task.Clock(), runners={"noop": Broken})
    failed = job(store, created.id)
    assert failed.status == "failed" and failed.last_error == "OSError: disk on fire"
    assert messages(store, created.id)[-1] == "OSError: disk on fire"
    worker.stopService()


def test_a_type_without_a_runner_fails_with_a_message(store: SyncMetaStore) -> None:
    created = store.create_job(JobRecord(id=str(uuid.uuid4()), job_type="migrate-db",
                                         status=rules.PENDING, mode="live",
                                         params={"target": "sqlite"}))
    worker = started(store, task.Clock(), runners={"noop": NoopRunner})
    failed = job(store, created.id)
    assert failed.status == "failed" and "not available" in (failed.last_error or "")
    worker.stopService()


def test_a_cluster_node_fails_a_migrate_db_job_found_in_its_database(
        store: SyncMetaStore) -> None:
    """Created before the node joined a cluster (the API refuses it on a cluster node)."""
    created = store.create_job(JobRecord(id=str(uuid.uuid4()), job_type="migrate-db",
                                         status=rules.PENDING, mode="maintenance",
                                         params={"target": "sqlite"}))
    worker = started(store, task.Clock(), services={
        "sync_store": store, "storage": None, "io": None, "clustered": True})
    failed = job(store, created.id)
    assert failed.status == "failed" and "cluster" in (failed.last_error or "")
    worker.stopService()


def test_no_job_no_work(store: SyncMetaStore) -> None:
    clock = task.Clock()
    worker = started(store, clock)
    clock.pump([1] * 3)
    assert worker.current is None and store.list_jobs() == []
    worker.stopService()


def test_maintenance_mode_takes_the_node_out_while_running(store: SyncMetaStore) -> None:
    clock = task.Clock()
    watch = MaintenanceWatch(Answered(store))  # type: ignore[arg-type]
    health = HealthState(maintenance_job=watch)

    def refresh() -> None:
        d: Deferred[None] = Deferred.fromCoroutine(watch.refresh())
        assert d.called

    created = noop(store, 2, delay_ms=1000, mode="maintenance")
    refresh()
    assert health.status() == (200, "ok")  # pending: not running yet
    worker = started(store, clock)
    refresh()
    assert health.status() == (503, "maintenance")
    assert health.verbose()["maintenance_job"] == created.id
    clock.pump([1, 1])
    refresh()
    assert job(store, created.id).status == "completed"
    assert health.status() == (200, "ok") and "maintenance_job" not in health.verbose()
    worker.stopService()


def test_a_live_job_keeps_the_node_in(store: SyncMetaStore) -> None:
    clock = task.Clock()
    watch = MaintenanceWatch(Answered(store))  # type: ignore[arg-type]
    noop(store, 2, delay_ms=1000)
    worker = started(store, clock)
    Deferred.fromCoroutine(watch.refresh())
    assert watch() is None and HealthState(maintenance_job=watch).status() == (200, "ok")
    worker.stopService()


def test_the_worker_leader_role_given_up_and_taken_again(store: SyncMetaStore) -> None:
    from objstore.roles import LeaderDuties

    clock = task.Clock()
    duties = LeaderDuties(held=True)
    worker = JobWorker(store=Answered(store), clock=clock)  # type: ignore[arg-type]
    worker.setServiceParent(duties)
    duties.startService()
    created = noop(store, 4, delay_ms=1000)
    clock.advance(1)  # the tick finds it
    clock.advance(1)
    assert job(store, created.id).done == 1
    given_up = duties.give_up()
    assert given_up.called and not worker.running  # the wait was cut short
    clock.pump([1] * 5)
    assert job(store, created.id).done == 1 and job(store, created.id).status == "running"
    duties.take()
    clock.pump([1] * 4)
    assert job(store, created.id).status == "completed"
    duties.stopService()
