"""Which buckets' object changes need an outbox entry: those holding one of the bucket
configuration documents the registered consumers read (`notification`, `replication`).
A bucket without any leaves no entry, so its writes cost what they cost before the outbox.

`BucketInterest.judge(bucket)` answers from a per-process cache of one boolean per bucket
(`meta/coherence.py`'s `TtlCache` in the BUCKETS scope: a configuration written by any
worker of the node, or merged from a cluster peer by the control listeners, bumps that
scope's shared counter and every process drops its entries before its next lookup). A
miss reads the documents through the node's configuration cache.

The race a cache opens, and how it is closed: a write judged "no interest" just before
a configuration was stored could commit after the configuration's PUT was answered. So
a "no" comes with `stale`, a callable the write's own transaction calls (on the DB
thread: one read of the shared counter): True when the BUCKETS counter moved since the
judgement, in which case the transaction leaves the entry only if the bucket holds one of
the documents by then (`meta/outbox_queries.py`). A configuration's writer bumps the
counter after its commit and before its answer, so any write committed after that answer
either was judged after it (and saw the document) or sees the moved counter in its
transaction (and the committed document). Pure: no I/O of its own, no Twisted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from objstore.meta.coherence import BUCKETS, Counters, TtlCache

# A bucket's judgement is kept this long at most (the BUCKETS counter drops it sooner).
INTEREST_TTL_SECONDS = 60.0
INTEREST_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Judgement:
    """`interested`: the bucket holds one of the documents. When not, `stale` tells the
    write's transaction whether that may have changed since (see the module docstring)."""

    interested: bool
    stale: Callable[[], bool] | None = None


class BucketInterest:
    def __init__(self, document: Callable[[str, str], Awaitable[str | None]],
                 counters: Counters, *, clock: Callable[[], float],
                 size: int = INTEREST_CACHE_SIZE,
                 ttl_seconds: float = INTEREST_TTL_SECONDS) -> None:
        """`document(bucket, key)`: the bucket's configuration document (the node's
        configuration cache); `counters`: the node's coherence counters."""
        self._document = document
        self._counters = counters
        self._cache: TtlCache[str, bool] = TtlCache(size=size, ttl_seconds=ttl_seconds,
                                                    clock=clock, counters=counters,
                                                    scope=BUCKETS)
        self.documents: tuple[str, ...] = ()

    def watch(self, documents: Iterable[str]) -> None:
        """Add the configuration documents that make a bucket of interest."""
        self.documents = tuple(sorted({*self.documents, *documents}))
        self._cache.invalidate()

    async def judge(self, bucket: str) -> Judgement:
        seen = self._counters.read(BUCKETS)  # before the lookup: what `stale` compares
        hit, interested = self._cache.get(bucket)
        if not hit:
            token = self._cache.token()
            interested = False
            for key in self.documents:
                if await self._document(bucket, key) is not None:
                    interested = True
                    break
            self._cache.store(bucket, interested, token)
        if interested:
            return Judgement(True)
        counters = self._counters
        return Judgement(False, lambda: counters.read(BUCKETS) != seen)


__all__ = ["INTEREST_CACHE_SIZE", "INTEREST_TTL_SECONDS", "BucketInterest", "Judgement"]
