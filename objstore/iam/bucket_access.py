"""What a bucket says about access, loaded and compiled once: `BucketAccessLoader`.

A bucket's access settings are bucket configuration documents (`BucketConfigService`:
database, control record, replicated and exported like every other bucket setting):
`policy` (the bucket policy's JSON text, as the client sent it), `acl` (`Acl.to_json`),
`public_access_block` and `ownership`. A bucket without `ownership` is
BucketOwnerEnforced (ACLs disabled); without `public_access_block` the node's default
applies. The compiled `BucketAccess` is cached per bucket in the buckets scope, so any
bucket or configuration change, in this process, another worker or merged from a peer,
drops it. A stored policy that no longer compiles denies everyone but root (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.iam.acl_rules import Acl
from objstore.iam.bucket_policy import BucketPolicy, PolicyDocumentError, parse_bucket_policy
from objstore.iam.decision import BucketAccess
from objstore.iam.public_access import (
    NO_BLOCK,
    OWNER_ENFORCED,
    OWNERSHIPS,
    PublicAccessBlock,
)
from objstore.meta.coherence import BUCKETS, Counters, TtlCache
from objstore.meta.records import BucketRecord

log = Logger()

POLICY_KEY = "policy"
ACL_KEY = "acl"
PUBLIC_ACCESS_BLOCK_KEY = "public_access_block"
OWNERSHIP_KEY = "ownership"
ACCESS_KEYS = (POLICY_KEY, ACL_KEY, PUBLIC_ACCESS_BLOCK_KEY, OWNERSHIP_KEY)

_DENY_EVERYONE = ('{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*",'
                  '"Action":"s3:*","Resource":["arn:aws:s3:::%s","arn:aws:s3:::%s/*"]}]}')


class BucketSettingsSource(Protocol):
    """Where bucket records and configuration documents come from (`MetaStore`)."""

    def get_bucket(self, name: str) -> Deferred[BucketRecord | None]: ...

    def cached_bucket_config(self, bucket: str, key: str) -> Deferred[str | None]: ...


def compile_access(bucket: BucketRecord, documents: dict[str, str | None],
                   default_block: PublicAccessBlock = NO_BLOCK) -> BucketAccess:
    """The `BucketAccess` of a bucket from its stored documents (pure)."""
    policy = _policy(bucket.name, documents.get(POLICY_KEY))
    acl_text = documents.get(ACL_KEY)
    acl = Acl.from_json(acl_text) if acl_text else None
    block_text = documents.get(PUBLIC_ACCESS_BLOCK_KEY)
    block = PublicAccessBlock.from_json(block_text) if block_text else default_block
    ownership = (documents.get(OWNERSHIP_KEY) or OWNER_ENFORCED).strip()
    if ownership not in OWNERSHIPS:
        ownership = OWNER_ENFORCED
    return BucketAccess(bucket.name, bucket.owner_id, policy, acl, block, ownership)


def _policy(bucket: str, text: str | None) -> BucketPolicy | None:
    if not text:
        return None
    try:
        return parse_bucket_policy(text, bucket)
    except PolicyDocumentError as exc:
        log.error("the policy of bucket {bucket} is invalid and denies everyone: {why}",
                  bucket=bucket, why=str(exc))
        return parse_bucket_policy(_DENY_EVERYONE % (bucket, bucket), bucket)


class BucketAccessLoader:
    def __init__(
        self,
        source: BucketSettingsSource,
        *,
        clock: Callable[[], float],
        ttl_seconds: float,
        max_entries: int,
        counters: Counters | None = None,
        default_block: PublicAccessBlock = NO_BLOCK,
    ) -> None:
        self._source = source
        self._default_block = default_block
        self._cache: TtlCache[str, BucketAccess | None] = TtlCache(
            size=max_entries, ttl_seconds=ttl_seconds, clock=clock, counters=counters,
            scope=BUCKETS)

    @property
    def default_block(self) -> PublicAccessBlock:
        return self._default_block

    def cached(self, name: str) -> tuple[bool, BucketAccess | None]:
        """(hit, settings) from the cache alone: the hot path, without a coroutine."""
        return self._cache.get(name)

    async def bucket_access(self, name: str) -> BucketAccess | None:
        """The bucket's access settings; None when there is no such bucket."""
        hit, cached = self._cache.get(name)
        if hit:
            return cached
        token = self._cache.token()
        bucket = await self._source.get_bucket(name)
        access = None
        if bucket is not None:
            documents = {key: await self._source.cached_bucket_config(name, key)
                         for key in ACCESS_KEYS}
            access = compile_access(bucket, documents, self._default_block)
        self._cache.store(name, access, token)
        return access

    def invalidate(self) -> None:
        self._cache.invalidate()
