"""Anti-entropy's cursors (the `sync_cursors` table): this node's progress through each
peer's changed-since manifest, one row per peer node id.

Node-local: never replicated, never exported or imported (the archive and export paths
name their tables; this one is not among them). The rules that decide a cursor's next
value are `convergence/sync_rules.py`'s; this module only reads and writes rows. No Twisted.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from objstore.convergence.sync_rules import SyncCursor
from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, upsert, write_transaction

_c = schema.sync_cursors


def _cursor(row: Any) -> SyncCursor:
    return SyncCursor(
        peer_node_id=str(row.peer_node_id), cursor=int(row.cursor),
        peer_max_seq=None if row.peer_max_seq is None else int(row.peer_max_seq),
        first_pass_done=bool(row.first_pass_done),
        last_reconcile=None if row.last_reconcile is None else float(row.last_reconcile),
        failing_seq=None if row.failing_seq is None else int(row.failing_seq),
        failed_passes=int(row.failed_passes), skipped_entries=int(row.skipped_entries))


def get_sync_cursor(db: Database, peer_node_id: str) -> SyncCursor | None:
    """The cursor toward `peer_node_id`; None before the first pull from it."""
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_c).where(_c.c.peer_node_id == peer_node_id)).first()
    return None if row is None else _cursor(row)


def list_sync_cursors(db: Database) -> list[SyncCursor]:
    """Every cursor, by peer node id."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_c).order_by(_c.c.peer_node_id)).all()
    return [_cursor(row) for row in rows]


def put_sync_cursor(db: Database, cursor: SyncCursor) -> None:
    """Store the cursor toward its peer (replacing the one stored)."""
    with write_transaction(db.engine) as conn:
        upsert(conn, _c, {
            "peer_node_id": cursor.peer_node_id, "cursor": cursor.cursor,
            "peer_max_seq": cursor.peer_max_seq, "first_pass_done": cursor.first_pass_done,
            "last_reconcile": cursor.last_reconcile, "failing_seq": cursor.failing_seq,
            "failed_passes": cursor.failed_passes, "skipped_entries": cursor.skipped_entries,
        }, ("peer_node_id",))


def delete_sync_cursor(db: Database, peer_node_id: str) -> bool:
    """Forget the cursor toward a peer (a pruned one); True when there was one."""
    with write_transaction(db.engine) as conn:
        result = conn.execute(sa.delete(_c).where(_c.c.peer_node_id == peer_node_id))
    return bool(result.rowcount)
