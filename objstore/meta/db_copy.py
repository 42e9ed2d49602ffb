"""The `migrate-db` job's copy: every table of the metadata database, from the node's
backend to the other one (SQLite <-> PostgreSQL), row for row (but the usage counters, which the
target's triggers keep and the copy recomputes at its end), and the node-local file that
switches the node to the copy at its next start.

The target is brought to the current schema first (meta/migrations.py); a target that
already holds buckets, objects, users or settings is refused unless `force` (then every
row it holds is deleted first). Tables are copied in dependency order, in pages, each
table in one transaction; PostgreSQL's id sequences are moved past the copied ids. The
job's own row is written to the target as completed (the node must not run it again there).

Writes that arrive during the copy would be lost by the switch: the copy compares the
source's object sequence counter and the row counts of its durable tables (not the audit
log, the metrics history or the jobs) before and after, and refuses to switch when they
moved (`WritesDuringCopy`): run it in maintenance mode with the traffic stopped.

The switch (`write_override`): `<data_dir>/control/metadata-backend.json` (0600: it may
hold a PostgreSQL password) names the backend and URL that the config loader then uses
instead of `[storage] metadata_backend` and `postgres_url` (objstore/config.py
`apply_metadata_override`), with a warning at each start until the operator has copied
them into the config file and removed it. Blocking: a DB thread or the CLI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from objstore.meta import schema, usage_counters
from objstore.meta.migrations import migrate
from objstore.private_files import OWNER_ONLY_FILE, make_private_dir

PAGE = 1000
OVERRIDE_NAME = "metadata-backend.json"
# Tables a running node writes on its own (requests' audit, figures, the job's progress):
# copied, but not part of the check for writes during the copy.
_BUSY = frozenset({"audit_log", "metrics_history", "maintenance_jobs",
                   "maintenance_job_logs", "schema_version"})
# What makes a target "not empty" (force needed).
_CONTENT = ("buckets", "objects", "users", "settings", "grants", "teams")


class TargetNotEmpty(Exception):
    pass


class WritesDuringCopy(Exception):
    pass


# Derived tables: not copied; the target's triggers keep them while its rows are written
# (and the copy ends by recomputing them).
_DERIVED = frozenset({"schema_version", schema.bucket_usage.name})


def _tables() -> list[sa.Table]:
    return [t for t in schema.metadata.sorted_tables if t.name not in _DERIVED]


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: int(conn.execute(sa.select(sa.func.count()).select_from(t))
                            .scalar_one())
                for t in _tables() if t.name not in _BUSY}


def _state(engine: Engine) -> tuple[Any, dict[str, int]]:
    with engine.connect() as conn:
        seq = conn.execute(sa.select(schema.seq_counter)).all()
    return [tuple(row) for row in seq], _counts(engine)


def copy_database(source: Engine, target: Engine, *, force: bool, job_id: str | None,
                  finished_at: float, progress: Callable[[int, int], None] | None = None
                  ) -> int:
    """Copy every table; returns the number of rows copied. Raises TargetNotEmpty,
    WritesDuringCopy."""
    migrate(target)
    with target.connect() as conn:
        held = {name: int(conn.execute(sa.select(sa.func.count())
                                       .select_from(schema.metadata.tables[name]))
                          .scalar_one()) for name in _CONTENT}
    if any(held.values()) and not force:
        found = ", ".join(f"{n} {name}" for name, n in held.items() if n)
        raise TargetNotEmpty(f"the target database is not empty ({found}); use force to "
                             "replace its content")
    before = _state(source)
    total = sum(before[1].values())
    copied = 0
    with target.begin() as conn:
        for table in reversed(_tables()):
            conn.execute(sa.delete(table))
    for table in _tables():
        order = list(table.primary_key.columns) or list(table.columns)
        with source.connect() as reading, target.begin() as writing:
            result = reading.execution_options(stream_results=True).execute(
                sa.select(table).order_by(*order))
            while True:
                rows = result.mappings().fetchmany(PAGE)
                if not rows:
                    break
                writing.execute(sa.insert(table), [dict(row) for row in rows])
                copied += len(rows)
                if progress is not None:
                    progress(copied, max(total, copied))
            if target.dialect.name == "postgresql":
                _advance_sequences(writing, table)
    with target.begin() as conn:
        usage_counters.rebuild(conn)
    if _state(source) != before:
        raise WritesDuringCopy("the source database changed during the copy (writes "
                               "arrived); run migrate-db again with the traffic stopped")
    if job_id is not None:
        with target.begin() as conn:
            jobs = schema.maintenance_jobs
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(
                status="completed", active=None, done=jobs.c.total, cursor=None,
                finished_at=finished_at, updated_at=finished_at))
    return copied


def _advance_sequences(conn: sa.Connection, table: sa.Table) -> None:
    for column in table.primary_key.columns:
        if column.autoincrement is True:
            conn.execute(sa.text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', '{column.name}'), "
                f"COALESCE((SELECT MAX({column.name}) FROM {table.name}), 0) + 1, false)"))


def override_path(data_dir: str) -> str:
    return os.path.join(data_dir, "control", OVERRIDE_NAME)


def write_override(data_dir: str, backend: str, postgres_url: str | None, *, job_id: str,
                   at: float) -> str:
    """The node-local switch to `backend` at the next start (atomic, 0600)."""
    path = override_path(data_dir)
    make_private_dir(os.path.dirname(path))
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, OWNER_ONLY_FILE)
    try:
        os.write(fd, json.dumps({"metadata_backend": backend, "postgres_url": postgres_url,
                                 "written_by_job": job_id, "written_at": at},
                                indent=2).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path
