"""Versioned schema migrations for the metadata database.

This module owns the ordered list of migrations and the runner that applies the pending ones,
recording each in `schema_version`. It never drops data it does not understand and never runs
from the reactor thread.

Rules for adding a migration: append `Migration(version=N+1, ...)` whose function brings a
database at version N to exactly what `schema.metadata.create_all` now produces. A brand-new
database is created from the current metadata in one step and stamped with every version, so
old migration functions never run against the new metadata.

Two processes starting at once are safe: the whole run is one transaction that first takes
an exclusive lock (PostgreSQL: `pg_advisory_xact_lock`; SQLite: `BEGIN IMMEDIATE`), so the
second process waits and then finds nothing to do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from objstore.meta import schema, usage_counters
from objstore.meta.dialect import write_transaction

# Arbitrary constant identifying "objstore schema migration" among advisory locks.
MIGRATION_LOCK_ID = 0x6F626A7374_01


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _create_initial_schema(conn: Connection) -> None:
    schema.metadata.create_all(conn, checkfirst=True)
    _ensure_seq_counter(conn)
    usage_counters.install(conn)


def _ensure_seq_counter(conn: Connection) -> None:
    row = conn.execute(
        sa.select(schema.seq_counter.c.value).where(
            schema.seq_counter.c.name == schema.OBJECTS_SEQ_NAME
        )
    ).first()
    if row is None:
        conn.execute(sa.insert(schema.seq_counter).values(name=schema.OBJECTS_SEQ_NAME, value=0))


def _add_metrics_history(conn: Connection) -> None:
    """Version 2: the metrics_history table and audit_log.details."""
    schema.metrics_history.create(conn, checkfirst=True)
    columns = {c["name"] for c in sa.inspect(conn).get_columns(schema.audit_log.name)}
    if "details" not in columns:
        conn.execute(sa.text("ALTER TABLE audit_log ADD COLUMN details TEXT"))


def _add_completed_uploads(conn: Connection) -> None:
    """Version 3: the completed_uploads table (answers to retried completions)."""
    schema.completed_uploads.create(conn, checkfirst=True)


def _add_sync_cursors(conn: Connection) -> None:
    """Version 4: the sync_cursors table (anti-entropy's cursor toward each peer)."""
    schema.sync_cursors.create(conn, checkfirst=True)


def _add_tags_updated_at(conn: Connection) -> None:
    """Version 5: objects.tags_updated_at (when a version's tags last changed; existing
    rows NULL: the tags they were written with, older than any change)."""
    _add_column(conn, schema.objects.c.tags_updated_at)


def _add_stages_updated_at(conn: Connection) -> None:
    """Version 14: objects.stages_updated_at (when a maintenance job last rewrote how a
    version is stored; existing rows NULL: as written)."""
    _add_column(conn, schema.objects.c.stages_updated_at)


def _add_column(conn: Connection, column: sa.Column[object]) -> None:
    """ALTER TABLE ... ADD COLUMN for a nullable column of the metadata, unless present."""
    table = column.table.name
    if column.name in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
        return
    kind = column.type.compile(dialect=conn.dialect)
    conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column.name} {kind}"))


def _add_maintenance_jobs(conn: Connection) -> None:
    """Version 6: the maintenance_jobs and maintenance_job_logs tables."""
    schema.maintenance_jobs.create(conn, checkfirst=True)
    schema.maintenance_job_logs.create(conn, checkfirst=True)


def _add_job_runner(conn: Connection) -> None:
    """Version 9: maintenance_jobs.runner (the node that runs the job)."""
    _add_column(conn, schema.maintenance_jobs.c.runner)


def _add_outbox(conn: Connection) -> None:
    """Version 7: the outbox and outbox_cursors tables (the durable outbox)."""
    schema.outbox.create(conn, checkfirst=True)
    schema.outbox_cursors.create(conn, checkfirst=True)


def _add_part_encryption(conn: Connection) -> None:
    """Version 8: multipart_parts.encryption_params (each part of an encrypted upload has
    its own wrapped data key; existing rows NULL: parts stored as sent)."""
    _add_column(conn, schema.multipart_parts.c.encryption_params)


def _add_notification_events(conn: Connection) -> None:
    """Version 10: the notification_events table (bucket notification deliveries)."""
    schema.notification_events.create(conn, checkfirst=True)


def _add_replication_journal(conn: Connection) -> None:
    """Version 11: the replication_journal table (node-local)."""
    schema.replication_journal.create(conn, checkfirst=True)


def _add_object_acl(conn: Connection) -> None:
    """Version 12: objects.acl (a version's ACL; existing rows NULL: the owner's
    FULL_CONTROL alone, what they had)."""
    _add_column(conn, schema.objects.c.acl)


def _add_usage_counters(conn: Connection) -> None:
    """Version 15: the bucket_usage table, the triggers on objects (and buckets) that keep
    it, and its first contents computed from the rows (in the migration's transaction,
    which keeps writers out, so no change falls between the count and the triggers)."""
    usage_counters.install(conn)
    usage_counters.rebuild(conn)


MIGRATIONS: Sequence[Migration] = (
    Migration(1, "initial schema", _create_initial_schema),
    Migration(2, "metrics history; audit details", _add_metrics_history),
    Migration(3, "completed multipart uploads", _add_completed_uploads),
    Migration(4, "anti-entropy sync cursors", _add_sync_cursors),
    Migration(5, "object tags stamp", _add_tags_updated_at),
    Migration(6, "maintenance jobs", _add_maintenance_jobs),
    Migration(7, "durable outbox", _add_outbox),
    Migration(8, "part encryption parameters", _add_part_encryption),
    Migration(9, "maintenance job runner", _add_job_runner),
    Migration(10, "notification events", _add_notification_events),
    Migration(11, "replication journal", _add_replication_journal),
    Migration(12, "object ACLs", _add_object_acl),
    Migration(14, "object stages stamp", _add_stages_updated_at),
    Migration(15, "bucket usage counters", _add_usage_counters),
)


def current_version(migrations: Sequence[Migration] = MIGRATIONS) -> int:
    return max((m.version for m in migrations), default=0)


def migrate(
    engine: Engine,
    migrations: Sequence[Migration] = MIGRATIONS,
    clock: Callable[[], float] = time.time,
) -> list[int]:
    """Bring the database to the newest version; returns the versions applied by this call
    (empty when the schema was already current). Idempotent and safe under concurrency."""
    _check_order(migrations)
    with write_transaction(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK_ID)))
        schema.schema_version.create(conn, checkfirst=True)
        applied = set(conn.execute(sa.select(schema.schema_version.c.version)).scalars())
        if not applied:
            # A new database: build today's schema at once and stamp every version.
            _create_initial_schema(conn)
            pending = list(migrations)
        else:
            pending = [m for m in migrations if m.version not in applied]
            for migration in pending:
                migration.apply(conn)
        for migration in pending:
            conn.execute(
                sa.insert(schema.schema_version).values(
                    version=migration.version,
                    description=migration.description,
                    applied_at=clock(),
                )
            )
        return [m.version for m in pending]


def applied_versions(engine: Engine) -> list[int]:
    """Versions recorded in schema_version, ascending (empty for a blank database)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(schema.schema_version.name):
            return []
        return sorted(conn.execute(sa.select(schema.schema_version.c.version)).scalars())


def _check_order(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    # Strictly increasing from 1; gaps are allowed (numbers are assigned ahead of merges).
    if versions != sorted(set(versions)) or (versions and versions[0] != 1):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order: {versions}")
