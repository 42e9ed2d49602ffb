"""The authorization decision and the identity cache, with fake stores and a fake clock (no
reactor: every Deferred here has already fired, or is fired by the test)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer

from objstore.errors import S3Error
from objstore.iam.authorizer import (
    Authorizer,
    bucket_arn,
    object_arn,
    request_action,
)
from objstore.iam.identity import IdentityResolver, Principal
from objstore.iam.policy import BUILTIN_GRANTS
from objstore.meta.iam_records import EffectiveGrant, GrantRecord
from objstore.meta.records import CredentialRecord, UserRecord
from tests.unit.conftest import run

ALICE = Principal("u-alice", "alice", False, "AKALICE")
ROOT = Principal("u-root", "root", True, "AKROOT")


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def statement(effect: str, actions: list[str], resources: list[str]) -> dict[str, Any]:
    return {"Effect": effect, "Action": actions, "Resource": resources}


def grant(name: str, document: dict[str, Any]) -> EffectiveGrant:
    return EffectiveGrant(GrantRecord(f"g-{name}", name, document, 0.0), "direct")


class FakeSource:
    def __init__(self, grants: list[EffectiveGrant] | None = None) -> None:
        self.grants = grants or []
        self.calls = 0
        self.pending: defer.Deferred[list[EffectiveGrant] | None] | None = None

    def effective_grants(self, user_id: str) -> defer.Deferred[list[EffectiveGrant] | None]:
        self.calls += 1
        if self.pending is not None:
            return self.pending
        return defer.succeed(list(self.grants))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def authorizer(source: FakeSource, clock: FakeClock | None = None, ttl: float = 5.0
               ) -> Authorizer:
    return Authorizer(source, clock=clock or FakeClock(), ttl_seconds=ttl, max_entries=100)


PHOTOS = [
    grant("photos", doc(
        statement("Allow", ["s3:GetObject"], ["arn:aws:s3:::photos/*"]),
        statement("Deny", ["s3:GetObject"], ["arn:aws:s3:::photos/private/*"]),
    )),
]


def allowed(auth: Authorizer, action: str, resource: str,
            principal: Principal = ALICE) -> bool:
    return run(auth.allowed(principal, action, resource))


def test_root_bypasses_evaluation() -> None:
    source = FakeSource()
    auth = authorizer(source)
    assert allowed(auth, "s3:DeleteBucket", bucket_arn("any"), ROOT)
    assert allowed(auth, "svc:ManageUsers", "*", ROOT)
    assert run(auth.effective_actions(ROOT)) == ["*"]
    assert source.calls == 0


def test_allow_with_explicit_deny_winning() -> None:
    auth = authorizer(FakeSource(PHOTOS))
    assert allowed(auth, "s3:GetObject", object_arn("photos", "a.jpg"))
    assert not allowed(auth, "s3:GetObject", object_arn("photos", "private/b.jpg"))
    assert not allowed(auth, "s3:PutObject", object_arn("photos", "a.jpg"))
    assert not allowed(auth, "s3:ListBucket", bucket_arn("photos"))
    with pytest.raises(S3Error) as caught:
        run(auth.check(ALICE, "s3:GetObject", object_arn("photos", "private/b.jpg")))
    assert caught.value.code == "AccessDenied"


def test_deny_in_another_grant_wins() -> None:
    auth = authorizer(FakeSource([
        grant("all", doc(statement("Allow", ["*"], ["*"]))),
        grant("no-delete", doc(statement("Deny", ["s3:DeleteObject"], ["*"]))),
    ]))
    assert allowed(auth, "s3:PutObject", object_arn("b", "k"))
    assert allowed(auth, "svc:ManageUsers", "*")
    assert not allowed(auth, "s3:DeleteObject", object_arn("b", "k"))


def test_nothing_granted_is_denied() -> None:
    auth = authorizer(FakeSource([]))
    assert not allowed(auth, "s3:ListAllMyBuckets", "*")
    assert run(auth.effective_actions(ALICE)) == []


def test_service_resource_matches_the_aws_way_of_writing_it() -> None:
    auth = authorizer(FakeSource([
        grant("list", doc(statement("Allow", ["s3:ListAllMyBuckets", "svc:ViewServerInfo"],
                                    ["arn:aws:s3:::*"]))),
    ]))
    assert allowed(auth, "s3:ListAllMyBuckets", "*")
    assert not allowed(auth, "svc:ViewServerInfo", "*")  # admin actions need Resource "*"


def test_bucket_and_object_arns_are_distinct() -> None:
    auth = authorizer(FakeSource([
        grant("objects", doc(statement("Allow", ["s3:*"], ["arn:aws:s3:::b/*"]))),
    ]))
    assert allowed(auth, "s3:GetObject", object_arn("b", "k"))
    assert not allowed(auth, "s3:ListBucket", bucket_arn("b"))


def test_version_variants() -> None:
    assert request_action("s3:GetObject", {"versionId": "v1"}) == "s3:GetObjectVersion"
    assert request_action("s3:DeleteObject", {"versionId": "v1"}) == "s3:DeleteObjectVersion"
    assert request_action("s3:GetObject", {}) == "s3:GetObject"
    assert request_action("s3:PutObject", {"versionId": "v1"}) == "s3:PutObject"
    plain = authorizer(FakeSource([grant("get", doc(
        statement("Allow", ["s3:GetObject"], ["*"])))]))
    run(plain.check(ALICE, "s3:GetObject", object_arn("b", "k"), query={}))
    # The spec's s3:GetObject covers s3:GetObjectVersion (S3-ACTIONS.md) ...
    run(plain.check(ALICE, "s3:GetObject", object_arn("b", "k"), query={"versionId": "v1"}))
    # ... while an explicit Deny of the granular action still wins.
    denied = authorizer(FakeSource([grant("get", doc(
        statement("Allow", ["s3:GetObject"], ["*"]),
        statement("Deny", ["s3:GetObjectVersion"], ["*"])))]))
    run(denied.check(ALICE, "s3:GetObject", object_arn("b", "k"), query={}))
    with pytest.raises(S3Error):
        run(denied.check(ALICE, "s3:GetObject", object_arn("b", "k"),
                         query={"versionId": "v1"}))
    description, document = BUILTIN_GRANTS["S3ReadOnlyAccess"]
    read_only = authorizer(FakeSource([grant("S3ReadOnlyAccess", document)]))
    run(read_only.check(ALICE, "s3:GetObject", object_arn("b", "k"),
                        query={"versionId": "v1"}))
    with pytest.raises(S3Error):
        run(read_only.check(ALICE, "s3:DeleteObject", object_arn("b", "k"),
                            query={"versionId": "v1"}))


def test_builtin_grants() -> None:
    def auth_for(name: str) -> Authorizer:
        return authorizer(FakeSource([grant(name, BUILTIN_GRANTS[name][1])]))

    admin, full, read = (auth_for(n) for n in
                         ("AdministratorAccess", "S3FullAccess", "S3ReadOnlyAccess"))
    assert allowed(admin, "svc:ManageUsers", "*")
    assert allowed(full, "s3:DeleteBucket", bucket_arn("b"))
    assert not allowed(full, "svc:ManageUsers", "*")
    assert allowed(read, "s3:ListAllMyBuckets", "*")
    assert allowed(read, "s3:ListBucket", bucket_arn("b"))
    assert not allowed(read, "s3:PutObject", object_arn("b", "k"))


def test_effective_actions_are_the_union_of_allows() -> None:
    auth = authorizer(FakeSource([
        grant("a", doc(statement("Allow", ["s3:GetObject", "s3:ListBucket"], ["*"]),
                       statement("Deny", ["s3:PutObject"], ["*"]))),
        grant("b", doc(statement("Allow", ["s3:GetObject", "svc:ViewServerInfo"], ["*"]))),
    ]))
    assert run(auth.effective_actions(ALICE)) == [
        "s3:GetObject", "s3:ListBucket", "svc:ViewServerInfo"]


def test_an_invalid_stored_document_denies_everything() -> None:
    auth = authorizer(FakeSource([
        grant("ok", doc(statement("Allow", ["*"], ["*"]))),
        grant("broken", {"Version": "2012-10-17", "Statement": "nonsense"}),
    ]))
    assert not allowed(auth, "s3:GetObject", object_arn("b", "k"))


def test_policies_are_cached_for_the_ttl() -> None:
    source, clock = FakeSource(PHOTOS), FakeClock()
    auth = authorizer(source, clock, ttl=5.0)
    assert allowed(auth, "s3:GetObject", object_arn("photos", "a"))
    source.grants = []
    assert allowed(auth, "s3:GetObject", object_arn("photos", "a"))
    assert source.calls == 1
    clock.now += 5.0
    assert not allowed(auth, "s3:GetObject", object_arn("photos", "a"))
    assert source.calls == 2


def test_invalidate_takes_effect_on_the_next_decision() -> None:
    source = FakeSource(PHOTOS)
    auth = authorizer(source, ttl=3600.0)
    assert allowed(auth, "s3:GetObject", object_arn("photos", "a"))
    source.grants = []
    auth.invalidate()
    assert not allowed(auth, "s3:GetObject", object_arn("photos", "a"))


def test_a_load_overtaken_by_an_invalidation_is_not_cached() -> None:
    source = FakeSource(PHOTOS)
    auth = authorizer(source, ttl=3600.0)
    source.pending = defer.Deferred()
    results: list[bool] = []
    defer.Deferred.fromCoroutine(
        auth.allowed(ALICE, "s3:GetObject", object_arn("photos", "a"))).addCallback(
        results.append)
    auth.invalidate()  # an IAM change commits while the load is in flight
    source.pending.callback(list(PHOTOS))
    assert results == [True]
    source.pending = None
    source.grants = []
    assert not allowed(auth, "s3:GetObject", object_arn("photos", "a"))
    assert source.calls == 2


def test_zero_ttl_never_caches() -> None:
    source = FakeSource(PHOTOS)
    auth = authorizer(source, ttl=0.0)
    allowed(auth, "s3:GetObject", object_arn("photos", "a"))
    allowed(auth, "s3:GetObject", object_arn("photos", "a"))
    assert source.calls == 2


# -- identity resolution -----------------------------------------------------------------


class FakeIdentities:
    def __init__(self) -> None:
        self.pairs: dict[str, tuple[CredentialRecord, UserRecord]] = {}
        self.calls = 0

    def lookup_identity(self, key: str
                        ) -> defer.Deferred[tuple[CredentialRecord, UserRecord] | None]:
        self.calls += 1
        return defer.succeed(self.pairs.get(key))


def resolver(meta: FakeIdentities, ttl: float = 60.0) -> IdentityResolver:
    return IdentityResolver(meta, clock=FakeClock(), ttl_seconds=ttl, max_entries=10)


def test_inactive_credential_or_missing_user_authenticates_nobody() -> None:
    meta = FakeIdentities()
    user = UserRecord("u1", "alice", 0.0)
    meta.pairs["ACTIVE"] = (CredentialRecord("ACTIVE", "s", "u1", 0.0), user)
    meta.pairs["INACTIVE"] = (CredentialRecord("INACTIVE", "s", "u1", 0.0, active=False),
                              user)
    identities = resolver(meta)
    found = run(identities.resolve("ACTIVE"))
    assert found is not None and found.principal == Principal("u1", "alice", False, "ACTIVE")
    assert run(identities.resolve("INACTIVE")) is None
    assert run(identities.resolve("ORPHANED")) is None  # the store joins the user: gone


def test_invalidate_drops_a_revoked_credential_at_once() -> None:
    meta = FakeIdentities()
    user = UserRecord("u1", "alice", 0.0)
    meta.pairs["KEY"] = (CredentialRecord("KEY", "s", "u1", 0.0), user)
    identities = resolver(meta)
    assert run(identities.resolve("KEY")) is not None
    meta.pairs["KEY"] = (CredentialRecord("KEY", "s", "u1", 0.0, active=False), user)
    assert run(identities.resolve("KEY")) is not None  # cached
    identities.invalidate()
    assert run(identities.resolve("KEY")) is None


def test_allowed_outside_a_request_hears_the_bucket_policy() -> None:
    """`allowed` (the governance bypass, the admin API) is the one decision: the bucket an
    S3 ARN names has its say; a resource without a bucket is for identity policies."""
    from objstore.iam.bucket_access import BucketAccessLoader
    from objstore.meta.records import BucketRecord

    policies = {
        "locked": '{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*",'
                  '"Action":"s3:BypassGovernanceRetention","Resource":"arn:aws:s3:::locked/*"}]}',
        "open": '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":'
                '{"AWS":"u-alice"},"Action":"s3:BypassGovernanceRetention",'
                '"Resource":"arn:aws:s3:::open/*"}]}'}

    class Settings:
        def get_bucket(self, name: str) -> defer.Deferred[BucketRecord | None]:
            return defer.succeed(BucketRecord(name, "u-owner", "us-east-1", 0.0))

        def cached_bucket_config(self, bucket: str, key: str) -> defer.Deferred[str | None]:
            return defer.succeed(policies.get(bucket) if key == "policy" else None)

    everything = [grant("all", doc(statement("Allow", ["s3:*"], ["*"])))]
    loader = BucketAccessLoader(Settings(), clock=FakeClock(), ttl_seconds=5.0,
                                max_entries=10)
    auth = Authorizer(FakeSource(everything), clock=FakeClock(), ttl_seconds=5.0,
                      max_entries=10, buckets=loader)
    bypass = "s3:BypassGovernanceRetention"
    assert not allowed(auth, bypass, object_arn("locked", "k"))  # Deny wins over the grant
    assert allowed(auth, bypass, object_arn("other", "k"))
    assert allowed(auth, "s3:ListAllMyBuckets", "*")
    plain = Authorizer(FakeSource([]), clock=FakeClock(), ttl_seconds=5.0, max_entries=10,
                       buckets=loader)
    assert allowed(plain, bypass, object_arn("open", "k"))  # allowed by the policy alone
    assert not allowed(plain, bypass, object_arn("other", "k"))
    assert allowed(auth, bypass, object_arn("locked", "k"), ROOT)
