"""Token-bucket rate limiting (objstore.http.ratelimit) driven by a fake clock: burst, refill,
the default burst, independence of keys, bounded memory and the disabled limiter."""

from __future__ import annotations

import pytest

from objstore.config import ServerLimits
from objstore.http.ratelimit import (
    RequestRateLimits,
    TokenBucketLimiter,
    effective_burst,
    peer_address,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def allowed_in_a_row(limiter: TokenBucketLimiter, key: str, attempts: int = 100) -> int:
    return sum(limiter.allow(key) for _ in range(attempts))


def test_burst_then_refused() -> None:
    limiter = TokenBucketLimiter(5, 5, clock=FakeClock())
    assert [limiter.allow("k") for _ in range(6)] == [True] * 5 + [False]


def test_refill_at_the_rate() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(5, 5, clock=clock)
    allowed_in_a_row(limiter, "k")
    clock.advance(0.19)
    assert not limiter.allow("k")
    clock.advance(0.01)  # 0.2 s at 5/s is one token
    assert limiter.allow("k")
    assert not limiter.allow("k")
    clock.advance(10)  # a long pause refills only up to the burst
    assert allowed_in_a_row(limiter, "k") == 5


def test_fractional_rate() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(0.5, 1, clock=clock)
    assert limiter.allow("k")
    clock.advance(1.9)
    assert not limiter.allow("k")
    clock.advance(0.1)
    assert limiter.allow("k")


@pytest.mark.parametrize(("rate", "burst", "expected"), [
    (5, 0, 5), (0.5, 0, 1), (2.5, 0, 3), (100, 7, 7), (1, 1, 1),
])
def test_effective_burst(rate: float, burst: int, expected: int) -> None:
    assert effective_burst(rate, burst) == expected
    limiter = TokenBucketLimiter(rate, burst, clock=FakeClock())
    assert limiter.burst == expected
    assert allowed_in_a_row(limiter, "k") == expected


def test_keys_are_independent() -> None:
    limiter = TokenBucketLimiter(1, 2, clock=FakeClock())
    assert allowed_in_a_row(limiter, "a") == 2
    assert allowed_in_a_row(limiter, "b") == 2


def test_disabled_allows_everything_and_stores_nothing() -> None:
    limiter = TokenBucketLimiter(0, 5, clock=FakeClock())
    assert not limiter.enabled
    assert allowed_in_a_row(limiter, "k", 10_000) == 10_000
    assert len(limiter) == 0


def test_lru_cap_bounds_memory() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(1, 1, clock=clock, max_keys=3)
    for key in ("a", "b", "c"):
        assert limiter.allow(key)
    assert not limiter.allow("a")  # "a" is now the most recently used
    assert limiter.allow("d")  # a fourth key evicts the least recently used: "b"
    assert len(limiter) == 3
    assert not limiter.allow("a") and not limiter.allow("c") and not limiter.allow("d")
    assert limiter.allow("b")  # forgotten, so it starts again with a full bucket


def test_idle_full_buckets_are_forgotten() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(10, 10, clock=clock)
    for index in range(50):
        limiter.allow(f"client-{index}")
    assert len(limiter) == 50
    clock.advance(1.0)  # burst / rate: every bucket is full again
    for _ in range(30):
        limiter.allow("busy")
    assert len(limiter) == 1


def test_partly_drained_buckets_are_kept() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(1, 10, clock=clock)
    limiter.allow("a")
    clock.advance(5)  # not yet full: needs 1 s per token, 9 left
    limiter.allow("b")
    limiter.allow("b")
    assert len(limiter) == 2


def test_clock_stepping_back_neither_drains_nor_refills() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(1, 2, clock=clock)
    assert allowed_in_a_row(limiter, "k") == 2
    clock.advance(-3600)
    assert not limiter.allow("k")
    clock.advance(1)
    assert limiter.allow("k")


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        TokenBucketLimiter(-1, 0, clock=FakeClock())
    with pytest.raises(ValueError):
        TokenBucketLimiter(1, 1, clock=FakeClock(), max_keys=0)


def test_request_limits_from_config() -> None:
    clock = FakeClock()
    limits = RequestRateLimits.from_limits(
        ServerLimits(rate_limit_per_second=2, rate_limit_burst=0,
                     rate_limit_per_ip_per_second=1, rate_limit_per_ip_burst=3),
        clock=clock,
    )
    assert [limits.allow_address("127.0.0.1") for _ in range(4)] == [True] * 3 + [False]
    assert [limits.allow_credential("AK") for _ in range(3)] == [True, True, False]
    assert limits.allow_credential("OTHER")


def test_disabled_request_limits() -> None:
    limits = RequestRateLimits.disabled()
    assert all(limits.allow_address("127.0.0.1") for _ in range(1000))
    assert all(limits.allow_credential("AK") for _ in range(1000))


class _Address:
    host = "192.0.2.7"


class _Request:
    def __init__(self, address: object) -> None:
        self._address = address

    def getClientAddress(self) -> object:  # noqa: N802
        return self._address


def test_peer_address_is_the_tcp_peer() -> None:
    assert peer_address(_Request(_Address())) == "192.0.2.7"
    assert peer_address(_Request(object())) == ""  # e.g. a UNIX socket: one shared key
