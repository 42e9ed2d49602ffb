"""The changed-since manifest: this node's object rows and object tombstones whose seq is
above a peer's cursor, in seq order, a page at a time (POST /cluster/v1/manifest).

The seq is commit-ordered on both backends (spec rule 4): every object write takes it from
the `seq_counter` row first inside its transaction (`object_write_queries.next_seq`),
whose row lock is held until commit, so a transaction with a higher seq commits after
every lower one. A lock change (retention, legal hold) and a tag change rewrite the row
with a fresh seq (`update_object`), so they are redelivered. A deletion leaves an object
tombstone carrying a seq of its own.

A page is read in one read transaction: the counter first (`max_seq`), then rows and
tombstones with `since < seq <= max_seq`. Every seq up to `max_seq` was committed before
the counter was read, so nothing below it can appear later: a caller that applied the
whole page may move its cursor to the last entry's seq (to `max_seq` when no more follow).
A row changed meanwhile moved to a seq above `max_seq`: it comes in a later page. No
Twisted here.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction
from objstore.meta.records import ObjectRecord
from objstore.meta.tombstones import TOMBSTONE_OBJECT

_o = schema.objects
_t = schema.tombstones
_counter = schema.seq_counter
MAX_MANIFEST_PAGE = 1000


@dataclass(frozen=True, slots=True)
class ManifestDeletion:
    """An object tombstone: the deletion of one version, stamped `deleted_at`."""

    bucket: str
    key: str
    version_id: str
    deleted_at: float


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One changed register: its row (`record`) or its tombstone (`deletion`)."""

    seq: int
    record: ObjectRecord | None = None
    deletion: ManifestDeletion | None = None


@dataclass(frozen=True, slots=True)
class ManifestPage:
    entries: tuple[ManifestEntry, ...]
    max_seq: int  # the seq counter when the page was read
    more: bool  # entries with a seq above the last one (and up to max_seq) follow


def split_object_tombstone_key(key: str) -> tuple[str, str, str]:
    """(bucket, key, version_id) of `tombstones.object_tombstone_key`'s
    `bucket:version_id:key` (bucket names and version ids hold no colon)."""
    bucket, version_id, object_key = key.split(":", 2)
    return bucket, object_key, version_id


def changed_since(db: Database, since: int, limit: int) -> ManifestPage:
    """Object rows and object tombstones with a seq above `since`, ascending, at most
    `limit` (1..MAX_MANIFEST_PAGE) of them."""
    limit = max(1, min(limit, MAX_MANIFEST_PAGE))
    with read_transaction(db.engine) as conn:
        max_seq = int(conn.execute(sa.select(_counter.c.value).where(
            _counter.c.name == schema.OBJECTS_SEQ_NAME)).scalar_one())
        rows = conn.execute(
            sa.select(_o).where(_o.c.seq > since, _o.c.seq <= max_seq)
            .order_by(_o.c.seq).limit(limit + 1)).mappings().all()
        tombstones = conn.execute(
            sa.select(_t.c.key, _t.c.deleted_at, _t.c.seq)
            .where(_t.c.family == TOMBSTONE_OBJECT, _t.c.seq > since, _t.c.seq <= max_seq)
            .order_by(_t.c.seq).limit(limit + 1)).all()
    entries = [ManifestEntry(int(row["seq"]), record=schema.object_record(row))
               for row in rows]
    for tombstone in tombstones:
        bucket, key, version_id = split_object_tombstone_key(str(tombstone.key))
        entries.append(ManifestEntry(int(tombstone.seq), deletion=ManifestDeletion(
            bucket, key, version_id, float(tombstone.deleted_at))))
    entries.sort(key=lambda entry: entry.seq)
    return ManifestPage(tuple(entries[:limit]), max_seq, more=len(entries) > limit)
