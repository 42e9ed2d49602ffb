"""The audit log's part of the metadata store: the record of one audited operation, the
filter of a query, and the three queries (insert a batch, read a page newest first, purge
old rows) for both backends.

Each query is a function of a `Database` over the `audit_log` table. Pages are keyset
pages on (ts, id) descending, so a query stays one index range scan however deep the
caller pages. A purge deletes a bounded batch per transaction: a first purge of a large
table must not hold SQLite's single writer for long. Nothing here imports Twisted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, write_transaction
from objstore.meta.driver import driver_transaction

MAX_PAGE = 1000
PURGE_BATCH = 5000

# Value types kept in `details` (JSON).
Detail = str | int | float | bool


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audited operation. Empty strings mean "not known" (stored as NULL)."""

    ts: float
    operation: str
    node_id: str = ""
    request_id: str = ""
    user_id: str = ""
    username: str = ""
    access_key: str = ""
    bucket: str = ""
    key: str = ""
    source_ip: str = ""
    status: int = 200
    error_code: str = ""
    duration_ms: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0
    user_agent: str = ""
    details: Mapping[str, Detail] = field(default_factory=dict)
    id: int | None = None  # assigned by the database


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """A page of the audit log, newest first. `user` matches a username or a user id;
    `since` is inclusive, `until` exclusive; `before` is the (ts, id) of the last row of the
    previous page."""

    bucket: str | None = None
    operation: str | None = None
    user: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 100
    before: tuple[float, int] | None = None


def _text(value: str) -> str | None:
    return value or None


def audit_values(record: AuditRecord) -> dict[str, Any]:
    return {
        "ts": record.ts,
        "node_id": _text(record.node_id),
        "request_id": _text(record.request_id),
        "user_id": _text(record.user_id),
        "username": _text(record.username),
        "access_key": _text(record.access_key),
        "operation": record.operation,
        "bucket": _text(record.bucket),
        "key": _text(record.key),
        "source_ip": _text(record.source_ip),
        "status": record.status,
        "error_code": _text(record.error_code),
        "duration_ms": record.duration_ms,
        "bytes_in": record.bytes_in,
        "bytes_out": record.bytes_out,
        "user_agent": _text(record.user_agent),
        "details": schema.dumps_json(dict(record.details)) if record.details else None,
    }


def audit_record(row: Mapping[Any, Any]) -> AuditRecord:
    details = json.loads(row["details"]) if row["details"] else {}
    return AuditRecord(
        id=int(row["id"]),
        ts=float(row["ts"]),
        node_id=row["node_id"] or "",
        request_id=row["request_id"] or "",
        user_id=row["user_id"] or "",
        username=row["username"] or "",
        access_key=row["access_key"] or "",
        operation=row["operation"],
        bucket=row["bucket"] or "",
        key=row["key"] or "",
        source_ip=row["source_ip"] or "",
        status=int(row["status"] or 0),
        error_code=row["error_code"] or "",
        duration_ms=float(row["duration_ms"] or 0.0),
        bytes_in=int(row["bytes_in"] or 0),
        bytes_out=int(row["bytes_out"] or 0),
        user_agent=row["user_agent"] or "",
        details=details if isinstance(details, dict) else {},
    )


def _conditions(query: AuditFilter) -> list[sa.ColumnElement[bool]]:
    a = schema.audit_log
    found: list[sa.ColumnElement[bool]] = []
    if query.bucket:
        found.append(a.c.bucket == query.bucket)
    if query.operation:
        found.append(a.c.operation == query.operation)
    if query.user:
        found.append(sa.or_(a.c.username == query.user, a.c.user_id == query.user))
    if query.since is not None:
        found.append(a.c.ts >= query.since)
    if query.until is not None:
        found.append(a.c.ts < query.until)
    if query.before is not None:
        ts, row_id = query.before
        found.append(sa.or_(a.c.ts < ts, sa.and_(a.c.ts == ts, a.c.id < row_id)))
    return found


def insert_audit_records(db: Database, records: Sequence[AuditRecord]) -> int:
    """Insert a batch in one transaction; returns the number of rows written."""
    if not records:
        return 0
    with driver_transaction(db.engine) as tx:
        tx.insert_many(schema.audit_log, [audit_values(r) for r in records])
    return len(records)


def query_audit(db: Database, query: AuditFilter) -> list[AuditRecord]:
    """At most `query.limit` matching rows, newest first (capped at one more than
    MAX_PAGE, which lets a caller tell whether a full page has a successor)."""
    a = schema.audit_log
    limit = max(0, min(query.limit, MAX_PAGE + 1))
    if limit == 0:
        return []
    select = (
        sa.select(a)
        .where(*_conditions(query))
        .order_by(a.c.ts.desc(), a.c.id.desc())
        .limit(limit)
    )
    with read_transaction(db.engine) as conn:
        rows = conn.execute(select).mappings().all()
    return [audit_record(r) for r in rows]


def purge_audit(db: Database, before_ts: float, batch_size: int = PURGE_BATCH) -> int:
    """Delete at most `batch_size` rows older than `before_ts`; returns how many."""
    a = schema.audit_log
    doomed = sa.select(a.c.id).where(a.c.ts < before_ts).limit(max(1, batch_size))
    with write_transaction(db.engine) as conn:
        result = conn.execute(sa.delete(a).where(a.c.id.in_(doomed.scalar_subquery())))
    return int(result.rowcount or 0)
