"""Request rate limiting: token buckets per key (client IP, access key), with bounded memory.

This module owns the arithmetic of `[server.limits] rate_limit_*` and where the buckets live:
it decides allow or refuse for a key at the time its injected clock reports. It renders no
response (the APIs answer 503 SlowDown with Retry-After) and must never import Twisted or
read the clock itself, so that every decision can be replayed in a unit test with a fake
clock.

The limits are per node. A single-process node keeps its buckets in memory
(`TokenBucketLimiter`); the worker processes of a supervised node share theirs in a
memory-mapped table in the node's runtime directory (`SharedTokenBuckets`), or each worker
would grant the whole budget again.

Memory is bounded either way. In memory: a bucket that has been idle long enough to refill
completely is indistinguishable from a new one, so it is dropped (a little of that sweep
happens on each call, oldest first), and above `max_keys` live buckets the least recently
used one is dropped even if not yet full, which at worst forgives that key part of its debt.
The shared table has a fixed number of slots; a new key takes a free or full slot of its
set, else the least recently used one, with the same worst case.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import math
import mmap
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from objstore.config import ServerLimits
from objstore.prefork import RATE_LIMITS_CREDENTIAL_FILE, RATE_LIMITS_IP_FILE

__all__ = [
    "DEFAULT_MAX_KEYS", "Limiter", "RequestRateLimits", "SharedTokenBuckets",
    "TokenBucketLimiter", "effective_burst", "peer_address",
]

DEFAULT_MAX_KEYS = 100_000
# Full buckets swept per call: more than one, so the sweep outpaces the arrival of new keys.
_SWEEP_PER_CALL = 2


def effective_burst(rate_per_second: float, burst: int) -> int:
    """The bucket size: `burst`, or when it is 0, one second's worth (at least one request)."""
    if burst > 0:
        return burst
    return max(1, math.ceil(rate_per_second))


def refilled_tokens(tokens: float, updated: float, now: float, rate_per_second: float,
                    burst: int) -> float:
    """The tokens of a bucket last seen at `updated` holding `tokens`, at `now`."""
    # max(): a wall clock stepped backwards must not drain (or overfill) the bucket.
    elapsed = max(0.0, now - updated)
    return min(float(burst), tokens + elapsed * rate_per_second)


class Limiter(Protocol):
    @property
    def enabled(self) -> bool: ...

    def allow(self, key: str) -> bool:
        """Take one token from `key`'s bucket; false when the bucket is empty."""
        ...


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class _Rate:
    """What both kinds of token buckets are given: a rate (0 disables them), a burst and a
    clock, checked alike."""

    def __init__(self, rate_per_second: float, burst: int, *, clock: Callable[[], float],
                 max_keys: int) -> None:
        if rate_per_second < 0 or burst < 0 or max_keys < 1:
            raise ValueError("rate, burst and max_keys must be non-negative (max_keys >= 1)")
        self.rate_per_second = rate_per_second
        self.burst = effective_burst(rate_per_second, burst) if rate_per_second else 0
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return self.rate_per_second > 0


class TokenBucketLimiter(_Rate):
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
        super().__init__(rate_per_second, burst, clock=clock, max_keys=max_keys)
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        # After this many idle seconds any bucket is full again, hence forgettable.
        self._refill_seconds = self.burst / rate_per_second if rate_per_second else 0.0

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
        bucket.tokens = refilled_tokens(bucket.tokens, bucket.updated, now,
                                        self.rate_per_second, self.burst)
        bucket.updated = now
        return bucket

    def _sweep(self, now: float) -> None:
        """Forget up to a few of the least recently used buckets that have refilled."""
        for _ in range(_SWEEP_PER_CALL):
            oldest = next(iter(self._buckets.items()), None)
            if oldest is None or now - oldest[1].updated < self._refill_seconds:
                return
            del self._buckets[oldest[0]]


_WAYS = 8  # slots per set: a key lives in one of the 8 slots of the set its hash names
_SLOT = struct.Struct("<Qdd")  # key fingerprint (0: free), tokens, last update
_SET = struct.Struct("<" + "Qdd" * _WAYS)


# The table's lock is taken through PyDLL, not CDLL nor the fcntl module: its calls keep the
# GIL. A call that lets it go must get it back after the system call, which can take up to
# the interpreter's switch interval (5 ms) while another thread of the worker runs, all
# that time holding the node's lock. Measured with two workers (4 KiB GETs, c=32, 2 busy
# cores): a check waited 17-25 us on average for the lock with fcntl.lockf, 1-2 % of checks
# over 50 us; 5 us keeping the GIL, 0.1 % over 50 us. A holder keeps the lock for a few
# microseconds unless the kernel descheduled it: so the lock is tried without blocking a
# few times, and only then waited for the blocking way, letting the GIL go, so that a
# descheduled holder does not stop every thread of this worker.
_LIBC = ctypes.PyDLL(None, use_errno=True)
_flock = _LIBC.flock
_flock.argtypes = (ctypes.c_int, ctypes.c_int)
_flock.restype = ctypes.c_int
_TRIES_KEEPING_GIL = 32  # about 0.5 us each


def _lock_table(fd: int) -> None:
    for _ in range(_TRIES_KEEPING_GIL):
        if _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EWOULDBLOCK, errno.EINTR):
            raise OSError(code, os.strerror(code))
    fcntl.flock(fd, fcntl.LOCK_EX)


def _unlock_table(fd: int) -> None:
    if _flock(fd, fcntl.LOCK_UN) != 0:  # never blocks
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _fingerprint(key: str) -> int:
    """The same 64-bit hash in every process (Python's hash() is salted per process); never
    0, which marks a free slot."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


class SharedTokenBuckets(_Rate):
    """Token buckets refilled at `rate_per_second` up to `burst`, in a memory-mapped file
    that every worker process of the node opens: a token taken through one worker is gone
    for all of them.

    The file is a fixed table of sets of `_WAYS` slots. A check hashes the key, takes the
    table's `flock` (keeping the GIL, see `_lock_table`), reads the key's set in one
    unpack, updates one slot and unlocks: two system calls and a few microseconds, nothing
    that grows. A new key takes a free slot of its set, else the one used least recently
    (full again, or at worst forgiven the rest of its debt). The file starts as zeros (every
    slot free); any worker may create it, and nothing in it needs to survive the node. A
    rate of 0 disables the limiter and opens no file.
    """

    def __init__(
        self,
        path: str,
        rate_per_second: float,
        burst: int,
        *,
        clock: Callable[[], float],
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        super().__init__(rate_per_second, burst, clock=clock, max_keys=max_keys)
        self._sets = max(1, math.ceil(max_keys / _WAYS))
        # An flock belongs to the open file: it does not exclude this process's own threads.
        self._thread_lock = threading.Lock()
        self._fd = -1
        if self.enabled:
            self._open(path, self._sets * _SET.size)

    def _open(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)  # zeros; a sibling doing the same changes nothing
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd


    def allow(self, key: str) -> bool:
        """Take one token from `key`'s bucket; false when the bucket is empty."""
        if not self.enabled:
            return True
        fingerprint = _fingerprint(key)
        offset = (fingerprint % self._sets) * _SET.size
        with self._thread_lock:  # uncontended: only the reactor thread checks limits
            _lock_table(self._fd)
            try:
                return self._take(fingerprint, offset, self._clock())
            finally:
                _unlock_table(self._fd)

    def _take(self, fingerprint: int, offset: int, now: float) -> bool:
        fields = _SET.unpack_from(self._map, offset)
        fingerprints = fields[0::3]
        if fingerprint in fingerprints:
            way = fingerprints.index(fingerprint)
            tokens = refilled_tokens(fields[3 * way + 1], fields[3 * way + 2], now,
                                     self.rate_per_second, self.burst)
        else:  # a free slot (fingerprint 0, updated 0.0 sorts first), else the least recent
            way = min(range(_WAYS), key=lambda w: (fingerprints[w] != 0, fields[3 * w + 2]))
            tokens = float(self.burst)
        allowed = tokens >= 1.0
        _SLOT.pack_into(self._map, offset + way * _SLOT.size, fingerprint,
                        tokens - 1.0 if allowed else tokens, now)
        return allowed

    def close(self) -> None:
        if self._fd >= 0:
            self._map.close()
            os.close(self._fd)
            self._fd = -1


class RequestRateLimits:
    """The two limits of `[server.limits]`: per client IP (checked before authentication)
    and per credential (checked after it, keyed by access key id)."""

    def __init__(self, per_ip: Limiter, per_credential: Limiter) -> None:
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
    def shared(
        cls,
        limits: ServerLimits,
        directory: str,
        *,
        clock: Callable[[], float],
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> RequestRateLimits:
        """The limits of a node's worker processes, in tables under `directory` (the node's
        runtime directory) that all of them share."""
        return cls(
            SharedTokenBuckets(os.path.join(directory, RATE_LIMITS_IP_FILE),
                               limits.rate_limit_per_ip_per_second,
                               limits.rate_limit_per_ip_burst, clock=clock, max_keys=max_keys),
            SharedTokenBuckets(os.path.join(directory, RATE_LIMITS_CREDENTIAL_FILE),
                               limits.rate_limit_per_second, limits.rate_limit_burst,
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
