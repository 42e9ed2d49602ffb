"""Usage counters per bucket: object versions and bytes, kept by database triggers on the
objects table, so that quota checks, the metrics and the storage snapshot read one row per
bucket instead of aggregating every row of it.

What is counted is what `bucket_usage` always counted: every version of the bucket (latest
or not) that is not a delete marker, by number and by `size`. The table
`bucket_usage (bucket, objects, stored_bytes)` holds that sum for each bucket that ever had
such a row (a bucket emptied keeps a row of zeros until it is deleted).

Why triggers: every path that changes object rows (PUT, copy, delete, DeleteObjects,
multipart completion, replication apply, recover's bulk insert, lifecycle, tombstone
purges, migrate-db's copy, bucket deletion) keeps the counters without knowing of them,
in the same transaction as the row, on both backends; a path added later cannot forget
them. The triggers fire on INSERT and DELETE, and on an UPDATE that changes `bucket`,
`size` or `is_delete_marker` (including ON CONFLICT DO UPDATE). SQLite's are row
triggers; PostgreSQL counts INSERT and DELETE per statement, over its transition table
(see _POSTGRES_TRIGGERS), and an UPDATE per row. Not covered: SQLite's REPLACE conflict
resolution (no code uses it: the store deletes and inserts) and TRUNCATE on PostgreSQL;
`rebuild` recomputes the table from the rows.

Concurrency: on PostgreSQL the counter row of a bucket is locked by a writer until its
commit; object writers already serialize on the seq counter row (taken first), so this
adds no new waiting. SQLite has one writer.

`install` (migration 15 and every new database) creates the triggers; `rebuild` fills the
table from the rows (the migration's backfill; migrate-db ends with it). No Twisted here.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from objstore.meta import schema

_u = schema.bucket_usage
_o = schema.objects

_SQLITE_TRIGGERS = (
    """CREATE TRIGGER IF NOT EXISTS objects_usage_insert AFTER INSERT ON objects
    WHEN NOT NEW.is_delete_marker
    BEGIN
        INSERT INTO bucket_usage (bucket, objects, stored_bytes) VALUES (NEW.bucket, 1, NEW.size)
        ON CONFLICT (bucket) DO UPDATE SET objects = objects + 1,
            stored_bytes = stored_bytes + excluded.stored_bytes;
    END""",
    """CREATE TRIGGER IF NOT EXISTS objects_usage_delete AFTER DELETE ON objects
    WHEN NOT OLD.is_delete_marker
    BEGIN
        UPDATE bucket_usage SET objects = objects - 1, stored_bytes = stored_bytes - OLD.size
        WHERE bucket = OLD.bucket;
    END""",
    """CREATE TRIGGER IF NOT EXISTS objects_usage_update
    AFTER UPDATE OF bucket, size, is_delete_marker ON objects
    WHEN OLD.bucket IS NOT NEW.bucket OR OLD.size IS NOT NEW.size
        OR OLD.is_delete_marker IS NOT NEW.is_delete_marker
    BEGIN
        UPDATE bucket_usage SET objects = objects - 1, stored_bytes = stored_bytes - OLD.size
        WHERE bucket = OLD.bucket AND NOT OLD.is_delete_marker;
        INSERT INTO bucket_usage (bucket, objects, stored_bytes)
        SELECT NEW.bucket, 1, NEW.size WHERE NOT NEW.is_delete_marker
        ON CONFLICT (bucket) DO UPDATE SET objects = objects + 1,
            stored_bytes = stored_bytes + excluded.stored_bytes;
    END""",
    # A deleted bucket's counters go with it (a bucket is deleted only when it holds no
    # rows, so they are zeros).
    """CREATE TRIGGER IF NOT EXISTS buckets_usage_delete AFTER DELETE ON buckets
    BEGIN
        DELETE FROM bucket_usage WHERE bucket = OLD.name;
    END""",
)

# PostgreSQL: INSERT and DELETE count per STATEMENT, over the statement's transition table
# (one counter update per bucket per statement). Row triggers would update the same
# counter row once per row, and each update of a row leaves a version that the next one
# in the same transaction must step over: a bulk copy of a million rows in one transaction
# (migrate-db) became quadratic. An UPDATE of the counted columns is rare: a row trigger.
_POSTGRES_TRIGGERS = (
    """CREATE OR REPLACE FUNCTION objects_usage_added() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO bucket_usage (bucket, objects, stored_bytes)
        SELECT bucket, count(*), sum(size) FROM usage_added
        WHERE NOT is_delete_marker GROUP BY bucket
        ON CONFLICT (bucket) DO UPDATE SET objects = bucket_usage.objects + EXCLUDED.objects,
            stored_bytes = bucket_usage.stored_bytes + EXCLUDED.stored_bytes;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION objects_usage_removed() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE bucket_usage SET objects = bucket_usage.objects - gone.objects,
            stored_bytes = bucket_usage.stored_bytes - gone.stored_bytes
        FROM (SELECT bucket, count(*) AS objects, sum(size) AS stored_bytes
              FROM usage_removed WHERE NOT is_delete_marker GROUP BY bucket) AS gone
        WHERE bucket_usage.bucket = gone.bucket;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION objects_usage_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT OLD.is_delete_marker THEN
            UPDATE bucket_usage SET objects = objects - 1,
                stored_bytes = stored_bytes - OLD.size
            WHERE bucket = OLD.bucket;
        END IF;
        IF NOT NEW.is_delete_marker THEN
            INSERT INTO bucket_usage (bucket, objects, stored_bytes)
            VALUES (NEW.bucket, 1, NEW.size)
            ON CONFLICT (bucket) DO UPDATE SET objects = bucket_usage.objects + 1,
                stored_bytes = bucket_usage.stored_bytes + EXCLUDED.stored_bytes;
        END IF;
        RETURN NULL;
    END $$""",
    "DROP TRIGGER IF EXISTS objects_usage_insert ON objects",
    """CREATE TRIGGER objects_usage_insert AFTER INSERT ON objects
    REFERENCING NEW TABLE AS usage_added
    FOR EACH STATEMENT EXECUTE FUNCTION objects_usage_added()""",
    "DROP TRIGGER IF EXISTS objects_usage_delete ON objects",
    """CREATE TRIGGER objects_usage_delete AFTER DELETE ON objects
    REFERENCING OLD TABLE AS usage_removed
    FOR EACH STATEMENT EXECUTE FUNCTION objects_usage_removed()""",
    "DROP TRIGGER IF EXISTS objects_usage_update ON objects",
    """CREATE TRIGGER objects_usage_update
    AFTER UPDATE OF bucket, size, is_delete_marker ON objects FOR EACH ROW
    WHEN (OLD.bucket IS DISTINCT FROM NEW.bucket OR OLD.size IS DISTINCT FROM NEW.size
          OR OLD.is_delete_marker IS DISTINCT FROM NEW.is_delete_marker)
    EXECUTE FUNCTION objects_usage_change()""",
    """CREATE OR REPLACE FUNCTION buckets_usage_delete() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM bucket_usage WHERE bucket = OLD.name;
        RETURN NULL;
    END $$""",
    "DROP TRIGGER IF EXISTS buckets_usage_delete ON buckets",
    """CREATE TRIGGER buckets_usage_delete AFTER DELETE ON buckets
    FOR EACH ROW EXECUTE FUNCTION buckets_usage_delete()""",
)


def install(conn: Connection) -> None:
    """Create the counters' table and triggers (idempotent), inside the caller's
    transaction. Does not fill the table: see `rebuild`."""
    _u.create(conn, checkfirst=True)
    statements = _POSTGRES_TRIGGERS if conn.dialect.name == "postgresql" else _SQLITE_TRIGGERS
    for statement in statements:
        conn.exec_driver_sql(statement)


# What the counters hold, computed from the rows: the aggregate they replace.
COUNTED = (
    sa.select(_o.c.bucket, sa.func.count().label("objects"),
              sa.func.coalesce(sa.func.sum(_o.c.size), 0).label("stored_bytes"))
    .where(_o.c.is_delete_marker == sa.false())
    .group_by(_o.c.bucket)
)


def rebuild(conn: Connection) -> None:
    """Recompute every counter from the rows, inside the caller's transaction (which must
    keep writers out: a migration's, or a copy's with the traffic stopped)."""
    conn.execute(sa.delete(_u))
    conn.execute(sa.insert(_u).from_select(["bucket", "objects", "stored_bytes"], COUNTED))


# -- reads (O(1) per bucket) -----------------------------------------------------------

BUCKET_USAGE = sa.select(_u.c.objects, _u.c.stored_bytes).where(
    _u.c.bucket == sa.bindparam("p_bucket"))


def usage_of(conn: Connection, bucket: str) -> tuple[int, int]:
    """(object versions, bytes) of `bucket`: (0, 0) when it never held a counted row."""
    row = conn.execute(BUCKET_USAGE, {"p_bucket": bucket}).first()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def totals(conn: Connection) -> tuple[int, int]:
    """(object versions, bytes) of the whole store: one row per bucket summed."""
    count, total = conn.execute(sa.select(
        sa.func.coalesce(sa.func.sum(_u.c.objects), 0),
        sa.func.coalesce(sa.func.sum(_u.c.stored_bytes), 0))).one()
    return int(count), int(total)


def largest(conn: Connection, limit: int) -> list[tuple[str, int, int]]:
    """(bucket, object versions, bytes) of the `limit` largest buckets (by bytes, then
    name) that hold any counted row."""
    query = (sa.select(_u.c.bucket, _u.c.objects, _u.c.stored_bytes)
             .where(_u.c.objects > 0)
             .order_by(_u.c.stored_bytes.desc(), _u.c.bucket)
             .limit(max(0, limit)))
    return [(str(b), int(n), int(s)) for b, n, s in conn.execute(query).all()]
