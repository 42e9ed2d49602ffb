"""The walk over object rows in blob-id order that proactive blob repair makes
(cluster/blob_repair.py): one page at a time from a resume cursor, on the index
`ix_objects_blob_id`. Only rows with bytes of their own or parts (no delete markers).
One read transaction per page; no Twisted.
"""

from __future__ import annotations

import sqlalchemy as sa

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction
from objstore.meta.records import ObjectRecord

_o = schema.objects


def objects_by_blob_id(db: Database, after: str | None, limit: int = 200
                       ) -> list[ObjectRecord]:
    """Up to `limit` object rows whose blob id sorts strictly after `after` (from the
    first without it), in blob-id order; delete markers left out."""
    query = (sa.select(_o)
             .where(_o.c.blob_id.is_not(None), _o.c.is_delete_marker.is_(False))
             .order_by(_o.c.blob_id, _o.c.bucket, _o.c.key, _o.c.version_id)
             .limit(max(1, limit)))
    if after is not None:
        query = query.where(_o.c.blob_id > after)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.object_record(row) for row in rows]
