"""Identity resolution: access key -> credential -> user, cached briefly.

The cache holds only what SigV4 verification needs (the secret, the user, the active flags)
for `[server.cache] ttl_seconds`; `invalidate()` is called on every IAM change so a revoked
credential stops working on the next request served by this process. A credential whose
user is gone, or that is inactive, resolves to nothing: it authenticates nobody.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of a request."""

    user_id: str
    username: str
    is_root: bool
    access_key: str


@dataclass(frozen=True)
class ResolvedCredential:
    principal: Principal
    secret_key: str


class IdentityResolver:
    def __init__(
        self,
        meta: Any,
        *,
        clock: Callable[[], float],
        ttl_seconds: float,
        max_entries: int,
    ) -> None:
        self._meta = meta
        self._clock = clock
        self._ttl = ttl_seconds
        self._max = max_entries
        self._cache: OrderedDict[str, tuple[float, ResolvedCredential | None]] = OrderedDict()
        # Bumped by invalidate(): a lookup that started before an IAM change must not put
        # what it read into the cache after the change.
        self._generation = 0

    async def resolve(self, access_key: str) -> ResolvedCredential | None:
        now = self._clock()
        hit = self._cache.get(access_key)
        if hit is not None and hit[0] > now:
            return hit[1]
        generation = self._generation
        found = await defer.Deferred.fromCoroutine(self._load(access_key))
        if self._ttl > 0 and self._max > 0 and generation == self._generation:
            self._cache[access_key] = (now + self._ttl, found)
            self._cache.move_to_end(access_key)
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return found

    async def _load(self, access_key: str) -> ResolvedCredential | None:
        pair = await self._meta.lookup_identity(access_key)
        if pair is None:
            return None
        credential, user = pair
        if not credential.active:
            return None
        principal = Principal(user.user_id, user.username, user.is_root, credential.access_key_id)
        return ResolvedCredential(principal, credential.secret_access_key)

    def invalidate(self, access_key: str | None = None) -> None:
        self._generation += 1
        if access_key is None:
            self._cache.clear()
        else:
            self._cache.pop(access_key, None)
