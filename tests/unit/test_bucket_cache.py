"""The bucket-record cache: TTL, size bound, invalidation, and the in-flight race."""

from __future__ import annotations

from objstore.meta.bucket_cache import BucketCache
from objstore.meta.records import BucketRecord

NOW = [1000.0]
RECORD = BucketRecord("b", "owner", "us-east-1", 1.0)


def cache(size: int = 10, ttl: float = 5.0) -> BucketCache:
    return BucketCache(size=size, ttl_seconds=ttl, clock=lambda: NOW[0])


def test_hit_until_the_ttl_runs_out() -> None:
    c = cache()
    assert c.get("b") == (False, None)
    c.store("b", RECORD, c.token())
    assert c.get("b") == (True, RECORD)
    NOW[0] += 5.0
    assert c.get("b") == (False, None)


def test_absence_is_cached_too() -> None:
    c = cache()
    c.store("missing", None, c.token())
    assert c.get("missing") == (True, None)


def test_invalidation_drops_the_entry_and_in_flight_loads() -> None:
    c = cache()
    c.store("b", RECORD, c.token())
    started = c.token()
    c.invalidate("b")
    assert c.get("b") == (False, None)
    c.store("b", RECORD, started)  # a lookup that began before the change is not kept
    assert c.get("b") == (False, None)


def test_size_bound_evicts_the_least_recently_used() -> None:
    c = cache(size=2)
    for name in ("a", "b", "c"):
        c.store(name, None, c.token())
    assert c.get("a") == (False, None)
    assert c.get("c") == (True, None)


def test_disabled_by_zero_size_or_ttl() -> None:
    for c in (cache(size=0), cache(ttl=0)):
        c.store("b", RECORD, c.token())
        assert c.get("b") == (False, None)
