"""The authorization of requests: gathers a request's context and asks the one decision.

`authorize(principal or None, needs, values)` is what the S3 API asks for every request
(the needs are the route's declared actions): it loads the caller's compiled identity
policies (cached per user) and the access settings of each bucket the needs name
(`BucketAccessLoader`: policy, ACL, public access block, ownership; cached per bucket),
and returns `decision.decide`'s answer. An object's ACL is read by the caller only when
`object_acl_wanted` says it could change a refusal (the bucket enables ACLs and the
refused action is one an object ACL grants), then passed to a second `authorize`, so the
common path never reads an object row for it. `check` and
`allowed` ask the same decision for one action on one resource outside an S3 request's
admission: the engine's governance bypass (s3:BypassGovernanceRetention on the version,
so a bucket policy's Allow or Deny of it counts as on AWS) and the admin API (its
actions name no bucket: identity policies decide; its archive reads name objects).

Root users bypass evaluation. For everyone else identity evaluation is over the
user's effective policies (direct grants plus the grants of every team the user belongs
to): an explicit Deny anywhere wins, and nothing allowed means denied. The compiled
policies are cached per user for `[server.cache] ttl_seconds`; `invalidate()` is called on
every IAM change in this process, so a revoked grant or a removed team membership takes
effect on the very next request. A stored document that no longer compiles denies
everything for its user (fail closed) rather than being skipped, since skipping a Deny
would widen access.

Resources: `arn:aws:s3:::bucket/key` for object operations, `arn:aws:s3:::bucket` for bucket
operations and `*` for operations without a resource (ListBuckets, admin endpoints). For
S3 actions `*` is evaluated as the bare S3 ARN `arn:aws:s3:::`, so that statements written
the AWS way (`arn:aws:s3:::*`) grant ListAllMyBuckets as they do on AWS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.errors import S3Error
from objstore.iam.acl_rules import Acl
from objstore.iam.actions import VERSION_VARIANTS
from objstore.iam.bucket_access import BucketAccessLoader
from objstore.iam.conditions import NO_VALUES, ConditionValues
from objstore.iam.decision import (
    ROOT,
    AccessRequest,
    BucketAccess,
    Decision,
    Need,
    acl_may_decide,
    decide,
)
from objstore.iam.decision import evaluated_resource as evaluated_resource
from objstore.iam.identity import Principal
from objstore.iam.policy import (
    Policy,
    PolicyError,
    Statement,
    allowed_actions,
    compile_policy,
    validate,
)
from objstore.meta.coherence import IAM, Counters, TtlCache
from objstore.meta.iam_records import EffectiveGrant

log = Logger()

ARN_PREFIX = "arn:aws:s3:::"
ROOT_ACTIONS = ["*"]


_NO_ACLS: Mapping[tuple[str, str], Acl] = {}
_DENY_ALL = Policy((Statement(allow=False, actions=("*",), resources=("*",)),))


class PolicySource(Protocol):
    """Where effective grants come from (`MetaStore`)."""

    def effective_grants(self, user_id: str) -> Deferred[list[EffectiveGrant] | None]: ...


def bucket_arn(bucket: str) -> str:
    return f"{ARN_PREFIX}{bucket}"


def object_arn(bucket: str, key: str) -> str:
    return f"{ARN_PREFIX}{bucket}/{key}"


def request_action(action: str, query: Mapping[str, str] | None) -> str:
    """The action a request needs: the version variant when it names a versionId."""
    if query is not None and "versionId" in query:
        return VERSION_VARIANTS.get(action, action)
    return action


def need_of(action: str, resource: str) -> Need:
    """The need of `action` on `resource`, with the bucket and key an S3 ARN names."""
    if not resource.startswith(ARN_PREFIX):
        return Need(action, resource)
    bucket, _, key = resource[len(ARN_PREFIX):].partition("/")
    return Need(action, resource, bucket, key=key)


def compile_grants(grants: list[EffectiveGrant]) -> tuple[Policy, ...]:
    """Each distinct grant once; a document that fails validation becomes deny-all."""
    seen: dict[str, Policy] = {}
    for entry in grants:
        grant = entry.grant
        if grant.grant_id in seen:
            continue
        try:
            validate(grant.document)
            seen[grant.grant_id] = compile_policy(grant.document)
        except PolicyError as exc:
            log.error("grant {name} ({grant_id}) is invalid and denies everything: {why}",
                      name=grant.name, grant_id=grant.grant_id, why=str(exc))
            seen[grant.grant_id] = _DENY_ALL
    return tuple(seen.values())


class Authorizer:
    def __init__(
        self,
        source: PolicySource,
        *,
        clock: Callable[[], float],
        ttl_seconds: float,
        max_entries: int,
        counters: Counters | None = None,
        buckets: BucketAccessLoader | None = None,
    ) -> None:
        self._source = source
        self._buckets = buckets
        self._cache: TtlCache[str, tuple[Policy, ...]] = TtlCache(
            size=max_entries, ttl_seconds=ttl_seconds, clock=clock, counters=counters,
            scope=IAM)

    async def authorize(
        self,
        principal: Principal | None,
        needs: tuple[Need, ...],
        values: ConditionValues = NO_VALUES,
        object_acls: Mapping[tuple[str, str], Acl] | None = None,
    ) -> Decision:
        """The decision for a caller (None: anonymous) and every need of its request;
        `object_acls`: the ACLs of objects, by (bucket, key), that the caller loaded after
        `object_acl_wanted` asked for one."""
        if principal is not None and principal.is_root:
            return ROOT
        identity: tuple[Policy, ...] = ()
        if principal is not None:
            hit, cached = self._cache.get(principal.user_id)
            identity = cached if hit and cached is not None else \
                await self.policies(principal.user_id)
        buckets: dict[str, BucketAccess] = {}
        loader = self._buckets
        if loader is not None:
            for need in needs:
                name = need.bucket
                if name and name not in buckets:
                    hit, access = loader.cached(name)
                    if not hit:
                        access = await loader.bucket_access(name)
                    if access is not None:
                        buckets[name] = access
        return decide(AccessRequest(principal, needs, identity, buckets,
                                    object_acls or _NO_ACLS, values))

    async def object_acl_wanted(self, decision: Decision) -> tuple[str, str] | None:
        """(bucket, key) of the object whose ACL could still allow what `decision`
        refused (the bucket enables ACLs, the action is one an object ACL grants); None
        when no object ACL could. Asked only after a refusal, so an allowed request never
        pays for object ACLs."""
        need = decision.need
        if decision.allowed or need is None or not need.key:
            return None
        access = await self.bucket_access(need.bucket)
        return (need.bucket, need.key) if acl_may_decide(access, need) else None

    def cached_bucket_access(self, bucket: str) -> tuple[bool, BucketAccess | None]:
        """(hit, settings) from the per-bucket cache alone (the hot path: no coroutine)."""
        if self._buckets is None:
            return True, None
        return self._buckets.cached(bucket)

    async def bucket_access(self, bucket: str) -> BucketAccess | None:
        if self._buckets is None:
            return None
        return await self._buckets.bucket_access(bucket)

    async def check(
        self,
        principal: Principal,
        action: str,
        resource: str,
        *,
        query: Mapping[str, str] | None = None,
    ) -> None:
        """Raise S3Error("AccessDenied") unless `action` on `resource` is allowed. With the
        request's `query`, a versionId selects the version variant of the action."""
        if not await self.allowed(principal, request_action(action, query), resource):
            raise S3Error("AccessDenied")

    async def allowed(self, principal: Principal, action: str, resource: str) -> bool:
        """The decision for one action on one resource outside an S3 request's admission
        (the governance bypass of the engine, the admin API): the bucket an S3 ARN names
        has its say (its policy's Allow and Deny, as for any S3 request), without
        condition values (a statement with a Condition on a request key does not match)."""
        if principal.is_root:
            return True
        caller = None if principal.anonymous else principal
        return (await self.authorize(caller, (need_of(action, resource),))).allowed

    async def effective_actions(self, principal: Principal) -> list[str]:
        """`["*"]` for root users, else the union of the Allow actions (GET /admin/me)."""
        if principal.is_root:
            return list(ROOT_ACTIONS)
        return allowed_actions(await self.policies(principal.user_id))

    async def policies(self, user_id: str) -> tuple[Policy, ...]:
        hit, cached = self._cache.get(user_id)
        if hit and cached is not None:
            return cached
        token = self._cache.token()
        grants = await self._source.effective_grants(user_id)
        policies = compile_grants(grants or [])
        self._cache.store(user_id, policies, token)
        return policies

    def invalidate(self) -> None:
        """Forget every cached decision input (called on every IAM change), in every
        worker process of the node."""
        self._cache.invalidate()
