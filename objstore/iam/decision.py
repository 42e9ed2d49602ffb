"""The one authorization decision of a request, with its context (pure; no I/O).

`decide(AccessRequest) -> Decision` answers whether a caller (a user, or anonymous) may do
every action a request needs (`Need`: action and resource ARN, as the route table
declares them), from everything that has a say, combined as AWS combines them:

1. The server's root users bypass evaluation (the spec's rule).
2. For each need: the names a grant may use for it (the action, its aliases and the spec
   action that covers it, `actions.names_for`, plus any the route adds).
3. An explicit Deny that applies, in the caller's identity policies (grants) or in the
   bucket policy, refuses: Deny wins wherever it is.
4. Otherwise the need is allowed when an identity policy allows it, or the bucket policy
   allows it to this caller (identity and resource policies union: every user of this
   server is in the bucket owner's account), or, when the bucket's ownership setting
   enables ACLs, the bucket's ACL or the object's ACL grants it.
5. Anonymous callers have no identity policies: only the bucket policy and ACLs count.
   The bucket's public access block applies: IgnorePublicAcls drops grants to AllUsers
   and AuthenticatedUsers; RestrictPublicBuckets, while the policy is public, drops the
   policy's Allows for anonymous callers.
6. Nothing allowed means denied.

Condition keys are read through `ConditionValues` only when a bucket policy statement
has a Condition, so a request that meets no bucket policy costs what it cost before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from objstore.iam.acl_rules import OBJECT_ACL_ACTIONS, Acl, acl_allows
from objstore.iam.actions import names_for
from objstore.iam.bucket_policy import ANONYMOUS_CALLER, BucketPolicy, Caller
from objstore.iam.conditions import NO_VALUES, ConditionValues
from objstore.iam.policy import Policy, glob_match
from objstore.iam.public_access import NO_BLOCK, OWNER_ENFORCED, PublicAccessBlock

if TYPE_CHECKING:  # the caller's type only: this module imports no Twisted
    from objstore.iam.identity import Principal

ARN_PREFIX = "arn:aws:s3:::"


@dataclass(slots=True)  # not frozen: built per request, and a frozen init costs more
class Need:
    """One action a request needs on one resource (an ARN, or `*`). `bucket`: the bucket
    whose policy and ACLs have a say ("" for none: ListBuckets). `covered_by`: further
    names whose grant covers it in this request only (s3:PutObject covers the
    s3:PutObjectTagging of a PUT that carries tags)."""

    action: str
    resource: str
    bucket: str = ""
    covered_by: tuple[str, ...] = ()
    key: str = ""  # the object key, for object ACLs ("" for bucket-level needs)


@dataclass(frozen=True)
class BucketAccess:
    """What a bucket says about who may use it: its owner, policy, ACL, public access
    block (the bucket's own, or the node's default) and object ownership setting."""

    name: str
    owner_id: str
    policy: BucketPolicy | None = None
    acl: Acl | None = None
    block: PublicAccessBlock = NO_BLOCK
    ownership: str = OWNER_ENFORCED

    @property
    def acls_enabled(self) -> bool:
        return self.ownership != OWNER_ENFORCED


@dataclass(slots=True)
class AccessRequest:
    principal: Principal | None  # None: anonymous
    needs: tuple[Need, ...]
    identity: tuple[Policy, ...] = ()  # the caller's compiled grants
    buckets: Mapping[str, BucketAccess] = field(default_factory=dict)
    object_acls: Mapping[tuple[str, str], Acl] = field(default_factory=dict)
    values: ConditionValues = NO_VALUES


@dataclass(slots=True)
class Decision:
    allowed: bool
    reason: str
    need: Need | None = None  # the need that was refused


ROOT = Decision(True, "root user")
BY_IDENTITY = Decision(True, "allowed by an identity policy")
NOTHING_NEEDED = Decision(True, "nothing needed")
_NO_BUCKETS: Mapping[str, BucketAccess] = {}


def evaluated_resource(action: str, resource: str) -> str:
    """For S3 actions `*` is evaluated as the bare S3 ARN, so that identity statements
    written the AWS way (`arn:aws:s3:::*`) grant ListAllMyBuckets as on AWS."""
    if resource == "*" and action.startswith("s3:"):
        return ARN_PREFIX
    return resource


def decide(request: AccessRequest) -> Decision:
    principal = request.principal
    if principal is not None and principal.is_root:
        return ROOT
    verdict = NOTHING_NEEDED
    for need in request.needs:
        verdict = _decide_one(request, need)
        if not verdict.allowed:
            return verdict
    return verdict


def _identity(policies: tuple[Policy, ...], names: frozenset[str], resource: str
              ) -> tuple[bool, bool]:
    """(an explicit Deny applies, an Allow applies) in the caller's identity policies."""
    allowed = False
    for policy in policies:
        for statement in policy.statements:
            if statement.matches(names, resource):
                if not statement.allow:
                    return True, allowed
                allowed = True
    return False, allowed


def _caller(principal: Principal | None) -> Caller:
    if principal is None:
        return ANONYMOUS_CALLER
    return Caller(principal.user_id, principal.username)


def _decide_one(request: AccessRequest, need: Need) -> Decision:
    names = names_for(need.action)
    if need.covered_by:
        names = names | frozenset(need.covered_by)
    denied, allowed = _identity(request.identity,
                                names, evaluated_resource(need.action, need.resource))
    if denied:
        return Decision(False, "explicit deny in an identity policy", need)
    bucket = request.buckets.get(need.bucket) if need.bucket else None
    if bucket is None or (bucket.policy is None and not bucket.acls_enabled):
        # The common case: no bucket policy, ACLs disabled; the grants decide alone.
        return BY_IDENTITY if allowed else Decision(False, "no policy or ACL allows it", need)
    reason = "allowed by an identity policy" if allowed else ""
    caller = _caller(request.principal)
    if bucket.policy is not None:
        anonymous = caller.user_id is None
        public_allows = not (anonymous and bucket.block.restrict_public_buckets
                             and bucket.policy.public)
        deny, allow = bucket.policy.verdict(caller, names, need.resource, request.values,
                                            public_allows=public_allows)
        if deny is not None:
            return Decision(False, f"explicit deny in the bucket policy{_sid(deny.sid)}",
                            need)
        if allow is not None and not reason:
            reason = f"allowed by the bucket policy{_sid(allow.sid)}"
    if reason:
        return BY_IDENTITY if allowed else Decision(True, reason, need)
    if bucket.acls_enabled:
        ignore = bucket.block.ignore_public_acls
        if bucket.acl is not None and acl_allows(bucket.acl, caller.user_id, names,
                                                 bucket=True, ignore_public=ignore):
            return Decision(True, "allowed by the bucket ACL", need)
        object_acl = request.object_acls.get((need.bucket, need.key)) if need.key else None
        if object_acl is not None and acl_allows(object_acl, caller.user_id, names,
                                                 bucket=False, ignore_public=ignore):
            return Decision(True, "allowed by the object ACL", need)
    return Decision(False, "no policy or ACL allows it", need)


def _sid(sid: str) -> str:
    return f" ({sid})" if sid else ""


def acl_may_decide(bucket: BucketAccess | None, need: Need) -> bool:
    """An object ACL could still allow `need` in `bucket` (so the caller should load it
    and ask again): the bucket enables ACLs, the need is on an object and is an action an
    object ACL grants (reading the object or its ACL, writing its ACL)."""
    if not need.key or bucket is None or not bucket.acls_enabled:
        return False
    return not OBJECT_ACL_ACTIONS.isdisjoint(names_for(need.action))


__all__ = ["AccessRequest", "BucketAccess", "Decision", "Need", "decide", "glob_match"]
