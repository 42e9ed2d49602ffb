"""The replication journal's rows (node-local, `schema.replication_journal`): adding the
entries of an outbox page (idempotent: a page delivered again adds nothing), the work of
the worker (the first PENDING entry of each key and destination, in id order, so a key's
changes leave in the order they were made), its outcomes, the admin listing and retry,
and the counts the metrics show. Both backends; no Twisted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database, changes_objects
from objstore.meta.dialect import read_transaction, write_transaction
from objstore.meta.driver import CoreRows
from objstore.meta.object_write_queries import next_seq
from objstore.meta.schema import loads_dict

_j = schema.replication_journal
_o = schema.objects
MAX_PAGE = 1000
FIELDS = tuple(c.name for c in _j.c)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    id: int
    seq: int
    created_at: float
    updated_at: float
    kind: str
    operation: str
    bucket: str
    key: str
    version_id: str
    size: int
    etag: str
    rule_id: str
    endpoint: str
    dest_bucket: str
    region: str
    credential_ref: str
    storage_class: str | None
    status: str
    attempts: int
    next_attempt_at: float
    last_error: str | None

    @property
    def lane(self) -> tuple[str, str, str, str]:
        """What must leave in order: one key to one destination."""
        return (self.bucket, self.key, self.endpoint, self.dest_bucket)


def _entry(row: Any) -> JournalEntry:
    return JournalEntry(**{**row, "id": int(row["id"]), "seq": int(row["seq"]),
                           "size": int(row["size"]), "attempts": int(row["attempts"]),
                           "created_at": float(row["created_at"]),
                           "updated_at": float(row["updated_at"]),
                           "next_attempt_at": float(row["next_attempt_at"])})


def journal_add(db: Database, entries: Sequence[Mapping[str, Any]]) -> int:
    """Insert entries (dicts of the columns but id) that are not there yet (same seq, rule
    and destination); returns how many were added."""
    if not entries:
        return 0
    added = 0
    with write_transaction(db.engine) as conn:
        for values in entries:
            found = conn.execute(sa.select(_j.c.id).where(
                _j.c.seq == values["seq"], _j.c.rule_id == values["rule_id"],
                _j.c.endpoint == values["endpoint"],
                _j.c.dest_bucket == values["dest_bucket"])).first()
            if found is None:
                conn.execute(sa.insert(_j).values(**values))
                added += 1
    return added


def journal_pending(db: Database, limit: int, due_by: float | None = None
                    ) -> list[JournalEntry]:
    """The oldest PENDING entries (id order), at most `limit`. With `due_by`: only the
    first PENDING entry of each lane (one key to one destination) and only when it is due
    by then, so a lane backing off holds its later entries back without hiding other
    lanes' work behind it."""
    query = sa.select(_j).where(_j.c.status == "PENDING")
    if due_by is not None:
        earlier = _j.alias("earlier")
        query = query.where(_j.c.next_attempt_at <= due_by, ~sa.exists().where(
            earlier.c.status == "PENDING", earlier.c.bucket == _j.c.bucket,
            earlier.c.key == _j.c.key, earlier.c.endpoint == _j.c.endpoint,
            earlier.c.dest_bucket == _j.c.dest_bucket, earlier.c.id < _j.c.id))
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query.order_by(_j.c.id).limit(max(1, limit))).mappings().all()
    return [_entry(row) for row in rows]


def journal_update(db: Database, entry_id: int, *, status: str, attempts: int,
                   next_attempt_at: float, last_error: str | None, now: float) -> None:
    with write_transaction(db.engine) as conn:
        conn.execute(sa.update(_j).where(_j.c.id == entry_id).values(
            status=status, attempts=attempts, next_attempt_at=next_attempt_at,
            last_error=last_error, updated_at=now))


@dataclass(frozen=True, slots=True)
class VersionState:
    """What the journal's consumer needs of a version: its tags and replication status."""

    tags: dict[str, str]
    replication_status: str | None


def version_states(db: Database, versions: Sequence[tuple[str, str, str]]
                   ) -> dict[tuple[str, str, str], VersionState]:
    """The state of each (bucket, key, version_id) that exists, in one read transaction."""
    found: dict[tuple[str, str, str], VersionState] = {}
    with read_transaction(db.engine) as conn:
        for bucket, key, version_id in dict.fromkeys(versions):
            row = conn.execute(sa.select(_o.c.tags, _o.c.replication_status).where(
                _o.c.bucket == bucket, _o.c.key == key, _o.c.version_id == version_id)
            ).mappings().first()
            if row is not None:
                tags = loads_dict(row["tags"])
                found[(bucket, key, version_id)] = VersionState(tags,
                                                                row["replication_status"])
    return found


@changes_objects
def journal_finish(db: Database, entry: JournalEntry, *, status: str, attempts: int,
                   next_attempt_at: float, last_error: str | None, now: float,
                   stamp: str | None) -> None:
    """An entry's outcome and, with `stamp`, the x-amz-replication-status of its version
    (only while that version still holds the bytes sent, the entry's ETag, and is not a
    replica), in one transaction."""
    with write_transaction(db.engine) as conn:
        conn.execute(sa.update(_j).where(_j.c.id == entry.id).values(
            status=status, attempts=attempts, next_attempt_at=next_attempt_at,
            last_error=last_error, updated_at=now))
        if stamp is None:
            return
        where = sa.and_(_o.c.bucket == entry.bucket, _o.c.key == entry.key,
                        _o.c.version_id == entry.version_id, _o.c.etag == entry.etag,
                        _o.c.replication_status.is_not(None),
                        _o.c.replication_status != "REPLICA",
                        _o.c.replication_status != stamp)
        if conn.execute(sa.select(_o.c.seq).where(where)).first() is None:
            return
        conn.execute(sa.update(_o).where(where).values(replication_status=stamp,
                                                       seq=next_seq(CoreRows(conn))))


def journal_retry(db: Database, entry_id: int, now: float) -> JournalEntry | None:
    """Make an entry PENDING again, due now, its attempts counted from zero; None when
    there is no such entry."""
    with write_transaction(db.engine) as conn:
        conn.execute(sa.update(_j).where(_j.c.id == entry_id).values(
            status="PENDING", attempts=0, next_attempt_at=now, updated_at=now))
        row = conn.execute(sa.select(_j).where(_j.c.id == entry_id)).mappings().first()
    return None if row is None else _entry(row)


@dataclass(frozen=True)
class JournalFilter:
    bucket: str | None = None
    key: str | None = None
    status: str | None = None
    before_id: int | None = None  # keyset pagination: entries older than this id
    limit: int = 100


def journal_list(db: Database, where: JournalFilter) -> tuple[list[JournalEntry], int]:
    """(one page newest first, the total matching the filter without pagination)."""
    conditions = []
    if where.bucket:
        conditions.append(_j.c.bucket == where.bucket)
    if where.key:
        conditions.append(_j.c.key == where.key)
    if where.status:
        conditions.append(_j.c.status == where.status)
    with read_transaction(db.engine) as conn:
        total = int(conn.execute(sa.select(sa.func.count()).select_from(_j)
                                 .where(*conditions)).scalar_one())
        page = list(conditions)
        if where.before_id is not None:
            page.append(_j.c.id < where.before_id)
        rows = conn.execute(sa.select(_j).where(*page).order_by(_j.c.id.desc())
                            .limit(max(1, min(where.limit, MAX_PAGE)))).mappings().all()
    return [_entry(row) for row in rows], total


def journal_purge(db: Database, before: float, limit: int = 5000) -> int:
    """Delete up to `limit` COMPLETED or SKIPPED entries last changed before `before`
    (FAILED ones stay until retried or the operator looks); returns how many."""
    with write_transaction(db.engine) as conn:
        ids = conn.execute(sa.select(_j.c.id).where(
            _j.c.status.in_(("COMPLETED", "SKIPPED")), _j.c.updated_at < before)
            .order_by(_j.c.id).limit(limit)).scalars().all()
        if not ids:
            return 0
        return int(conn.execute(sa.delete(_j).where(_j.c.id.in_(ids))).rowcount or 0)


def journal_counts(db: Database) -> dict[str, int]:
    """Entries by status, and the creation time of the oldest PENDING one (key
    "oldest_pending_at", 0 when none)."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_j.c.status, sa.func.count())
                            .group_by(_j.c.status)).all()
        oldest = conn.execute(sa.select(sa.func.min(_j.c.created_at))
                              .where(_j.c.status == "PENDING")).scalar()
    counts = {str(status): int(count) for status, count in rows}
    counts["oldest_pending_at"] = int(oldest or 0)
    return counts


__all__ = ["JournalEntry", "JournalFilter", "VersionState", "journal_finish",
           "version_states", "journal_add", "journal_counts", "journal_list",
           "journal_pending", "journal_purge", "journal_retry", "journal_update"]
