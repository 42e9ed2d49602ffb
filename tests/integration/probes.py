"""Read a running daemon's state from outside, for tests of the tombstone purge: its
database's object tombstones and one sample of its /admin/metrics. The probes read once
and never wait: the tests poll them with their own deadlines."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy as sa
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.daemon import Daemon

HTTP = urllib3.PoolManager(retries=False, timeout=10.0)


def database_url(node: Daemon) -> str:
    if node.backend == "postgres":
        return f"postgresql+psycopg2://postgres@127.0.0.1:5432/{node.pg_database}"
    return f"sqlite:///{node.data_dir / 'meta' / 'objstore.db'}"


@contextlib.contextmanager
def database(node: Daemon) -> Iterator[sa.Engine]:
    """An engine on `node`'s metadata database (no pooled connections), disposed at the
    end."""
    engine = sa.create_engine(database_url(node), poolclass=sa.pool.NullPool)
    try:
        yield engine
    finally:
        engine.dispose()


def object_tombstones(engine: sa.Engine, bucket: str) -> set[str]:
    """The keys (bucket:version:key) of the bucket's object tombstones."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT key FROM tombstones WHERE family = 'object' AND key LIKE :prefix"),
            {"prefix": f"{bucket}:%"})
        return {str(row[0]) for row in rows}


def metric(node: Daemon, name: str) -> float:
    """The value of sample `name` in `node`'s /admin/metrics (0.0 when absent)."""
    response = HTTP.request("GET", f"{node.endpoint}/admin/metrics")
    assert response.status == 200
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return 0.0
