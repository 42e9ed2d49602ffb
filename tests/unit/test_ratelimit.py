"""Token-bucket rate limiting (objstore.http.ratelimit) driven by a fake clock: burst, refill,
the default burst, independence of keys, bounded memory and the disabled limiter, for the
in-memory buckets of one process and the shared table of a node's workers; the shared table
holds one budget for every process that opens it, also under contention."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from objstore.config import ServerLimits
from objstore.http.ratelimit import (
    Limiter,
    RequestRateLimits,
    SharedTokenBuckets,
    TokenBucketLimiter,
    effective_burst,
    peer_address,
)
from objstore.prefork import RATE_LIMITS_CREDENTIAL_FILE, RATE_LIMITS_IP_FILE


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def allowed_in_a_row(limiter: Limiter, key: str, attempts: int = 100) -> int:
    return sum(limiter.allow(key) for _ in range(attempts))


MakeLimiter = Callable[..., Limiter]


@pytest.fixture(params=["memory", "shared"])
def make_limiter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeLimiter]:
    """Either kind of limiter, `make(rate, burst, clock=...)`: they must behave alike."""
    made: list[SharedTokenBuckets] = []

    def make(rate: float, burst: int, *, clock: Callable[[], float], **kwargs: int) -> Limiter:
        if request.param == "memory":
            return TokenBucketLimiter(rate, burst, clock=clock, **kwargs)
        made.append(SharedTokenBuckets(str(tmp_path / f"buckets-{len(made)}"), rate, burst,
                                       clock=clock, **kwargs))
        return made[-1]

    yield make
    for limiter in made:
        limiter.close()


def test_burst_then_refused(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(5, 5, clock=FakeClock())
    assert [limiter.allow("k") for _ in range(6)] == [True] * 5 + [False]


def test_refill_at_the_rate(make_limiter: MakeLimiter) -> None:
    clock = FakeClock()
    limiter = make_limiter(5, 5, clock=clock)
    allowed_in_a_row(limiter, "k")
    clock.advance(0.19)
    assert not limiter.allow("k")
    clock.advance(0.01)  # 0.2 s at 5/s is one token
    assert limiter.allow("k")
    assert not limiter.allow("k")
    clock.advance(10)  # a long pause refills only up to the burst
    assert allowed_in_a_row(limiter, "k") == 5


def test_fractional_rate(make_limiter: MakeLimiter) -> None:
    clock = FakeClock()
    limiter = make_limiter(0.5, 1, clock=clock)
    assert limiter.allow("k")
    clock.advance(1.9)
    assert not limiter.allow("k")
    clock.advance(0.1)
    assert limiter.allow("k")


@pytest.mark.parametrize(("rate", "burst", "expected"), [
    (5, 0, 5), (0.5, 0, 1), (2.5, 0, 3), (100, 7, 7), (1, 1, 1),
])
def test_effective_burst(rate: float, burst: int, expected: int,
                         make_limiter: MakeLimiter) -> None:
    assert effective_burst(rate, burst) == expected
    limiter = make_limiter(rate, burst, clock=FakeClock())
    assert allowed_in_a_row(limiter, "k") == expected


def test_keys_are_independent(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(1, 2, clock=FakeClock())
    assert allowed_in_a_row(limiter, "a") == 2
    assert allowed_in_a_row(limiter, "b") == 2
    assert allowed_in_a_row(limiter, "192.0.2.\udcff") == 2  # any str, even unencodable


def test_disabled_allows_everything(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(0, 5, clock=FakeClock())
    assert not limiter.enabled
    assert allowed_in_a_row(limiter, "k", 10_000) == 10_000


def test_disabled_shared_limiter_opens_no_file(tmp_path: Path) -> None:
    SharedTokenBuckets(str(tmp_path / "buckets"), 0, 5, clock=FakeClock()).close()
    assert not (tmp_path / "buckets").exists()


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


def test_clock_stepping_back_neither_drains_nor_refills(make_limiter: MakeLimiter) -> None:
    clock = FakeClock()
    limiter = make_limiter(1, 2, clock=clock)
    assert allowed_in_a_row(limiter, "k") == 2
    clock.advance(-3600)
    assert not limiter.allow("k")
    clock.advance(1)
    assert limiter.allow("k")


def test_invalid_arguments(make_limiter: MakeLimiter) -> None:
    with pytest.raises(ValueError):
        make_limiter(-1, 0, clock=FakeClock())
    with pytest.raises(ValueError):
        make_limiter(1, 1, clock=FakeClock(), max_keys=0)


# -- the shared table of a node's workers ------------------------------------------------


def test_workers_opening_one_table_share_each_budget(tmp_path: Path) -> None:
    clock = FakeClock()
    path = str(tmp_path / "buckets")
    first = SharedTokenBuckets(path, 1, 4, clock=clock)
    second = SharedTokenBuckets(path, 1, 4, clock=clock)  # as another worker opens it
    assert [first.allow("k"), second.allow("k"), first.allow("k"), second.allow("k")] == [
        True] * 4
    assert not first.allow("k") and not second.allow("k")
    clock.advance(1)  # one token for the node, not one per worker
    assert second.allow("k")
    assert not first.allow("k")
    assert allowed_in_a_row(second, "other") == 4
    first.close()
    second.close()


def test_shared_table_is_owner_only_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "buckets"
    limiter = SharedTokenBuckets(str(path), 1, 1, clock=FakeClock(), max_keys=1000)
    for index in range(5000):
        limiter.allow(f"client-{index}")
    limiter.close()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.stat().st_size <= 1000 * 24 + 8 * 24  # fixed slots of 24 bytes


def test_shared_table_evicts_the_least_recently_used_key_of_a_full_set(tmp_path: Path) -> None:
    clock = FakeClock()
    # max_keys 8: one set of 8 slots, so every key competes for the same slots.
    limiter = SharedTokenBuckets(str(tmp_path / "buckets"), 1, 1, clock=clock, max_keys=8)
    keys = [f"k{index}" for index in range(8)]
    for key in keys:
        assert limiter.allow(key)
        clock.advance(0.01)
    assert not limiter.allow("k0")  # still held, and now the most recently used
    assert limiter.allow("new")  # evicts "k1", the least recently used
    assert limiter.allow("k1")  # forgotten, so it starts again with a full bucket
    # ... and took the slot of "k2"; the others keep their (empty) buckets.
    assert not any(limiter.allow(key) for key in ["k0", *keys[3:], "new", "k1"])
    limiter.close()


def _take_tokens(path: str, attempts: int, start: multiprocessing.synchronize.Event,
                 results: multiprocessing.Queue[int]) -> None:
    limiter = SharedTokenBuckets(path, 1e-9, 500, clock=lambda: 1000.0)
    start.wait()
    results.put(allowed_in_a_row(limiter, "hot", attempts))


def test_processes_taking_tokens_at_once_never_exceed_the_burst(tmp_path: Path) -> None:
    path = str(tmp_path / "buckets")
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    workers = [context.Process(target=_take_tokens, args=(path, 2000, start, results))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    start.set()
    allowed = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert sum(allowed) == 500


def test_a_check_waits_for_a_holder_that_keeps_the_lock_and_lets_the_gil_go(
        tmp_path: Path) -> None:
    path = tmp_path / "buckets"
    limiter = SharedTokenBuckets(str(path), 1, 2, clock=FakeClock())
    results: list[bool] = []
    with open(path, "rb") as other:  # another open file: as another worker holding the lock
        fcntl.flock(other, fcntl.LOCK_EX)
        checking = threading.Thread(target=lambda: results.append(limiter.allow("k")))
        checking.start()
        checking.join(0.05)  # this thread runs meanwhile: the waiting one let the GIL go
        assert checking.is_alive() and results == []
        fcntl.flock(other, fcntl.LOCK_UN)
        checking.join(10)
    assert results == [True]
    limiter.close()


def test_shared_request_limits_from_config(tmp_path: Path) -> None:
    limits = ServerLimits(rate_limit_per_second=2, rate_limit_per_ip_per_second=1,
                          rate_limit_per_ip_burst=3)
    clock = FakeClock()
    workers = [RequestRateLimits.shared(limits, str(tmp_path), clock=clock) for _ in range(2)]
    assert [workers[i % 2].allow_address("127.0.0.1") for i in range(4)] == [True] * 3 + [False]
    assert [workers[i % 2].allow_credential("AK") for i in range(3)] == [True, True, False]
    assert sorted(os.listdir(tmp_path)) == sorted([RATE_LIMITS_CREDENTIAL_FILE,
                                                   RATE_LIMITS_IP_FILE])


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
