"""Identity resolution: access key -> credential -> user, cached briefly.

The cache holds only what SigV4 verification needs (the secret, the user, the active flags)
for `[server.cache] ttl_seconds`; `invalidate()` is called on every IAM change so a revoked
credential stops working on the next request served by this process. A credential whose
user is gone, or that is inactive, resolves to nothing: it authenticates nobody.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer

from objstore.meta.coherence import IAM, Counters, TtlCache


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of a request."""

    user_id: str
    username: str
    is_root: bool
    access_key: str
    anonymous: bool = False  # an unsigned request: no user, only bucket policy and ACLs


# An unsigned request's caller. The id is AWS's canonical id of anonymous callers, the
# owner of what they write (no user of this server has it: user ids are UUIDs).
ANONYMOUS = Principal("65a011a29cdf8ec533ec3d1ccaae921c", "anonymous", False, "",
                      anonymous=True)


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
        counters: Counters | None = None,
    ) -> None:
        self._meta = meta
        self._cache: TtlCache[str, ResolvedCredential | None] = TtlCache(
            size=max_entries, ttl_seconds=ttl_seconds, clock=clock, counters=counters,
            scope=IAM)

    async def resolve(self, access_key: str) -> ResolvedCredential | None:
        hit, cached = self._cache.get(access_key)
        if hit:
            return cached
        token = self._cache.token()
        found = await defer.Deferred.fromCoroutine(self._load(access_key))
        self._cache.store(access_key, found, token)
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
        self._cache.invalidate(access_key)
