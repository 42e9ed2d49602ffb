"""Request rate limiting: token buckets per key (client IP, access key), with bounded memory.

This module owns the arithmetic of `[server.limits] rate_limit_*` and nothing else: it decides
allow or refuse for a key at the time its injected clock reports. It renders no response
(the APIs answer 503 SlowDown with Retry-After) and must never import Twisted or read the
clock itself, so that every decision can be replayed in a unit test with a fake clock.

Memory is bounded two ways. A bucket that has been idle long enough to refill completely is
indistinguishable from a new one, so it is dropped (a little of that sweep happens on each
call, oldest first). Above `max_keys` live buckets the least recently used one is dropped
even if not yet full, which at worst forgives that key part of its debt.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from objstore.config import ServerLimits

__all__ = [
    "DEFAULT_MAX_KEYS", "RequestRateLimits", "TokenBucketLimiter", "effective_burst",
    "peer_address",
]

DEFAULT_MAX_KEYS = 100_000
# Full buckets swept per call: more than one, so the sweep outpaces the arrival of new keys.
_SWEEP_PER_CALL = 2


def effective_burst(rate_per_second: float, burst: int) -> int:
    """The bucket size: `burst`, or when it is 0, one second's worth (at least one request)."""
    if burst > 0:
        return burst
    return max(1, math.ceil(rate_per_second))


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class TokenBucketLimiter:
    """Per-key token buckets refilled at `rate_per_second` up to `burst` tokens.

    A rate of 0 disables the limiter: `allow` is always true and nothing is stored.
    """

    def __init__(
        self,
        rate_per_second: float,
        burst: int,
        *,
        clock: Callable[[], float],
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        if rate_per_second < 0 or burst < 0 or max_keys < 1:
            raise ValueError("rate, burst and max_keys must be non-negative (max_keys >= 1)")
        self.rate_per_second = rate_per_second
        self.burst = effective_burst(rate_per_second, burst) if rate_per_second else 0
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        # After this many idle seconds any bucket is full again, hence forgettable.
        self._refill_seconds = self.burst / rate_per_second if rate_per_second else 0.0

    @property
    def enabled(self) -> bool:
        return self.rate_per_second > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, key: str) -> bool:
        """Take one token from `key`'s bucket; false when the bucket is empty."""
        if not self.enabled:
            return True
        now = self._clock()
        bucket = self._refilled(key, now)
        self._sweep(now)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return True
        return False

    def _refilled(self, key: str, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            self._buckets[key] = bucket
            if len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
            return bucket
        self._buckets.move_to_end(key)
        # max(): a wall clock stepped backwards must not drain (or overfill) the bucket.
        elapsed = max(0.0, now - bucket.updated)
        bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate_per_second)
        bucket.updated = now
        return bucket

    def _sweep(self, now: float) -> None:
        """Forget up to a few of the least recently used buckets that have refilled."""
        for _ in range(_SWEEP_PER_CALL):
            oldest = next(iter(self._buckets.items()), None)
            if oldest is None or now - oldest[1].updated < self._refill_seconds:
                return
            del self._buckets[oldest[0]]


class RequestRateLimits:
    """The two limits of `[server.limits]`: per client IP (checked before authentication)
    and per credential (checked after it, keyed by access key id)."""

    def __init__(self, per_ip: TokenBucketLimiter, per_credential: TokenBucketLimiter) -> None:
        self.per_ip = per_ip
        self.per_credential = per_credential

    @classmethod
    def from_limits(
        cls,
        limits: ServerLimits,
        *,
        clock: Callable[[], float],
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> RequestRateLimits:
        return cls(
            TokenBucketLimiter(limits.rate_limit_per_ip_per_second, limits.rate_limit_per_ip_burst,
                               clock=clock, max_keys=max_keys),
            TokenBucketLimiter(limits.rate_limit_per_second, limits.rate_limit_burst,
                               clock=clock, max_keys=max_keys),
        )

    @classmethod
    def disabled(cls) -> RequestRateLimits:
        return cls.from_limits(ServerLimits(), clock=lambda: 0.0)

    def allow_address(self, address: str) -> bool:
        return self.per_ip.allow(address)

    def allow_credential(self, access_key: str) -> bool:
        return self.per_credential.allow(access_key)


class _HasPeer(Protocol):
    def getClientAddress(self) -> object: ...  # noqa: N802 (twisted.web's name)


def peer_address(request: _HasPeer) -> str:
    """The rate-limit key of a request's client: the peer address of the TCP connection.

    X-Forwarded-For and similar headers are never trusted here: any client can send them.
    """
    return str(getattr(request.getClientAddress(), "host", ""))
