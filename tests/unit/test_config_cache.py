"""The config cache of MetaStore (`cached_bucket_config`, read at admission for a bucket's
compression): a hit until a change; a change through the MetaStore, or any bucket
invalidation on the node (a peer's merge, another worker), empties it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred

from objstore.meta.async_store import MetaStore
from objstore.meta.bucket_cache import BucketCache
from objstore.meta.coherence import BUCKETS, LocalCounters, TtlCache
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord
from objstore.meta.store import SyncMetaStore


def _now(d: Deferred[Any]) -> Any:
    results: list[Any] = []
    d.addBoth(results.append)
    assert results, "the synchronous pool fires at once"
    return results[0]


def test_hits_until_a_change_and_any_bucket_invalidation_empties_it(tmp_path: Path) -> None:
    sql = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2),
                        clock=lambda: 1.0)
    sql.migrate()
    sql.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    counters = LocalCounters()
    configs: TtlCache[tuple[str, str], str | None] = TtlCache(
        size=10, ttl_seconds=60, clock=lambda: 1.0, counters=counters, scope=BUCKETS)
    buckets = BucketCache(size=10, ttl_seconds=60, clock=lambda: 1.0, counters=counters)
    meta = MetaStore(sql, SyncDbPool(), bucket_cache=buckets, config_cache=configs)
    try:
        assert _now(meta.cached_bucket_config("b", "compression")) is None
        sql.put_bucket_config("b", "compression", "one")  # behind the cache's back
        assert _now(meta.cached_bucket_config("b", "compression")) is None  # cached
        _now(meta.put_bucket_config("b", "compression", "two"))
        assert _now(meta.cached_bucket_config("b", "compression")) == "two"
        sql.put_bucket_config("b", "compression", "three")  # e.g. a peer's merge ...
        buckets.invalidate()  # ... which tells the bucket listeners
        assert _now(meta.cached_bucket_config("b", "compression")) == "three"
        _now(meta.delete_bucket_config("b", "compression"))
        assert _now(meta.cached_bucket_config("b", "compression")) is None
    finally:
        sql.close()
