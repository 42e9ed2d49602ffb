"""The control-plane merge against a row of this node that takes a unique value between
the merge's read and its write (meta/control_snapshot_queries.py `_upsert_unless_taken`):
on PostgreSQL (READ COMMITTED) a job created here meanwhile made the peer's active job
fail the `active` unique constraint and the whole pass with it. Now the peer's job is
passed over as a conflict, the rest of the snapshot is merged, and the next pass, once
this node's job ended, takes it. Real PostgreSQL; SQLite takes the write lock at the
merge's start, so the race can not happen there (and the test would wait on it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from objstore.meta import control_snapshot_queries as queries
from objstore.meta.job_records import CANCEL, PENDING, JobRecord
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    FakeClock,
    make_engine,
    postgres_database,
)
from tests.unit.test_metastore import bucket_record


@pytest.fixture
def local(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SyncMetaStore]:
    engine = make_engine("postgres", tmp_path, request)
    store = SyncMetaStore(engine, clock=FakeClock())
    store.migrate()
    try:
        yield store
    finally:
        store.close()
        engine.dispose()


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[SyncMetaStore]:
    engine = make_engine("sqlite", tmp_path / "peer", None)  # type: ignore[arg-type]
    store = SyncMetaStore(engine, clock=FakeClock())
    store.migrate()
    try:
        yield store
    finally:
        store.close()
        engine.dispose()


def job(job_id: str) -> JobRecord:
    return JobRecord(id=job_id, job_type="noop", status=PENDING, mode="live", params={"n": 1})


def test_a_job_created_here_during_the_merge_keeps_the_pass(
        local: SyncMetaStore, peer: SyncMetaStore, monkeypatch: pytest.MonkeyPatch) -> None:
    peer.create_job(job("peer-job"))
    assert peer.create_bucket(bucket_record("from-peer"))
    snapshot = peer.control_state()
    real_plan = queries.plan

    def plan_then_a_local_job(*args: Any, **kwargs: Any) -> Any:
        decided = real_plan(*args, **kwargs)
        if local.active_job() is None:  # committed between the merge's read and write
            local.create_job(job("local-job"))
        return decided

    monkeypatch.setattr(queries, "plan", plan_then_a_local_job)
    outcome = local.merge_control_snapshot(snapshot)
    assert outcome.conflicts >= 1 and "job" not in outcome.written
    active = local.active_job()
    assert active is not None and active.id == "local-job"
    assert local.get_job("peer-job") is None
    assert local.get_bucket("from-peer") is not None  # the rest of the pass stands

    monkeypatch.setattr(queries, "plan", real_plan)
    local.move_job("local-job", CANCEL)
    local.merge_control_snapshot(snapshot)
    taken = local.active_job()
    assert taken is not None and taken.id == "peer-job"
