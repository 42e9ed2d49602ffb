"""The metrics part of the metadata store: samples of the metrics history (insert, read,
purge) and the per-bucket usage that the metrics endpoint exposes.

Each query is a function of a `Database`, for both backends. `usage_by_bucket` reads the
usage counters (one row per bucket), run by a timer, never per scrape. Nothing here
imports Twisted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from objstore.meta import schema, usage_counters
from objstore.meta.database import Database
from objstore.meta.dialect import read_transaction, write_transaction

MAX_SAMPLES = 10_000


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """One sample of the history: request figures are counts over the `interval_seconds`
    that ended at `ts`; storage figures are the state at (about) `ts`."""

    ts: float
    node_id: str
    interval_seconds: float
    requests: int
    errors: int  # responses with status >= 400
    server_errors: int  # responses with status >= 500
    bytes_in: int
    bytes_out: int
    buckets: int
    objects: int
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class BucketUsage:
    bucket: str
    objects: int
    stored_bytes: int


_FIELDS = ("interval_seconds", "requests", "errors", "server_errors", "bytes_in",
           "bytes_out", "buckets", "objects", "stored_bytes")


def sample_record(row: Mapping[Any, Any]) -> MetricsSample:
    return MetricsSample(
        ts=float(row["ts"]),
        node_id=row["node_id"],
        interval_seconds=float(row["interval_seconds"]),
        **{name: int(row[name]) for name in _FIELDS if name != "interval_seconds"},
    )


def insert_metrics_sample(db: Database, sample: MetricsSample) -> None:
    values = {"ts": sample.ts, "node_id": sample.node_id}
    values.update({name: getattr(sample, name) for name in _FIELDS})
    with write_transaction(db.engine) as conn:
        conn.execute(sa.insert(schema.metrics_history).values(**values))


def query_metrics_history(
    db: Database, since: float | None = None, until: float | None = None, limit: int = 1000
) -> list[MetricsSample]:
    """Samples with since <= ts < until, newest first, at most `limit` (MAX_SAMPLES)."""
    h = schema.metrics_history
    limit = max(0, min(limit, MAX_SAMPLES))
    if limit == 0:
        return []
    where: list[sa.ColumnElement[bool]] = []
    if since is not None:
        where.append(h.c.ts >= since)
    if until is not None:
        where.append(h.c.ts < until)
    query = sa.select(h).where(*where).order_by(h.c.ts.desc(), h.c.id.desc()).limit(limit)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [sample_record(r) for r in rows]


def purge_metrics_history(db: Database, before_ts: float) -> int:
    """Delete samples older than `before_ts`; returns how many."""
    h = schema.metrics_history
    with write_transaction(db.engine) as conn:
        result = conn.execute(sa.delete(h).where(h.c.ts < before_ts))
    return int(result.rowcount or 0)


def usage_by_bucket(db: Database, limit: int) -> list[BucketUsage]:
    """Object versions and bytes of the `limit` largest buckets (by bytes, then name);
    delete markers are not counted. Empty buckets are not listed. Read from the counters
    (meta/usage_counters.py): one row per bucket, whatever the buckets hold."""
    with read_transaction(db.engine) as conn:
        rows = usage_counters.largest(conn, limit)
    return [BucketUsage(b, n, s) for b, n, s in rows]
