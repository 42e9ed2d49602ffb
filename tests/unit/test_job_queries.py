"""The maintenance-job queries (meta/job_queries.py) on SQLite and PostgreSQL: one active
job, moves as compare-and-set, progress only while running, bounded logs, newest-first
listing, and the upgrade of a version-5 database."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from objstore.engine import job_rules as rules
from objstore.engine.job_rules import JobRecord
from objstore.meta import migrations, schema
from objstore.meta.job_queries import JobActive, MoveRefused
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    FakeClock,
    backend,
    db_engine,
    make_engine,
    meta_store,
    postgres_database,
)


def new_job(job_type: str = "noop", mode: str = "live", n: int = 5) -> JobRecord:
    return JobRecord(id=str(uuid.uuid4()), job_type=job_type, status=rules.PENDING,
                     mode=mode, params={"n": n, "delay_ms": 0})


def test_create_and_read_back(meta_store: SyncMetaStore) -> None:  # noqa: F811
    job = meta_store.create_job(new_job(mode="maintenance"))
    assert (job.status, job.mode, job.params, job.done, job.total) == (
        "pending", "maintenance", {"n": 5, "delay_ms": 0}, 0, 0)
    assert job.started_at is None and job.finished_at is None and job.cursor is None
    assert meta_store.get_job(job.id) == job
    assert meta_store.active_job() == job
    assert meta_store.get_job(str(uuid.uuid4())) is None


def test_one_active_job_at_a_time(meta_store: SyncMetaStore) -> None:  # noqa: F811
    first = meta_store.create_job(new_job())
    for status_move in (None, rules.PAUSE):
        if status_move:
            meta_store.move_job(first.id, status_move)
        with pytest.raises(JobActive) as refused:
            meta_store.create_job(new_job())
        assert refused.value.job_id == first.id
    meta_store.move_job(first.id, rules.CANCEL)
    assert meta_store.active_job() is None
    second = meta_store.create_job(new_job())
    assert meta_store.active_job() == second


def test_the_unique_index_holds_even_past_the_check(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.create_job(new_job())
    row = {"id": "x", "job_type": "noop", "status": "pending", "mode": "live", "params": "{}",
           "active": 1, "created_at": 1.0, "updated_at": 1.0}
    with pytest.raises(sa.exc.IntegrityError), meta_store.engine.begin() as conn:
        conn.execute(sa.insert(schema.maintenance_jobs).values(**row))


def test_moves_follow_the_rules(meta_store: SyncMetaStore) -> None:  # noqa: F811
    job = meta_store.create_job(new_job())
    with pytest.raises(MoveRefused) as refused:
        meta_store.move_job(job.id, rules.RESUME)
    assert refused.value.status == "pending"
    started = meta_store.move_job(job.id, rules.START)
    assert started is not None and started.status == "running" and started.started_at
    paused = meta_store.move_job(job.id, rules.PAUSE)
    assert paused is not None and paused.status == "paused"
    resumed = meta_store.move_job(job.id, rules.RESUME)
    assert resumed is not None and resumed.started_at == started.started_at
    failed = meta_store.move_job(job.id, rules.FAIL, error="boom")
    assert failed is not None and (failed.status, failed.last_error) == ("failed", "boom")
    assert failed.finished_at is not None
    for move in rules.OPERATOR_MOVES:
        with pytest.raises(MoveRefused):
            meta_store.move_job(job.id, move)
    assert meta_store.move_job(str(uuid.uuid4()), rules.PAUSE) is None


def test_progress_is_recorded_only_while_running(meta_store: SyncMetaStore) -> None:  # noqa: F811
    job = meta_store.create_job(new_job())
    assert not meta_store.record_progress(job.id, cursor="1", done=1, total=5, rate=1.0)
    meta_store.move_job(job.id, rules.START)
    assert meta_store.record_progress(job.id, cursor="3", done=3, total=5, rate=2.5)
    found = meta_store.get_job(job.id)
    assert found is not None and (found.cursor, found.done, found.total, found.rate) == (
        "3", 3, 5, 2.5)
    meta_store.move_job(job.id, rules.PAUSE)
    assert not meta_store.record_progress(job.id, cursor="4", done=4, total=5, rate=1.0)
    kept = meta_store.get_job(job.id)
    assert kept is not None and (kept.cursor, kept.done, kept.rate) == ("3", 3, 0.0)


def test_list_is_newest_first_and_limited(meta_store: SyncMetaStore) -> None:  # noqa: F811
    ids = []
    for _ in range(4):
        job = meta_store.create_job(new_job())
        meta_store.move_job(job.id, rules.CANCEL)
        ids.append(job.id)
    assert [j.id for j in meta_store.list_jobs(50)] == ids[::-1]
    assert [j.id for j in meta_store.list_jobs(2)] == ids[:1:-1]


def test_logs_are_kept_in_order_and_bounded(meta_store: SyncMetaStore) -> None:  # noqa: F811
    job = meta_store.create_job(new_job())
    other = str(uuid.uuid4())
    meta_store.append_job_log(other, "info", "another job's")
    for i in range(rules.LOG_ENTRIES_MAX + 5):
        meta_store.append_job_log(job.id, "info", f"entry {i}")
    meta_store.append_job_log(job.id, "error", "x" * 5000)
    logs = meta_store.job_logs(job.id)
    assert len(logs) == rules.LOG_ENTRIES_MAX
    assert logs[0].message == "entry 6" and logs[-1].level == "error"
    assert len(logs[-1].message) == rules.LOG_MESSAGE_MAX
    assert [e.message for e in meta_store.job_logs(other)] == ["another job's"]


def test_a_version_5_database_gains_the_job_tables(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:5])
        with engine.begin() as conn:  # a new database is built from today's metadata
            schema.maintenance_job_logs.drop(conn)
            schema.maintenance_jobs.drop(conn)
        assert not sa.inspect(engine).has_table("maintenance_jobs")
        assert migrations.migrate(engine, migrations.MIGRATIONS[:6]) == [6]
        store = SyncMetaStore(engine, clock=FakeClock())
        job = store.create_job(new_job())
        assert store.active_job() == job
    finally:
        engine.dispose()


def test_a_version_7_database_gains_the_job_runner(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, migrations.MIGRATIONS[:7])
        with engine.begin() as conn:  # a new database is built from today's metadata
            conn.execute(sa.text("ALTER TABLE maintenance_jobs DROP COLUMN runner"))
        assert 9 in migrations.migrate(engine)
        store = SyncMetaStore(engine, clock=FakeClock())
        job = store.create_job(new_job())
        store.move_job(job.id, rules.START)
        assert store.claim_job(job.id, "node-a")
        assert store.active_job().runner == "node-a"  # type: ignore[union-attr]
    finally:
        engine.dispose()
