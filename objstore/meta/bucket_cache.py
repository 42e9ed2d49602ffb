"""The cache of bucket records ([server.cache] size and ttl_seconds).

Every S3 object request looks its bucket up first; a hit saves a database round trip and a
thread hop. Bucket mutations made through the MetaStore invalidate the entry at once (and a
lookup that was in flight while one happened is not stored); through the node's shared
counters (objstore/meta/coherence.py) the other worker processes drop theirs before their
next lookup, so no process serves a stale bucket. Pure: the clock is injected, no Twisted.
"""

from __future__ import annotations

from collections.abc import Callable

from objstore.meta.coherence import BUCKETS, Counters, TtlCache
from objstore.meta.records import BucketRecord


class BucketCache(TtlCache[str, BucketRecord | None]):
    def __init__(
        self,
        *,
        size: int,
        ttl_seconds: float,
        clock: Callable[[], float],
        counters: Counters | None = None,
    ) -> None:
        super().__init__(size=size, ttl_seconds=ttl_seconds, clock=clock, counters=counters,
                         scope=BUCKETS)


class BucketConfigCache(TtlCache[tuple[str, str], str | None]):
    """Bucket configuration documents by (bucket, key), for those every object write
    reads (the default encryption). In the buckets scope: a bucket or configuration change
    here, in another worker or merged from a peer (the control listeners) drops them all."""

    def __init__(
        self,
        *,
        size: int,
        ttl_seconds: float,
        clock: Callable[[], float],
        counters: Counters | None = None,
    ) -> None:
        super().__init__(size=size, ttl_seconds=ttl_seconds, clock=clock, counters=counters,
                         scope=BUCKETS)
