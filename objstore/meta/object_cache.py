"""The cache of object records that GET and HEAD read ([server.cache] objects,
objects_ttl_seconds).

A 4 KiB GET spent about a quarter of its server CPU on the one database read of its
record (the DB read thread, plus the thread hop). Served from this cache, a GET of an
object read recently needs none.

Coherence rests on one rule: every transaction that changes object rows bumps the node's
OBJECTS counter (objstore/meta/coherence.py) after it commits and before its caller hears
of it. Every query function that takes a seq, which by the store's contract is every
change of an object row, is marked `database.changes_objects`: it calls the database's
`objects_changed` on its DB thread once its transaction is over.
A lookup compares the counter first, and forgets everything when it moved; a lookup that
raced a change is not stored. So a write that was answered is seen by the next GET in any
worker process, as S3's read-after-write consistency requires. The price: each object
write empties the cache of every worker, which suits read-heavy traffic and costs a
mixed one only its hit rate. Writers outside the node (`objstore recover`, a second node
on the same PostgreSQL database) do not bump the counter: the TTL bounds what they leave
stale for GET and HEAD, and reads that decide a write (object lock rules, conditions,
lifecycle) never use the cache (`MetaStore.get_object(cached=...)`). Keys are (bucket,
key, version_id or None for the latest); a miss of a key that does not exist is cached
too. Pure: the clock is injected, no Twisted.
"""

from __future__ import annotations

from collections.abc import Callable

from objstore.meta.coherence import OBJECTS, Counters, TtlCache
from objstore.meta.records import ObjectRecord

ObjectKey = tuple[str, str, str | None]

# The TTL of object records on SQLite when `[server.cache] objects_ttl_seconds` is not set.
SQLITE_OBJECTS_TTL_SECONDS = 60.0


def objects_ttl_seconds(configured: float | None, general_ttl: float, backend: str) -> float:
    """How long a worker may serve an object record without a look-up.

    The OBJECTS counter keeps the caches of a node's workers coherent. The TTL only bounds
    how long a write by another program on the same database stays unseen. On SQLite
    that program is a hand edit, or `objstore recover` run beside the daemon (the
    manual says to stop it first; `check --repair` changes no row). So unless set,
    records there live SQLITE_OBJECTS_TTL_SECONDS (with 1,000 hot keys a 5 s TTL sent
    ~20 % of GETs to the database). On PostgreSQL another node may share the database,
    and the general `ttl_seconds` applies. A `ttl_seconds` of 0 (caches off) turns this
    cache off too unless it is set on its own."""
    if configured is not None:
        return configured
    if general_ttl <= 0 or backend != "sqlite":
        return general_ttl
    return max(general_ttl, SQLITE_OBJECTS_TTL_SECONDS)


class ObjectCache(TtlCache[ObjectKey, ObjectRecord | None]):
    def __init__(
        self,
        *,
        size: int,
        ttl_seconds: float,
        clock: Callable[[], float],
        counters: Counters | None = None,
    ) -> None:
        super().__init__(size=size, ttl_seconds=ttl_seconds, clock=clock, counters=counters,
                         scope=OBJECTS)


__all__ = ["SQLITE_OBJECTS_TTL_SECONDS", "ObjectCache", "ObjectKey", "objects_ttl_seconds"]
