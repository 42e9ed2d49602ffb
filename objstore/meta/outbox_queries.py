"""The durable outbox's rows: the entry an object change leaves for the outbox's consumers,
written inside the change's own transaction (`record`, run by the object-row writes of
`object_write_queries.py` when the caller passes an `OutboxNote`), and each consumer's
cursor (`outbox_read_after`, `outbox_cursor`, `outbox_advance`, `outbox_backlog`,
`outbox_purge`).

Why a table and not the objects' seq alone (which the anti-entropy manifest reads): an
overwrite of the same version (every PUT of an unversioned key) replaces the row, so the
replaced row's event would be gone before a consumer saw it, a tag or lock change is not
told apart from a new version, and a row carries neither the principal, the source
address nor the request id an event names. The entry is keyed by the change's seq, taken
first in its transaction under the counter row's lock (`next_seq`), so entries are
commit-ordered on both backends exactly as the manifest is: a page reads the counter
first, then entries up to it, and nothing at or below that counter can commit later.

A note may be conditional (`stale` set: the engine judged the bucket of no consumer's
interest from its cache, engine/outbox_interest.py): the transaction then leaves the entry
only when `stale()` says a bucket configuration changed on the node since that judgement
AND the bucket holds one of the note's `documents` now.

A transaction that fails leaves no entry (it is the same transaction). No Twisted here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, upsert, write_transaction
from objstore.meta.driver import CoreRows, RowSource
from objstore.meta.records import ObjectRecord

_x = schema.outbox
_cur = schema.outbox_cursors
_counter = schema.seq_counter
_configs = schema.bucket_config
MAX_OUTBOX_PAGE = 1000

INSERT_ENTRY = sa.insert(_x).values({c.name: sa.bindparam(f"p_{c.name}") for c in _x.c})


@dataclass(frozen=True, slots=True)
class OutboxNote:
    """What the engine adds to a change for its outbox entry: the change's kind
    (`ChangeKind` value) and who asked (the `Caller`'s principal user id, source address,
    request id and operation name)."""

    kind: str
    operation: str = ""
    principal: str = ""
    source_address: str = ""
    request_id: str = ""
    # Set for a bucket judged of no interest: see the module docstring.
    stale: Callable[[], bool] | None = None
    documents: tuple[str, ...] = ()


# Compiled once per dialect (meta/driver.py), so a fixed number of keys, padded.
_DOCUMENT_SLOTS = 4
HAS_DOCUMENT = (sa.select(_configs.c.bucket)
                .where(_configs.c.bucket == sa.bindparam("p_bucket"),
                       _configs.c.key.in_([sa.bindparam(f"p_key{i}")
                                           for i in range(_DOCUMENT_SLOTS)])))


def _holds_document(rows: RowSource, bucket: str, documents: tuple[str, ...]) -> bool:
    if not documents:
        return False
    keys = (list(documents) + [documents[0]] * _DOCUMENT_SLOTS)[:_DOCUMENT_SLOTS]
    assert len(documents) <= _DOCUMENT_SLOTS
    return rows.first(HAS_DOCUMENT, {"p_bucket": bucket,
                                     **{f"p_key{i}": k for i, k in enumerate(keys)}}) is not None


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One change to deliver; `seq` is its place in commit order (the event's sequencer)."""

    seq: int
    kind: str
    operation: str
    bucket: str
    key: str
    version_id: str
    size: int
    etag: str
    is_delete_marker: bool
    principal: str
    source_address: str
    request_id: str
    event_time: float


@dataclass(frozen=True, slots=True)
class OutboxPage:
    entries: tuple[OutboxEntry, ...]
    max_seq: int  # the seq counter when the page was read: the cursor may move up to it


def record(rows: RowSource, seq: int, stored: ObjectRecord, note: OutboxNote,
           now: float) -> None:
    """Leave the entry of the change `stored` (the row written, or the row a deletion
    removed) under `seq`, in the caller's transaction (a conditional note: only if the
    bucket turned out to hold one of its documents)."""
    if note.stale is not None and (
            not note.stale() or not _holds_document(rows, stored.bucket, note.documents)):
        return
    rows.execute(INSERT_ENTRY, {
        "p_seq": seq, "p_kind": note.kind, "p_operation": note.operation,
        "p_bucket": stored.bucket, "p_key": stored.key, "p_version_id": stored.version_id,
        "p_size": stored.size, "p_etag": stored.etag or "",
        "p_is_delete_marker": stored.is_delete_marker, "p_principal": note.principal,
        "p_source_address": note.source_address, "p_request_id": note.request_id,
        "p_event_time": now,
    })


_ENTRY_COLUMNS = ("seq", "kind", "operation", "bucket", "key", "version_id", "size", "etag",
                  "is_delete_marker", "principal", "source_address", "request_id",
                  "event_time")  # OutboxEntry's fields, in order
READ_COUNTER = sa.select(_counter.c.value).where(_counter.c.name == sa.bindparam("p_name"))
READ_AFTER = (sa.select(*(_x.c[name] for name in _ENTRY_COLUMNS))
              .where(_x.c.seq > sa.bindparam("p_cursor"), _x.c.seq <= sa.bindparam("p_max"))
              .order_by(_x.c.seq).limit(sa.bindparam("p_limit")))


def outbox_read_after(db: Database, cursor: int, limit: int) -> OutboxPage:
    """Entries above `cursor`, in commit order, at most `limit` (1..MAX_OUTBOX_PAGE). The
    counter and the entries are read in one snapshot, by statements compiled once (the
    rows as tuples: a page is read for every consumer on every tick)."""
    limit = max(1, min(limit, MAX_OUTBOX_PAGE))
    with read_transaction(db.engine) as conn:
        rows = CoreRows(conn)
        counter = rows.first(READ_COUNTER, {"p_name": schema.OBJECTS_SEQ_NAME})
        assert counter is not None, "the seq counter row is missing"
        max_seq = int(counter[0])
        found = rows.all(READ_AFTER, {"p_cursor": cursor, "p_max": max_seq, "p_limit": limit})
    entries = tuple(OutboxEntry(int(seq), kind, operation, bucket, key, version_id, int(size),
                                etag, bool(delete_marker), principal, source_address,
                                request_id, float(event_time))
                    for (seq, kind, operation, bucket, key, version_id, size, etag,
                         delete_marker, principal, source_address, request_id, event_time)
                    in found)
    return OutboxPage(entries, max_seq)


def outbox_cursor(db: Database, consumer: str) -> int:
    """The consumer's cursor; 0 (every entry still kept) for a consumer never seen."""
    with read_transaction(db.engine) as conn:
        value = conn.execute(sa.select(_cur.c.cursor).where(
            _cur.c.consumer == consumer)).scalar()
    return 0 if value is None else int(value)


def outbox_advance(db: Database, consumer: str, seq: int) -> None:
    """Move the consumer's cursor to `seq` (never back). A cursor already there (the
    notification consumer moves its own in the transaction that queues its page) is
    seen by a read, without taking the write lock: a cursor never moves back."""
    if outbox_cursor(db, consumer) >= seq:
        return
    with write_transaction(db.engine) as conn:
        current = conn.execute(sa.select(_cur.c.cursor).where(
            _cur.c.consumer == consumer)).scalar()
        if current is not None and int(current) >= seq:
            return
        upsert(conn, _cur, {"consumer": consumer, "cursor": seq}, ["consumer"])


def outbox_backlog(db: Database, consumers: list[str]) -> int:
    """Entries some of `consumers` has not passed yet (0 without consumers)."""
    if not consumers:
        return 0
    low = _lowest_cursor(db, consumers)
    with read_transaction(db.engine) as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(_x)
                                .where(_x.c.seq > low)).scalar_one())


def outbox_purge(db: Database, consumers: list[str]) -> int:
    """Delete the entries every one of `consumers` has passed; returns how many. Without
    consumers nothing is deleted (entries wait for the first one registered)."""
    if not consumers:
        return 0
    low = _lowest_cursor(db, consumers)
    with write_transaction(db.engine) as conn:
        return int(conn.execute(sa.delete(_x).where(_x.c.seq <= low)).rowcount or 0)


def _lowest_cursor(db: Database, consumers: list[str]) -> int:
    return min(outbox_cursor(db, name) for name in consumers)
