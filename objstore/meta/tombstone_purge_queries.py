"""The tombstone purge's part of the metadata store (spec Cluster rules 7): delete, in
bounded batches, the tombstones (every family: object versions, buckets, bucket config
keys, uploads, settings, IAM entities and attachments) whose `deleted_at` is older than a
cutoff, on both backends.

One call is one short write transaction removing at most `batch_size` rows, the pattern of
`audit_queries.purge_audit`: a first purge of a large table must not hold SQLite's single
writer for long. The caller (cluster/tombstone_purge.py) loops while a batch comes back
full and decides the cutoff (now - the grace window) and whether purging is allowed at
all (rule 7).

What a purged tombstone no longer does, and why that is safe after the grace window:
- object apply (`object_apply_queries`) and the control-plane merge
  (`control_snapshot_queries`) stop rejecting a row of the deleted register or entity
  stamped before the deletion: such a row can only come from a peer that has not seen
  the deletion, and rule 7 purges only when every known peer was seen within the window
  (fan-out and anti-entropy have delivered the deletion by then);
- the anti-entropy manifest stops listing the deletion's seq: a gap in the seq order is
  no loss to a puller whose cursor is past it, and a cursor behind it belongs to a peer
  that was not seen within the window, which blocks the purge.
A row strictly newer than the tombstone was never beaten by it, so its absence changes
nothing for live rows. No Twisted here.
"""

from __future__ import annotations

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import write_transaction

PURGE_BATCH = 5000

_t = schema.tombstones


def purge_tombstones(db: Database, before: float, batch_size: int = PURGE_BATCH) -> int:
    """Delete at most `batch_size` tombstones deleted before `before` (strictly older);
    returns how many."""
    doomed = (sa.select(_t.c.family, _t.c.key).where(_t.c.deleted_at < before)
              .limit(max(1, batch_size)))
    with write_transaction(db.engine) as conn:
        result = conn.execute(
            sa.delete(_t).where(sa.tuple_(_t.c.family, _t.c.key).in_(doomed.subquery().select()))
        )
    return int(result.rowcount or 0)


__all__ = ["PURGE_BATCH", "purge_tombstones"]
