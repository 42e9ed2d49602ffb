"""Per-bucket quotas: the rule, its stored form, and the use cases of the admin endpoints.

A quota limits a bucket's bytes and/or object count, counted as `bucket_usage` counts them:
every version of every key, delete markers excluded (they hold no bytes and are never
refused, so deletes always work). Parts of open multipart uploads are not counted; the
completion that turns them into an object is.

The rule is checked INSIDE the writing transaction, after the store holds the seq row lock
that every object writer queues on (`SyncMetaStore.put_object` with `QUOTA_RULE`, which
also reads the quota document in that transaction; `complete_upload` with a
`usage_check`), so usage stays exact under concurrent writers, overwrites, deletes and
completions: a write that would take a limited dimension above its limit raises
S3Error("QuotaExceeded"), the transaction rolls back and the engine removes the blob it
had written. A write that does not grow a dimension is never refused by it, so a bucket
whose quota was lowered below its usage can still shrink.

Cost: a bucket WITH a quota pays one read of its usage counters per write (one row, kept by
triggers on the objects table: meta/usage_counters.py), whatever the bucket holds; buckets
without one pay nothing but the lookup of the quota document, which `put_object` folds
into its bucket check (`QUOTA_RULE`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.changes import Caller
from objstore.errors import S3Error
from objstore.meta.store import Usage

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

QUOTA_CONFIG_KEY = "quota"


@dataclass(frozen=True)
class BucketQuota:
    """None = unlimited."""

    max_bytes: int | None = None
    max_objects: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_bytes is None and self.max_objects is None

    def to_json(self) -> str:
        return json.dumps({"max_bytes": self.max_bytes, "max_objects": self.max_objects},
                          sort_keys=True)

    @staticmethod
    def from_json(text: str) -> BucketQuota:
        data = json.loads(text)
        return BucketQuota(_limit(data.get("max_bytes")), _limit(data.get("max_objects")))


def _limit(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"invalid quota limit {value!r}")
    return value


@dataclass(frozen=True)
class UsageFigures:
    objects: int
    bytes: int


def quota_problem(quota: BucketQuota, before: Usage, after: Usage) -> str | None:
    """Why a write taking usage from `before` to `after` (object count, bytes) breaks the
    quota, or None. Only a dimension that grows is refused."""
    limits = (("objects", quota.max_objects, 0), ("bytes", quota.max_bytes, 1))
    for name, limit, index in limits:
        if limit is not None and after[index] > limit and after[index] > before[index]:
            return f"the bucket may hold at most {limit} {name}; this write would make it " \
                   f"{after[index]}"
    return None


@dataclass(frozen=True)
class QuotaCheck:
    """The `usage_check` the store runs inside a write transaction."""

    bucket: str
    quota: BucketQuota

    def __call__(self, before: Usage, after: Usage) -> None:
        problem = quota_problem(self.quota, before, after)
        if problem is not None:
            raise S3Error("QuotaExceeded", f"The bucket quota would be exceeded: {problem}.",
                          BucketName=self.bucket)


@dataclass(frozen=True)
class QuotaRule:
    """The quota as the store's `UsageRule`: object writes hand it to `put_object`, which
    reads the bucket's quota document inside the write transaction (no read before it)."""

    config_key: str = QUOTA_CONFIG_KEY

    def check_for(self, bucket: str, document: str) -> QuotaCheck | None:
        quota = BucketQuota.from_json(document)
        return None if quota.unlimited else QuotaCheck(bucket, quota)


QUOTA_RULE = QuotaRule()


async def quota_check(meta: MetaStore, bucket: str) -> QuotaCheck | None:
    """The check an object write to `bucket` must pass (None: the bucket has no quota)."""
    stored = await meta.get_bucket_config(bucket, QUOTA_CONFIG_KEY)
    if stored is None:
        return None
    quota = BucketQuota.from_json(stored)
    return None if quota.unlimited else QuotaCheck(bucket, quota)


class NoSuchBucket(LookupError):
    """The admin use cases name a bucket that does not exist."""


class BucketDocumentService:
    """One configuration document of a bucket that the admin API sets (`CONFIG_KEY`: a
    quota, compression): read, stored, removed, NoSuchBucket for a bucket that does not
    exist. Changes go through `BucketConfigService`, which keeps them in the control
    record for `recover` and replicates them."""

    CONFIG_KEY: str

    def __init__(self, meta: MetaStore, documents: BucketConfigService) -> None:
        self._meta = meta
        self._documents = documents

    async def _stored(self, bucket: str) -> str | None:
        await self._require_bucket(bucket)
        text: str | None = await self._meta.get_bucket_config(bucket, self.CONFIG_KEY)
        return text

    async def _put(self, caller: Caller, bucket: str, text: str) -> None:
        try:
            await self._documents.put_config(caller, bucket, self.CONFIG_KEY, text)
        except S3Error as error:
            if error.code == "NoSuchBucket":
                raise NoSuchBucket(bucket) from None
            raise

    async def delete(self, caller: Caller, bucket: str) -> None:
        await self._require_bucket(bucket)
        await self._documents.delete_config(caller, bucket, self.CONFIG_KEY)

    async def _require_bucket(self, bucket: str) -> None:
        if await self._meta.get_bucket(bucket) is None:
            raise NoSuchBucket(bucket)


class QuotaService(BucketDocumentService):
    """Read, set and remove a bucket's quota (the admin endpoints)."""

    CONFIG_KEY = QUOTA_CONFIG_KEY

    async def get(self, bucket: str) -> tuple[BucketQuota, UsageFigures]:
        stored = await self._stored(bucket)
        quota = BucketQuota() if stored is None else BucketQuota.from_json(stored)
        count, total = await self._meta.bucket_usage(bucket)
        return quota, UsageFigures(count, total)

    async def put(self, caller: Caller, bucket: str, quota: BucketQuota) -> None:
        """Set the quota; an unlimited one removes it."""
        if quota.unlimited:
            await self.delete(caller, bucket)
            return
        await self._put(caller, bucket, quota.to_json())


__all__ = [
    "QUOTA_CONFIG_KEY",
    "QUOTA_RULE",
    "BucketDocumentService",
    "BucketQuota",
    "NoSuchBucket",
    "QuotaCheck",
    "QuotaRule",
    "QuotaService",
    "UsageFigures",
    "quota_check",
    "quota_problem",
]
