"""Server settings: a key/value table the admin API and the import write, and the node
reads at start-up (its node id among them). Each function is one transaction on a
`Database`; a deletion leaves a tombstone. No Twisted here.
"""

from __future__ import annotations

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, upsert, write_transaction
from objstore.meta.tombstones import TOMBSTONE_SETTING, leave_tombstone

_s = schema.settings


def get_setting(db: Database, key: str) -> str | None:
    with read_transaction(db.engine) as conn:
        value = conn.execute(sa.select(_s.c.value).where(_s.c.key == key)).scalar()
    return None if value is None else str(value)


def put_setting(db: Database, key: str, value: str) -> None:
    with write_transaction(db.engine) as conn:
        upsert(conn, _s, {"key": key, "value": value, "updated_at": db.clock()}, ("key",))


def delete_setting(db: Database, key: str) -> bool:
    """False when there was no such setting."""
    with write_transaction(db.engine) as conn:
        if conn.execute(sa.delete(_s).where(_s.c.key == key)).rowcount == 0:
            return False
        leave_tombstone(db, conn, TOMBSTONE_SETTING, key)
        return True


def list_settings(db: Database) -> dict[str, str]:
    """Every setting, by key."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_s.c.key, _s.c.value).order_by(_s.c.key)).all()
    return {str(k): str(v) for k, v in rows}
