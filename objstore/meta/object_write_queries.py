"""Every write of object rows, in one place: PutObject's row transaction (the hot path of
every PUT, copy and delete marker), the deletion of a version, the in-place update of a
version's mutable fields, the bulk insert of `objstore recover`, and the pieces that
CompleteMultipartUpload (`upload_queries.py`) runs inside its own transaction.

The rules of an object-row write exist once here: `next_seq` (the commit-ordered counter),
`check_write` (the precondition and the usage check), `insert_latest` (replace a row of
the same version, demote the previous latest, insert as latest; for a client's write,
stamped strictly after what it replaces: `restamp`), `promote_newest` (a new
latest after the latest went) and `unreferenced` (which blobs became orphans). They run
through a `RowSource` (meta/driver.py), so the PUT path executes them on a raw DBAPI
cursor with statements compiled once, and the other writes execute the same statements
inside their SQLAlchemy Core transaction. The last-writer-wins
apply of replicated rows (`object_apply_queries.py`) uses them too.

The order of the statements is the store's contract: the seq counter FIRST (its row lock is
the one lock every object writer queues on, which makes seq commit-ordered on PostgreSQL,
serialises writers of a key around the checks and rules out lock-order deadlocks), then
the bucket under FOR KEY SHARE (together with the configuration document of the usage rule
for a PUT: the quota, read under the same lock), the precondition, the usage check, the
stamps the write follows (a client's write), the replaced row, the demotion of the
previous latest, the insert.

The stamp of a client's change (`lww.stamp_after`, a hybrid logical clock per key): a new
version or delete marker (PUT, copy, CompleteMultipartUpload, DeleteObject) is stamped
max(its clock's stamp, 1 µs after the newest of the key's latest row, the row of the same
version it replaces and the tombstone of its register), read in its transaction; a version
delete's tombstone max(the database clock, 1 µs after the removed row). Those rows and
tombstones carry every stamp this node applied from a peer for the key, so no change is
stamped below anything this node has seen of its key, whatever its clock says. The caller
reads the stamp from the returned record (Last-Modified; the sidecar it wrote with the
clock's stamp is rewritten when it was raised). The apply of a peer's row keeps the
peer's stamp (`insert_latest` without `restamp`).

Every function that takes a seq is marked `changes_objects`. No Twisted here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from objstore.convergence import lww
from objstore.meta import schema, usage_counters
from objstore.meta.batch_statements import (
    DELETE_KNOWN_ROWS,
    NEWEST_REMAINING,
    delete_known_rows_values,
    newest_remaining_values,
)
from objstore.meta.database import Database, changes_objects
from objstore.meta.dialect import write_transaction
from objstore.meta.driver import (
    CoreRows,
    DriverTransaction,
    RowSource,
    driver_statement,
    driver_transaction,
)
from objstore.meta.errors import PreconditionNotMet, RecordNotFound, RowChanged
from objstore.meta.outbox_queries import OutboxNote
from objstore.meta.outbox_queries import record as record_outbox
from objstore.meta.records import DeleteResult, ObjectRecord, PutResult, WritePrecondition
from objstore.meta.tombstones import TOMBSTONE_OBJECT, object_tombstone_key

# A bucket's usage, (object version count, total bytes) as `bucket_usage` counts it.
Usage = tuple[int, int]
# Given the usage before and after a write, raises to refuse it (the engine's quota rule).
UsageCheck = Callable[[Usage, Usage], None]


class UsageRule(Protocol):
    """A limit on a bucket's usage set by one of the bucket's configuration documents (the
    engine's quota). The store reads the document inside the write transaction."""

    @property
    def config_key(self) -> str: ...

    def check_for(self, bucket: str, document: str) -> UsageCheck | None:
        """The check a write must pass under this document (None: no limit)."""
        ...


# Fields `update_object` may rewrite; the rest describe the stored bytes or the row's
# identity and stay as they are.
MUTABLE_OBJECT_FIELDS = (
    "content_type",
    "user_metadata",
    "system_headers",
    "storage_class",
    "tags",
    "retention_mode",
    "retain_until_date",
    "legal_hold_status",
    "lock_updated_at",
    "tags_updated_at",
    "acl",
    "replication_status",
)

_o = schema.objects
_b = schema.buckets
_c = schema.bucket_config
_counter = schema.seq_counter


def _param(name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(f"p_{name}")


def _named(values: dict[str, Any]) -> dict[str, Any]:
    return {f"p_{name}": value for name, value in values.items()}


_SAME_KEY = (_o.c.bucket == _param("bucket"), _o.c.key == _param("key"))
_SAME_VERSION = (*_SAME_KEY, _o.c.version_id == _param("version_id"))
_LIVE = _o.c.is_delete_marker == sa.false()

NEXT_SEQ = (
    sa.update(_counter)
    .where(_counter.c.name == _param("name"))
    .values(value=_counter.c.value + _param("count"))
    .returning(_counter.c.value)
)
_t = schema.tombstones
# What a client's new version of a key follows: the key's latest row, the register's
# tombstone (the null version's, or a version id deleted before).
_LATEST_STAMP = (sa.select(_o.c.last_modified).where(*_SAME_KEY, schema.LATEST_PREDICATE)
                 .scalar_subquery())
_TOMBSTONE_STAMP = sa.select(_t.c.deleted_at).where(
    _t.c.family == _param("family"), _t.c.key == _param("tombstone_key")).scalar_subquery()
STAMPS_SEEN = sa.select(_LATEST_STAMP, _TOMBSTONE_STAMP)
BUCKET = (
    sa.select(_b.c.name).where(_b.c.name == _param("bucket"))
    .with_for_update(read=True, key_share=True)
)
# PutObject's bucket check, which reads the stamps its write follows in the same
# statement (the hot path takes no extra round trip for them): name, the configuration
# document of the usage rule (NULL without one), the two stamps of STAMPS_SEEN.
PUT_BUCKET = (
    sa.select(_b.c.name, sa.null(), _LATEST_STAMP, _TOMBSTONE_STAMP)
    .where(_b.c.name == _param("bucket"))
    .with_for_update(of=_b, read=True, key_share=True)
)
PUT_BUCKET_WITH_DOCUMENT = (
    sa.select(
        _b.c.name,
        sa.select(_c.c.value)
        .where(_c.c.bucket == _param("bucket"), _c.c.key == _param("config_key"))
        .scalar_subquery(),
        _LATEST_STAMP,
        _TOMBSTONE_STAMP,
    )
    .where(_b.c.name == _param("bucket"))
    .with_for_update(of=_b, read=True, key_share=True)
)
LATEST_STATE = sa.select(_o.c.etag, _o.c.is_delete_marker).where(
    *_SAME_KEY, schema.LATEST_PREDICATE)
BUCKET_USAGE = usage_counters.BUCKET_USAGE  # the counters the objects table's triggers keep
REPLACED_SIZE = sa.select(_o.c.size).where(*_SAME_VERSION, _LIVE)
DELETE_VERSION = sa.delete(_o).where(*_SAME_VERSION).returning(_o.c.blob_id, _o.c.parts,
                                                                _o.c.last_modified)
DEMOTE_LATEST = (
    sa.update(_o).where(*_SAME_KEY, schema.LATEST_PREDICATE).values(is_latest=sa.false())
)
INSERT_OBJECT = sa.insert(_o).values({c.name: _param(c.name) for c in _o.c})


# -- the rules every object-row write shares --------------------------------------------


def next_seq(rows: RowSource, count: int = 1) -> int:
    """Advance the object counter by `count` and return its new value. The UPDATE holds the
    counter row's lock until commit, which is what makes seq commit-ordered."""
    row = rows.first(NEXT_SEQ, _named({"name": schema.OBJECTS_SEQ_NAME, "count": count}))
    assert row is not None, "the objects seq counter row is missing"
    return int(row[0])


def check_write(rows: RowSource, record: ObjectRecord, precondition: WritePrecondition | None,
                usage_check: UsageCheck | None) -> None:
    """The precondition, then the usage check, of storing `record` (under the seq row
    lock); raises PreconditionNotMet, or what `usage_check` raises."""
    if precondition is not None:
        check_precondition(rows, record, precondition)
    if usage_check is not None:
        check_usage(rows, record, usage_check)


def check_precondition(
    rows: RowSource, record: ObjectRecord, precondition: WritePrecondition
) -> None:
    """Raise PreconditionNotMet when `precondition` does not hold for the key's latest
    version."""
    current = rows.first(LATEST_STATE, {"p_bucket": record.bucket, "p_key": record.key})
    exists = current is not None and not current[1]
    if precondition.if_absent and exists:
        raise PreconditionNotMet("exists")
    if (precondition.if_none_match_etag is not None and exists and current is not None
            and current[0] == precondition.if_none_match_etag):
        raise PreconditionNotMet("exists")
    if precondition.if_match_etag is not None:
        if not exists:
            raise PreconditionNotMet("missing")
        assert current is not None
        if current[0] != precondition.if_match_etag:
            raise PreconditionNotMet("mismatch")


def check_usage(rows: RowSource, record: ObjectRecord, check: UsageCheck) -> None:
    """Run `check` on the bucket's usage before and after storing `record` (which replaces
    any row of the same version)."""
    totals = rows.first(BUCKET_USAGE, {"p_bucket": record.bucket})
    before = (0, 0) if totals is None else (int(totals[0]), int(totals[1]))
    replaced = rows.first(REPLACED_SIZE, {"p_bucket": record.bucket, "p_key": record.key,
                                          "p_version_id": record.version_id})
    after_count, after_bytes = before
    if replaced is not None:
        after_count, after_bytes = after_count - 1, after_bytes - int(replaced[0])
    if not record.is_delete_marker:
        after_count, after_bytes = after_count + 1, after_bytes + record.size
    check(before, (after_count, after_bytes))


def insert_latest(
    rows: RowSource, record: ObjectRecord, seq: int, *, restamp: bool = False,
    seen: Sequence[Any] | None = None,
) -> tuple[ObjectRecord, list[str | None]]:
    """Store `record` as the latest version of its key under `seq`, replacing a row of the
    same version. Returns the stored record and the blob ids the replaced row used.
    `restamp` (a client's write): its last_modified is raised to 1 µs after the key's
    latest row, the replaced row and the register's tombstone when it is not already
    after them (`lww.stamp_after`); `seen`: those two stamps (latest, tombstone) when the
    caller read them already in this transaction (STAMPS_SEEN's columns)."""
    same_key = {"p_bucket": record.bucket, "p_key": record.key}
    if restamp and seen is None:
        seen = rows.first(STAMPS_SEEN, {**same_key, **_seen_keys(record)})
        assert seen is not None
    replaced = rows.first(DELETE_VERSION, {**same_key, "p_version_id": record.version_id})
    if restamp:
        assert seen is not None
        stamp = lww.stamp_after(record.last_modified, _stamp(seen[0]), _stamp(seen[1]),
                                None if replaced is None else _stamp(replaced[2]))
        if stamp != record.last_modified:
            record = replace(record, last_modified=stamp)
    rows.execute(DEMOTE_LATEST, same_key)
    stored = replace(record, is_latest=True, seq=seq)
    rows.execute(INSERT_OBJECT, _named(schema.object_values(stored)))
    if replaced is None:
        return stored, []
    return stored, [replaced[0], *(p.blob_id for p in schema.part_refs(replaced[1]))]


def _seen_keys(record: ObjectRecord) -> dict[str, str]:
    """The parameters of STAMPS_SEEN besides the key's."""
    return {"p_family": TOMBSTONE_OBJECT,
            "p_tombstone_key": object_tombstone_key(record.bucket, record.key,
                                                    record.version_id)}


def _stamp(value: Any) -> float | None:
    return None if value is None else float(value)


def unreferenced(blob_ids: Sequence[str | None], record: ObjectRecord) -> tuple[str, ...]:
    """The given blob ids that `record` does not use, once each, in order (a retried
    identical write must not delete its own blob)."""
    kept = {record.blob_id, *(p.blob_id for p in record.parts)}
    return tuple(dict.fromkeys(b for b in blob_ids if b and b not in kept))


# -- the writes --------------------------------------------------------------------------


@changes_objects
def put_object(
    db: Database, record: ObjectRecord, precondition: WritePrecondition | None = None,
    usage_check: UsageCheck | None = None, usage_rule: UsageRule | None = None,
    outbox: OutboxNote | None = None,
) -> PutResult:
    """Store a version as the latest of its key, in one transaction: take a new seq,
    remove an existing row with the same (bucket, key, version_id) (its blob_id and the
    blob_ids of its parts become orphaned), mark the previous latest not-latest, insert
    the record with is_latest=True. A precondition that does not hold raises
    PreconditionNotMet and changes nothing; so does any exception `usage_check` raises
    (it is given the bucket's usage before and after the write), and so does the check
    `usage_rule` makes of the bucket's configuration document, read in the same
    transaction. Raises RecordNotFound when the bucket does not exist. `outbox`: leave
    the change's outbox entry in the same transaction (meta/outbox_queries.py).

    Runs on the driver with statements compiled once: the hot path of every PUT."""
    with driver_transaction(db.engine) as tx:
        seq = next_seq(tx)
        bucket = record.bucket
        keys = {"p_bucket": bucket, "p_key": record.key, **_seen_keys(record)}
        if usage_rule is None:
            found = tx.first(PUT_BUCKET, keys)
        else:
            found = tx.first(PUT_BUCKET_WITH_DOCUMENT,
                             {**keys, "p_config_key": usage_rule.config_key})
        if found is None:
            raise RecordNotFound(f"bucket {bucket!r}")
        if usage_rule is not None and found[1] is not None:
            ruled = usage_rule.check_for(bucket, str(found[1]))
            if ruled is not None:
                check_usage(tx, record, ruled)
        check_write(tx, record, precondition, usage_check)
        stored, old = insert_latest(tx, record, seq, restamp=True, seen=found[2:])
        if outbox is not None:
            record_outbox(tx, seq, stored, outbox, db.clock())
    return PutResult(record=stored, orphaned_blob_ids=unreferenced(old, stored))


def _object_pk(bucket: str, key: str, version_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(_o.c.bucket == bucket, _o.c.key == key, _o.c.version_id == version_id)


def _row_exists(conn: Connection, where: sa.ColumnElement[bool]) -> bool:
    return conn.execute(sa.select(_o.c.seq).where(where)).first() is not None


@changes_objects
def delete_object_version(
    db: Database, bucket: str, key: str, version_id: str, expected_seq: int | None = None,
    outbox: OutboxNote | None = None, known: ObjectRecord | None = None,
) -> DeleteResult:
    """Remove one version row (taking a new seq for any promoted row). When it was the
    latest, the newest remaining version (last_modified, then seq) becomes latest.

    The delete leaves an object tombstone carrying its own fresh seq, so the change cursor
    sees deletes too, stamped the database's clock raised to the removed row's
    last_modified (`lww.tombstone_stamp`: a row from a peer with a faster clock, or one
    `stamp_write` raised, must not outlive its own deletion when a late copy of it comes
    back); the stamp is returned (`DeleteResult.deleted_at`) for the fan-out to send.
    Nothing changes (no seq is used) when no row matched, or when `expected_seq` is given
    and the row's seq differs (RowChanged). `outbox`: the removed row's outbox entry, under
    the tombstone's seq, in the same transaction. `known`: the row as the caller read it
    with `expected_seq` (what is reported as removed, so the DELETE need not return it).

    The statements are `delete_object_versions`' (compiled once, run on the driver: the
    single DeleteObject is `aws s3 rm`'s request), one item in its own transaction."""
    item = VersionDelete(key, version_id, expected_seq, outbox,
                         known if known is not None and known.seq == expected_seq else None)
    try:
        with driver_transaction(db.engine) as tx:
            outcome = _DeleteBatch(db, tx, bucket).delete(item)
            if isinstance(outcome, RowChanged):
                raise outcome  # rolls back
            if outcome.removed is None:
                raise _NothingRemoved  # nothing to commit: roll back, no seq used
    except _NothingRemoved:
        return DeleteResult(removed=None)
    return outcome


@dataclass(frozen=True)
class VersionDelete:
    """One item of `delete_object_versions`: the version to remove, the seq it must still
    have (None: whatever it has), and its outbox entry's note."""

    key: str
    version_id: str
    expected_seq: int | None = None
    outbox: OutboxNote | None = None
    # The row as the caller read it, whose seq is `expected_seq`: what the outcome reports
    # as removed (with the row's is_latest, the one column a change of another version,
    # a demotion, rewrites without a fresh seq), so the DELETE need not return the row.
    known: ObjectRecord | None = None

    @classmethod
    def of(cls, record: ObjectRecord, outbox: OutboxNote | None = None) -> VersionDelete:
        """The delete of `record`'s version, guarded by its seq."""
        return cls(record.key, record.version_id, record.seq, outbox, record)


# One item's outcome in `delete_object_versions`: what `delete_object_version` returns,
# or the RowChanged it would raise (that item changed nothing).
VersionDeleteOutcome = DeleteResult | RowChanged

_COLUMNS = tuple(column.name for column in _o.c)
DELETE_ROW = sa.delete(_o).where(*_SAME_VERSION).returning(*_o.c)
DELETE_GUARDED_ROW = (sa.delete(_o).where(*_SAME_VERSION, _o.c.seq == _param("seq"))
                      .returning(*_o.c))
DELETE_KNOWN_ROW = (sa.delete(_o).where(*_SAME_VERSION, _o.c.seq == _param("seq"))
                    .returning(_o.c.is_latest))
ROW_EXISTS = sa.select(_o.c.seq).where(*_SAME_VERSION)
NEWEST_VERSION = (sa.select(_o.c.version_id).where(*_SAME_KEY)
                  .order_by(_o.c.last_modified.desc(), _o.c.seq.desc())
                  .limit(sa.literal_column("1")))
PROMOTE = (sa.update(_o).where(*_SAME_VERSION).values(is_latest=sa.true(), seq=_param("new_seq"))
           .returning(*_o.c))


def _leave_tombstone_statement(dialect: str) -> Any:
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_t).values(
        family=_param("family"), key=_param("tombstone_key"),
        deleted_at=_param("deleted_at"), seq=_param("seq"))
    return insert.on_conflict_do_update(
        index_elements=["family", "key"],
        set_={"deleted_at": insert.excluded.deleted_at, "seq": insert.excluded.seq})


# `tombstones.leave_tombstone`'s upsert, one statement per dialect (compiled once).
LEAVE_TOMBSTONE = {name: _leave_tombstone_statement(name) for name in ("sqlite", "postgresql")}


@changes_objects
def delete_object_versions(
    db: Database, bucket: str, items: Sequence[VersionDelete],
) -> list[VersionDeleteOutcome]:
    """`delete_object_version` for many versions of one bucket in ONE transaction (one
    commit, one sync: DeleteObjects), with an outcome per item, in order. Each item is
    checked then acted upon inside the transaction, exactly as the single delete does:
    a version that does not exist is `DeleteResult(None)`, one whose seq differs from
    its guard is a RowChanged outcome and changes nothing, and neither affects the other
    items. Each removed version leaves its tombstone (its own fresh seq, taken before the
    promotion of the key's newest remaining version, with its own), and its outbox entry,
    as the single delete leaves them; so a later item naming a version that an earlier
    one promoted finds its seq changed. Items naming the same version twice: the second
    finds nothing. Any other failure rolls the whole batch back and raises. Runs on the
    driver with statements compiled once (1,000 items a batch)."""
    outcomes: list[VersionDeleteOutcome] = []
    if not items:
        return outcomes
    try:
        with driver_transaction(db.engine) as tx:
            batch = _DeleteBatch(db, tx, bucket)
            if len({item.key for item in items}) == len(items):
                outcomes = batch.delete_distinct(items)
            else:
                outcomes = [batch.delete(item) for item in items]
            if batch.reserved is not None:
                raise _NothingRemoved  # nothing to commit: roll back, no seq used
    except _NothingRemoved:
        pass
    return outcomes


class _NothingRemoved(Exception):
    """A batch that removed no row rolls back (the seq it took is not used)."""


class _DeleteBatch:
    """The items of `delete_object_versions` in its transaction. The first seq is taken
    before anything else (the counter row's lock first, as every object writer takes
    it) and handed to the first removal; the others are taken when needed."""

    def __init__(self, db: Database, rows: DriverTransaction, bucket: str) -> None:
        self._db = db
        self._rows = rows
        self._bucket = bucket
        dialect = db.engine.dialect
        self._newest_defaults = driver_statement(dialect, NEWEST_VERSION).defaults
        self._tombstone = LEAVE_TOMBSTONE[dialect.name]
        self.reserved: int | None = next_seq(rows)

    def _seq(self) -> int:
        if self.reserved is None:
            return next_seq(self._rows)
        seq, self.reserved = self.reserved, None
        return seq

    def delete(self, item: VersionDelete) -> VersionDeleteOutcome:
        """One item, all of it: its row, its seq, the promotion, the tombstone."""
        removed = self._remove_row(item)
        if not isinstance(removed, ObjectRecord):
            return removed
        tombstone_seq = self._seq()
        new_latest = self._promote_newest(item.key) if removed.is_latest else None
        deleted_at = lww.tombstone_stamp(self._db.clock(), removed.last_modified)
        self._rows.execute(self._tombstone, self._tombstone_values(
            item, tombstone_seq, deleted_at))
        if item.outbox is not None:
            record_outbox(self._rows, tombstone_seq, removed, item.outbox, self._db.clock())
        return DeleteResult(removed=removed, new_latest=new_latest, deleted_at=deleted_at)

    def delete_distinct(self, items: Sequence[VersionDelete]) -> list[VersionDeleteOutcome]:
        """Items of distinct keys, which can not see each other's changes: every row
        first (those the caller read in one statement: `_remove_rows`), then the
        removals' seqs as one block, their tombstones in one statement (executemany),
        the keys' newest remaining versions in one statement, the promotions, the outbox
        entries. The same outcomes and rows as `delete` item by item, with the seqs in
        another order (in one transaction)."""
        removals = list(zip(items, self._remove_rows(items), strict=True))
        done = [(item, removed) for item, removed in removals
                if isinstance(removed, ObjectRecord)]
        if not done:
            return [removed for _, removed in removals if not isinstance(removed, ObjectRecord)]
        seqs = [self._seq()]
        if len(done) > 1:
            last = next_seq(self._rows, len(done) - 1)
            seqs += range(last - len(done) + 2, last + 1)
        now = self._db.clock()
        stamps = [lww.tombstone_stamp(now, removed.last_modified) for _, removed in done]
        self._rows.execute_many(self._tombstone, [
            self._tombstone_values(item, seq, stamp)
            for (item, _), seq, stamp in zip(done, seqs, stamps, strict=True)])
        newest = self._newest_remaining([item.key for item, removed in done
                                         if removed.is_latest])
        results: dict[int, DeleteResult] = {}
        for (item, removed), seq, stamp in zip(done, seqs, stamps, strict=True):
            new_latest = (self._promote(item.key, newest.get(item.key))
                          if removed.is_latest else None)
            if item.outbox is not None:
                record_outbox(self._rows, seq, removed, item.outbox, self._db.clock())
            results[id(item)] = DeleteResult(removed=removed, new_latest=new_latest,
                                              deleted_at=stamp)
        return [results[id(item)] if isinstance(removed, ObjectRecord) else removed
                for item, removed in removals]

    def _remove_rows(self, items: Sequence[VersionDelete]
                     ) -> list[ObjectRecord | VersionDeleteOutcome]:
        """`_remove_row` of items of distinct keys: those whose row the caller read
        (`known`, guarded by its seq) in ONE statement (`DELETE_KNOWN_ROWS`), the others
        one by one; an item whose row is not removed is checked as `_remove_row` checks
        it (RowChanged when the row is still there)."""
        known = [(item, item.known) for item in items
                 if item.known is not None and item.known.seq == item.expected_seq]
        if len(known) < 2:
            return [self._remove_row(item) for item in items]
        dialect = self._db.engine.dialect.name
        gone = {(str(key), str(version_id)): bool(latest)
                for key, version_id, latest in self._rows.execute(
                    DELETE_KNOWN_ROWS[dialect], delete_known_rows_values(
                        self._bucket, [(item.key, item.version_id, record.seq)
                                       for item, record in known])).fetchall()}
        read = {id(item): record for item, record in known}
        removals: list[ObjectRecord | VersionDeleteOutcome] = []
        for item in items:
            record = read.get(id(item))
            if record is None:
                removals.append(self._remove_row(item))
                continue
            latest = gone.get((item.key, item.version_id))
            if latest is None:
                removals.append(self._not_removed(item))
            elif record.is_latest != latest:
                removals.append(replace(record, is_latest=latest))
            else:
                removals.append(record)
        return removals

    def _not_removed(self, item: VersionDelete) -> VersionDeleteOutcome:
        """The outcome of an item whose DELETE removed nothing: RowChanged when its guard
        (`expected_seq`) is what kept its row, else nothing to delete."""
        same = {"p_bucket": self._bucket, "p_key": item.key, "p_version_id": item.version_id}
        if item.expected_seq is not None and self._rows.first(ROW_EXISTS, same) is not None:
            return RowChanged(f"{self._bucket}/{item.key} version {item.version_id}")
        return DeleteResult(removed=None)

    def _remove_row(self, item: VersionDelete) -> ObjectRecord | VersionDeleteOutcome:
        """The DELETE of an item's row, which is its check (guarded by the seq): the
        removed row, else the item's outcome (it changed nothing)."""
        rows, bucket = self._rows, self._bucket
        same = {"p_bucket": bucket, "p_key": item.key, "p_version_id": item.version_id}
        removed: ObjectRecord | None = None
        if item.expected_seq is None:
            row = rows.first(DELETE_ROW, same)
        elif item.known is not None and item.known.seq == item.expected_seq:
            row = rows.first(DELETE_KNOWN_ROW, {**same, "p_seq": item.expected_seq})
            if row is not None:
                removed = item.known
                if removed.is_latest != bool(row[0]):
                    removed = replace(removed, is_latest=bool(row[0]))
        else:
            row = rows.first(DELETE_GUARDED_ROW, {**same, "p_seq": item.expected_seq})
        if row is None:
            return self._not_removed(item)
        if removed is None:
            removed = schema.object_record(dict(zip(_COLUMNS, row, strict=True)))
        return removed

    def _tombstone_values(self, item: VersionDelete, seq: int,
                          deleted_at: float) -> dict[str, Any]:
        return {"p_family": TOMBSTONE_OBJECT, "p_seq": seq, "p_deleted_at": deleted_at,
                "p_tombstone_key": object_tombstone_key(self._bucket, item.key,
                                                        item.version_id)}

    def _promote_newest(self, key: str) -> ObjectRecord | None:
        """`promote_newest` on the driver."""
        return self._promote(key, self._newest_version(key))

    def _newest_remaining(self, keys: Sequence[str]) -> dict[str, str | None]:
        """The version each of distinct `keys` promotes once its latest went (None: no
        version left), in one statement (`NEWEST_REMAINING`) for several keys."""
        if len(keys) < 2:
            return {key: self._newest_version(key) for key in keys}
        return {str(key): None if version_id is None else str(version_id)
                for key, version_id in self._rows.execute(
                    NEWEST_REMAINING[self._db.engine.dialect.name],
                    newest_remaining_values(self._bucket, keys)).fetchall()}

    def _newest_version(self, key: str) -> str | None:
        newest = self._rows.first(NEWEST_VERSION, {**self._newest_defaults,
                                                   "p_bucket": self._bucket, "p_key": key})
        return None if newest is None else str(newest[0])

    def _promote(self, key: str, version_id: str | None) -> ObjectRecord | None:
        """Make `version_id` of `key` its latest, with a fresh seq (None: no version)."""
        if version_id is None:
            return None
        row = self._rows.first(PROMOTE, {"p_bucket": self._bucket, "p_key": key,
                                         "p_version_id": version_id,
                                         "p_new_seq": self._seq()})
        assert row is not None
        return schema.object_record(dict(zip(_COLUMNS, row, strict=True)))


def promote_newest(rows: CoreRows, bucket: str, key: str) -> ObjectRecord | None:
    """Make the newest remaining version of a key (last_modified, then seq) its latest,
    with a fresh seq; None when the key has no version left."""
    conn = rows.conn
    newest = conn.execute(
        sa.select(_o.c.version_id)
        .where(_o.c.bucket == bucket, _o.c.key == key)
        .order_by(_o.c.last_modified.desc(), _o.c.seq.desc())
        .limit(1)
    ).scalar()
    if newest is None:
        return None
    seq = next_seq(rows)
    row = conn.execute(
        sa.update(_o)
        .where(_object_pk(bucket, key, newest))
        .values(is_latest=True, seq=seq)
        .returning(_o)
    ).mappings().one()
    return schema.object_record(row)


@changes_objects
def update_object(
    db: Database, record: ObjectRecord, expected_seq: int | None = None,
    outbox: OutboxNote | None = None,
) -> ObjectRecord:
    """Rewrite the mutable fields (`MUTABLE_OBJECT_FIELDS`: tags, lock state, replication
    status, metadata) of an existing version in place with a fresh seq; returns the stored
    record. Identity, is_latest and the fields describing the stored bytes keep their
    stored values. Raises RecordNotFound when the version does not exist, RowChanged when
    `expected_seq` is given and the row's seq differs (a concurrent writer replaced or
    changed it). `outbox`: the change's outbox entry, in the same transaction."""
    given = schema.object_values(record)
    where = _object_pk(record.bucket, record.key, record.version_id)
    guarded = where if expected_seq is None else sa.and_(where, _o.c.seq == expected_seq)
    with write_transaction(db.engine) as conn:
        seq = next_seq(CoreRows(conn))
        row = conn.execute(
            sa.update(_o)
            .where(guarded)
            .values(seq=seq, **{name: given[name] for name in MUTABLE_OBJECT_FIELDS})
            .returning(_o)
        ).mappings().first()
        if row is None:
            name = f"object {record.bucket!r}/{record.key!r} version {record.version_id!r}"
            if expected_seq is not None and _row_exists(conn, where):
                raise RowChanged(name)
            raise RecordNotFound(name)
        stored = schema.object_record(row)
        if outbox is not None:
            record_outbox(CoreRows(conn), seq, stored, outbox, db.clock())
        return stored


@changes_objects
def insert_recovered(db: Database, records: Sequence[ObjectRecord]) -> None:
    """Bulk insert rows rebuilt from sidecars exactly as given (is_latest included), each
    taking a fresh seq. Used by `objstore recover` on an empty database."""
    if not records:
        return
    with write_transaction(db.engine) as conn:
        last = next_seq(CoreRows(conn), len(records))
        first = last - len(records) + 1
        conn.execute(
            sa.insert(_o),
            [schema.object_values(replace(r, seq=first + i)) for i, r in enumerate(records)],
        )
