"""Lifecycle configuration use cases: store, read and remove a bucket's configuration, and
tell which rule expires a given current version (for x-amz-expiration).

The configuration is validated here before it is stored (as bucket config `lifecycle`, in
the JSON form of `lifecycle_rules.to_json`) through `BucketConfigService`, which also keeps
it in the control record for `objstore recover`. Reads for response headers go through a small
per-bucket cache ([server.cache] size and ttl_seconds) that this service invalidates on
every change it makes, so a GET/HEAD/PUT pays no extra query in the common case. The
lifecycle worker reads uncached (`load`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.logger import Logger

from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.changes import Caller
from objstore.engine.lifecycle_rules import (
    LifecycleConfiguration,
    from_json,
    object_expiration,
    to_json,
    validate,
)
from objstore.errors import S3Error
from objstore.meta.coherence import BUCKETS, Counters, TtlCache
from objstore.meta.records import ObjectRecord

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

log = Logger()

LIFECYCLE_CONFIG_KEY = "lifecycle"


class LifecycleService:
    def __init__(
        self,
        meta: MetaStore,
        documents: BucketConfigService,
        *,
        clock: Callable[[], float],
        day_seconds: float,
        cache_ttl_seconds: float,
        cache_size: int,
        counters: Counters | None = None,
    ) -> None:
        self._meta = meta
        self._documents = documents
        self.day_seconds = day_seconds
        self._cache: TtlCache[str, LifecycleConfiguration | None] = TtlCache(
            size=cache_size, ttl_seconds=cache_ttl_seconds, clock=clock, counters=counters,
            scope=BUCKETS)

    async def get(self, bucket: str) -> LifecycleConfiguration:
        await self._require_bucket(bucket)
        config = await self.load(bucket)
        if config is None:
            raise S3Error("NoSuchLifecycleConfiguration", BucketName=bucket)
        return config

    async def put(self, caller: Caller, bucket: str, config: LifecycleConfiguration) -> None:
        validate(config)
        try:
            await self._documents.put_config(caller, bucket, LIFECYCLE_CONFIG_KEY, to_json(config))
        finally:
            self._forget(bucket)

    async def delete(self, caller: Caller, bucket: str) -> None:
        await self._require_bucket(bucket)
        try:
            await self._documents.delete_config(caller, bucket, LIFECYCLE_CONFIG_KEY)
        finally:
            self._forget(bucket)

    async def load(self, bucket: str) -> LifecycleConfiguration | None:
        """The stored configuration, read now (None when there is none)."""
        stored = await self._meta.get_bucket_config(bucket, LIFECYCLE_CONFIG_KEY)
        return None if stored is None else from_json(stored)

    async def expiration(self, record: ObjectRecord) -> tuple[float, str] | None:
        """(expiry time, rule id) of the rule that expires this current version first."""
        if record.is_delete_marker or not record.is_latest:
            return None
        config = await self._cached(record.bucket)
        if config is None:
            return None
        return object_expiration(config, record.key, record.size, record.tags,
                                 record.last_modified, self.day_seconds)

    async def _cached(self, bucket: str) -> LifecycleConfiguration | None:
        hit, cached = self._cache.get(bucket)
        if hit:
            return cached
        token = self._cache.token()
        try:
            config = await self.load(bucket)
        except (ValueError, KeyError, TypeError):
            # A response header is never worth failing a read for.
            log.failure("unreadable lifecycle configuration of bucket {bucket}", bucket=bucket)
            config = None
        self._cache.store(bucket, config, token)
        return config

    def _forget(self, bucket: str) -> None:
        self._cache.invalidate(bucket)  # here and in the node's other worker processes

    async def _require_bucket(self, bucket: str) -> None:
        if await self._meta.get_bucket(bucket) is None:
            raise S3Error("NoSuchBucket", BucketName=bucket)


__all__ = ["LIFECYCLE_CONFIG_KEY", "LifecycleService"]
