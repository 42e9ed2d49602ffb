"""The node-local queue of bucket notification deliveries (`notification_events`, one row
per (event, target)) for both backends:

- `notification_enqueue`: the rows of an outbox page AND the consumer's outbox cursor, in
  one transaction (a crash leaves both or neither: every event is queued exactly once);
- `notification_due`: the oldest pending rows of one target (delivery is in id order per
  target: a row in backoff holds back the rows after it);
- `notification_attempted`: one attempt's outcome (delivered, retry at, failed), its error
  appended to the row's `errors`; `notification_delivered`: rows delivered at once (one
  transaction for a run of successes);
- `notification_pending_targets`, `notification_queue_figures` (depth and oldest pending
  age per target), `notification_purge` (delivered and failed rows past retention),
  `query_notification_events` (the admin view: filters, keyset pages newest first).

The statements run for every event (the enqueue's inserts, the due rows, the delivered
marks) are compiled once and run with the driver's own parameters (meta/driver.py).
No Twisted here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, write_transaction
from objstore.meta.driver import CoreRows, driver_transaction

_n = schema.notification_events
_cur = schema.outbox_cursors
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
STATUSES = (PENDING, DELIVERED, FAILED)
MAX_PAGE = 1000
PURGE_BATCH = 5000
MAX_ERRORS_KEPT = 20  # attempts' errors kept per row (the first ones and the last)


@dataclass(frozen=True, slots=True)
class NewDelivery:
    seq: int
    target: str
    bucket: str
    key: str
    event_name: str
    body: str


@dataclass(frozen=True, slots=True)
class NotificationEvent:
    id: int
    seq: int
    target: str
    bucket: str
    key: str
    event_name: str
    body: str
    status: str
    attempts: int
    errors: tuple[dict[str, Any], ...]
    created_at: float
    next_attempt_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class NotificationFilter:
    bucket: str = ""
    status: str = ""
    target: str = ""
    before_id: int | None = None  # keyset page: rows with a smaller id
    limit: int = 100


@dataclass(frozen=True, slots=True)
class QueueFigures:
    depth: dict[str, int] = field(default_factory=dict)
    oldest: dict[str, float] = field(default_factory=dict)  # created_at of the oldest


_EVENT_COLUMNS = ("id", "seq", "target", "bucket", "key", "event_name", "body", "status",
                  "attempts", "errors", "created_at", "next_attempt_at", "updated_at")
DUE = (sa.select(*(_n.c[name] for name in _EVENT_COLUMNS))
       .where(_n.c.status == PENDING, _n.c.target == sa.bindparam("p_target"))
       .order_by(_n.c.id).limit(sa.bindparam("p_limit")))


def _errors(text: str | None) -> tuple[dict[str, Any], ...]:
    try:  # most rows have none: no parse for them
        return tuple(json.loads(text)) if text and text != "[]" else ()
    except ValueError:
        return ()


def _event(row: Any) -> NotificationEvent:
    return NotificationEvent(
        id=int(row["id"]), seq=int(row["seq"]), target=row["target"], bucket=row["bucket"],
        key=row["key"], event_name=row["event_name"], body=row["body"], status=row["status"],
        attempts=int(row["attempts"]), errors=_errors(row["errors"]),
        created_at=float(row["created_at"]), next_attempt_at=float(row["next_attempt_at"]),
        updated_at=float(row["updated_at"]))


def _event_of_tuple(row: Sequence[Any]) -> NotificationEvent:
    """A row of `_EVENT_COLUMNS`, as the driver returned it."""
    (id_, seq, target, bucket, key, event_name, body, status, attempts, errors, created_at,
     next_attempt_at, updated_at) = row
    return NotificationEvent(int(id_), int(seq), target, bucket, key, event_name, body, status,
                             int(attempts), _errors(errors), float(created_at),
                             float(next_attempt_at), float(updated_at))


READ_CURSOR = (sa.select(_cur.c.cursor).where(_cur.c.consumer == sa.bindparam("p_consumer"))
               .with_for_update())
INSERT_CURSOR = sa.insert(_cur).values(consumer=sa.bindparam("p_consumer"),
                                       cursor=sa.bindparam("p_cursor"))
MOVE_CURSOR = (sa.update(_cur).where(_cur.c.consumer == sa.bindparam("p_consumer"))
               .values(cursor=sa.bindparam("p_cursor")))


def notification_enqueue(db: Database, consumer: str, upto_seq: int,
                         rows: Sequence[NewDelivery], now: float) -> None:
    """Queue `rows` and move `consumer`'s outbox cursor to `upto_seq`, in one transaction;
    nothing when the cursor is already there (a page delivered again after a crash).
    Statements compiled once, the rows inserted by multi-row INSERTs. The cursor
    row is read under its lock (FOR UPDATE on PostgreSQL; SQLite's transaction holds the
    write lock) and then updated, or inserted when there was none (one consumer queues:
    a second inserting it at the same time fails on the key, and its page is read again)."""
    with driver_transaction(db.engine) as tx:
        current = tx.first(READ_CURSOR, {"p_consumer": consumer})
        if current is not None and int(current[0]) >= upto_seq:
            return
        if rows:
            tx.insert_many(_n, [
                {"seq": r.seq, "target": r.target, "bucket": r.bucket, "key": r.key,
                 "event_name": r.event_name, "body": r.body, "status": PENDING,
                 "attempts": 0, "errors": "[]", "created_at": now,
                 "next_attempt_at": now, "updated_at": now} for r in rows])
        tx.execute(INSERT_CURSOR if current is None else MOVE_CURSOR,
                   {"p_consumer": consumer, "p_cursor": upto_seq})


def notification_pending_targets(db: Database) -> list[str]:
    with read_transaction(db.engine) as conn:
        return sorted(conn.execute(sa.select(_n.c.target).where(_n.c.status == PENDING)
                                   .distinct()).scalars())


def notification_due(db: Database, target: str, now: float, limit: int
                     ) -> list[NotificationEvent]:
    """The oldest pending rows of `target`, in id order, when the oldest is due; empty
    while it waits for its retry. A statement compiled once, rows as tuples (read for
    every delivery run)."""
    with read_transaction(db.engine) as conn:
        rows = CoreRows(conn).all(DUE, {"p_target": target, "p_limit": max(1, limit)})
    if not rows or float(rows[0][_EVENT_COLUMNS.index("next_attempt_at")]) > now:
        return []
    return [_event_of_tuple(row) for row in rows]


def notification_attempted(db: Database, event_id: int, status: str, error: str,
                           next_attempt_at: float, now: float) -> None:
    """Record one attempt of row `event_id`: its new status, its error (appended to the
    row's errors when not empty) and when to try next."""
    with write_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_n.c.attempts, _n.c.errors).where(
            _n.c.id == event_id)).mappings().first()
        if row is None:
            return
        values: dict[str, Any] = {"status": status, "attempts": int(row["attempts"]) + 1,
                                  "next_attempt_at": next_attempt_at, "updated_at": now}
        if error:
            try:
                errors = list(json.loads(row["errors"] or "[]"))
            except ValueError:
                errors = []
            errors.append({"at": now, "attempt": int(row["attempts"]) + 1, "error": error})
            if len(errors) > MAX_ERRORS_KEPT:
                errors = errors[:MAX_ERRORS_KEPT // 2] + errors[-MAX_ERRORS_KEPT // 2:]
            values["errors"] = json.dumps(errors)
        conn.execute(sa.update(_n).where(_n.c.id == event_id).values(**values))


MARK_DELIVERED = (sa.update(_n).where(_n.c.id == sa.bindparam("p_id"))
                  .values(status=sa.bindparam("p_status"),
                          attempts=_n.c.attempts + sa.literal_column("1"),
                          updated_at=sa.bindparam("p_now"),
                          next_attempt_at=sa.literal_column("0.0")))


def notification_delivered(db: Database, event_ids: Sequence[int], now: float) -> None:
    """Mark rows delivered at their first successful attempt, in one transaction: one
    statement compiled once, run by the driver for every id (a run's marks are most of
    the queue's writes)."""
    if not event_ids:
        return
    with driver_transaction(db.engine) as rows:
        rows.execute_many(MARK_DELIVERED, [{"p_id": event_id, "p_status": DELIVERED,
                                            "p_now": now} for event_id in event_ids])


def notification_queue_figures(db: Database) -> QueueFigures:
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_n.c.target, sa.func.count(), sa.func.min(_n.c.created_at))
                            .where(_n.c.status == PENDING).group_by(_n.c.target)).all()
    return QueueFigures({r[0]: int(r[1]) for r in rows}, {r[0]: float(r[2]) for r in rows})


def notification_purge(db: Database, before: float, batch_size: int = PURGE_BATCH) -> int:
    """Delete at most `batch_size` delivered or failed rows last changed before `before`."""
    doomed = sa.select(_n.c.id).where(_n.c.status != PENDING, _n.c.updated_at < before) \
        .limit(max(1, batch_size))
    with write_transaction(db.engine) as conn:
        result = conn.execute(sa.delete(_n).where(_n.c.id.in_(doomed.scalar_subquery())))
    return int(result.rowcount or 0)


def query_notification_events(db: Database, query: NotificationFilter
                              ) -> list[NotificationEvent]:
    """At most `query.limit` (capped at MAX_PAGE + 1) matching rows, newest first."""
    limit = max(0, min(query.limit, MAX_PAGE + 1))
    if limit == 0:
        return []
    conditions = []
    if query.bucket:
        conditions.append(_n.c.bucket == query.bucket)
    if query.status:
        conditions.append(_n.c.status == query.status)
    if query.target:
        conditions.append(_n.c.target == query.target)
    if query.before_id is not None:
        conditions.append(_n.c.id < query.before_id)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_n).where(*conditions).order_by(_n.c.id.desc())
                            .limit(limit)).mappings().all()
    return [_event(row) for row in rows]


__all__ = ["DELIVERED", "FAILED", "MAX_PAGE", "PENDING", "STATUSES", "NewDelivery",
           "NotificationEvent", "NotificationFilter", "QueueFigures", "notification_attempted",
           "notification_delivered", "notification_due", "notification_enqueue",
           "notification_pending_targets",
           "notification_purge", "notification_queue_figures", "query_notification_events"]
