"""Maintenance jobs and their logs (the `maintenance_jobs` and `maintenance_job_logs`
tables): create, read, list, move between states, record progress and log.

Node-local: never replicated, exported or imported. Which moves are allowed is
`meta/job_records.py`'s; every move here is a compare-and-set in one write transaction (the
status read and changed together), so an operator's pause and the worker's progress update
never overwrite each other: the worker's updates only apply while the job is running. At most
one job is active (the unique `active` column), also between two nodes' processes sharing a
database. No Twisted here.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from objstore.meta import job_records as rules
from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, write_transaction
from objstore.meta.job_records import JobLogEntry, JobRecord

_j = schema.maintenance_jobs
_l = schema.maintenance_job_logs


class JobActive(Exception):
    """Another job is active (pending, running or paused): its id."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} is active")
        self.job_id = job_id


class MoveRefused(Exception):
    """The move is not allowed from the job's current status."""

    def __init__(self, status: str) -> None:
        super().__init__(f"not allowed from {status}")
        self.status = status


def _job(row: Any) -> JobRecord:
    return JobRecord(
        id=str(row.id), job_type=str(row.job_type), status=str(row.status),
        mode=str(row.mode), params=schema.loads_dict(row.params), total=int(row.total),
        done=int(row.done), rate=float(row.rate), cursor=row.cursor,
        last_error=row.last_error, created_at=float(row.created_at),
        updated_at=float(row.updated_at),
        started_at=None if row.started_at is None else float(row.started_at),
        finished_at=None if row.finished_at is None else float(row.finished_at),
        runner=row.runner)


def _active_flag(status: str) -> int | None:
    return 1 if rules.is_active(status) else None


def create_job(db: Database, job: JobRecord) -> JobRecord:
    """Store a new job (its status pending); JobActive when another job is active."""
    now = db.clock()
    values = {
        "id": job.id, "job_type": job.job_type, "status": job.status, "mode": job.mode,
        "params": schema.dumps_json(dict(job.params)), "active": _active_flag(job.status),
        "total": job.total, "done": 0, "rate": 0.0, "cursor": None, "last_error": None,
        "created_at": now, "updated_at": now, "started_at": None, "finished_at": None,
    }
    try:
        with write_transaction(db.engine) as conn:
            active = conn.execute(sa.select(_j.c.id).where(_j.c.active == 1)).scalar()
            if active is not None:
                raise JobActive(str(active))
            conn.execute(sa.insert(_j).values(**values))
    except sa_exc.IntegrityError:  # another process created one meanwhile
        raise JobActive(_active_id(db) or "?") from None
    found = get_job(db, job.id)
    assert found is not None
    return found


def _active_id(db: Database) -> str | None:
    found = active_job(db)
    return None if found is None else found.id


def get_job(db: Database, job_id: str) -> JobRecord | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_j).where(_j.c.id == job_id)).first()
    return None if row is None else _job(row)


def active_job(db: Database) -> JobRecord | None:
    """The job that is pending, running or paused, if any."""
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_j).where(_j.c.active == 1)).first()
    return None if row is None else _job(row)


def list_jobs(db: Database, limit: int = 50) -> list[JobRecord]:
    """The newest `limit` jobs, newest first."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_j).order_by(_j.c.created_at.desc(), _j.c.id.desc())
                            .limit(limit)).all()
    return [_job(row) for row in rows]


def move_job(db: Database, job_id: str, move: str, *, error: str | None = None
             ) -> JobRecord | None:
    """Apply `move` (job_records: pause, resume, cancel, start, complete, fail) to the job:
    its new record; None when there is no such job; MoveRefused when the rules refuse the
    move from its current status. `error` is recorded as last_error (fail)."""
    now = db.clock()
    with write_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_j).where(_j.c.id == job_id)).first()
        if row is None:
            return None
        target = rules.next_status(str(row.status), move)
        if target is None:
            raise MoveRefused(str(row.status))
        values: dict[str, Any] = {"status": target, "active": _active_flag(target),
                                  "updated_at": now}
        if target == rules.RUNNING and row.started_at is None:
            values["started_at"] = now
        if target in rules.TERMINAL:
            values["finished_at"] = now
        if target != rules.RUNNING:
            values["rate"] = 0.0
        if error is not None:
            values["last_error"] = error[:rules.LOG_MESSAGE_MAX]
        conn.execute(sa.update(_j).where(_j.c.id == job_id).values(**values))
    return get_job(db, job_id)


def claim_job(db: Database, job_id: str, runner: str) -> bool:
    """Record that node `runner` runs the job now (while it is running); False otherwise."""
    with write_transaction(db.engine) as conn:
        result = conn.execute(
            sa.update(_j).where(_j.c.id == job_id, _j.c.status == rules.RUNNING).values(
                runner=runner, updated_at=db.clock()))
    return bool(result.rowcount)


def record_progress(db: Database, job_id: str, *, cursor: str | None, done: int, total: int,
                    rate: float) -> bool:
    """Store a running job's progress; False (nothing written) when the job is no longer
    running (paused or cancelled meanwhile): the worker then stops it."""
    with write_transaction(db.engine) as conn:
        result = conn.execute(
            sa.update(_j).where(_j.c.id == job_id, _j.c.status == rules.RUNNING).values(
                cursor=cursor, done=done, total=total, rate=rate, updated_at=db.clock()))
    return bool(result.rowcount)


def append_job_log(db: Database, job_id: str, level: str, message: str) -> None:
    """Add a log entry to the job, dropping its oldest beyond LOG_ENTRIES_MAX."""
    with write_transaction(db.engine) as conn:
        conn.execute(sa.insert(_l).values(job_id=job_id, ts=db.clock(), level=level,
                                          message=message[:rules.LOG_MESSAGE_MAX]))
        keep = (sa.select(_l.c.id).where(_l.c.job_id == job_id)
                .order_by(_l.c.id.desc()).limit(rules.LOG_ENTRIES_MAX))
        conn.execute(sa.delete(_l).where(_l.c.job_id == job_id,
                                         _l.c.id.not_in(keep)))


def job_logs(db: Database, job_id: str) -> list[JobLogEntry]:
    """The job's log entries, oldest first."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_l.c.ts, _l.c.level, _l.c.message)
                            .where(_l.c.job_id == job_id).order_by(_l.c.id)).all()
    return [JobLogEntry(float(ts), str(level), str(message)) for ts, level, message in rows]
