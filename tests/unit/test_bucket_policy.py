"""Bucket policies, conditions, ACL rules and the one decision, as pure functions (issue
29): validation as AWS (MalformedPolicy for anything not valid, never a crash: Hypothesis
over arbitrary JSON), Principal/NotPrincipal/NotAction/NotResource, every condition
operator family, public detection, and how identity policies, bucket policy, ACLs and the
public access block combine."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.iam.acl_rules import (
    ALL_USERS,
    AUTHENTICATED_USERS,
    Acl,
    AclError,
    Grant,
    canned_acl,
    header_grants,
)
from objstore.iam.bucket_access import compile_access
from objstore.iam.bucket_policy import (
    Caller,
    PolicyDocumentError,
    parse_bucket_policy,
)
from objstore.iam.conditions import ConditionError, FixedValues, all_hold, compile_conditions
from objstore.iam.decision import AccessRequest, BucketAccess, Need, acl_may_decide, decide
from objstore.iam.identity import Principal
from objstore.iam.policy import compile_policy
from objstore.iam.public_access import PublicAccessBlock
from objstore.meta.records import BucketRecord

B = "bkt"
OBJ = f"arn:aws:s3:::{B}/k"
ALICE = Principal("u-alice", "alice", False, "AK1")
BOB = Principal("u-bob", "bob", False, "AK2")
ROOT = Principal("u-root", "root", True, "AK0")


def doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def stmt(effect: str = "Allow", principal: Any = "*", action: Any = "s3:GetObject",
         resource: Any = f"arn:aws:s3:::{B}/*", **extra: Any) -> dict[str, Any]:
    found = {"Effect": effect, "Principal": principal, "Action": action,
             "Resource": resource}
    found.update(extra)
    return found


def values(**found: str) -> FixedValues:
    return FixedValues({k.replace("__", ":").replace("_", "-").lower(): (v,)
                        for k, v in found.items()})


# -- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "", "[]", "nope", "{", json.dumps({"Statement": []}),
    json.dumps({"Version": "2011-01-01", "Statement": [stmt()]}),
    doc({**stmt(), "Principal": None}),
    doc({k: v for k, v in stmt().items() if k != "Principal"}),
    doc(stmt(principal={"Federated": "x"})),
    doc(stmt(principal={"AWS": "not an arn!"})),
    doc(stmt(effect="Maybe")),
    doc(stmt(action="s3:Fly")),
    doc(stmt(action="svc:ManageUsers")),
    doc(stmt(resource="arn:aws:s3:::elsewhere/*")),
    doc(stmt(resource="arn:aws:iam::1:user/x")),
    doc(stmt(action="s3:GetObject", resource=f"arn:aws:s3:::{B}")),
    doc(stmt(action="s3:ListBucket", resource=f"arn:aws:s3:::{B}/x")),
    doc({**stmt(), "NotAction": "s3:PutObject"}),
    doc(stmt(Condition={"StringEqualz": {"aws:Referer": "x"}})),
    doc(stmt(Condition={"StringEquals": {"aws:Nonsense": "x"}})),
    doc(stmt(Condition={"IpAddress": {"aws:SourceIp": "300.1.1.1/8"}})),
    doc(stmt(Condition={"NumericLessThan": {"s3:max-keys": "ten"}})),
    doc(stmt(Condition={"Null": {"s3:prefix": ["true", "false"]}})),
    doc(stmt(Sid="a"), stmt(Sid="a")),
    doc({**stmt(), "Extra": 1}),
    "{" + " " * 30000 + "}",
])
def test_malformed_policies(text: str) -> None:
    with pytest.raises(PolicyDocumentError):
        parse_bucket_policy(text, B)


def test_valid_policies_as_clients_write_them() -> None:
    minio_read_only = doc(
        stmt(principal={"AWS": ["*"]}, action=["s3:GetBucketLocation", "s3:ListBucket"],
             resource=[f"arn:aws:s3:::{B}"]),
        stmt(principal={"AWS": ["*"]}, action=["s3:GetObject"],
             resource=[f"arn:aws:s3:::{B}/*"]))
    assert parse_bucket_policy(minio_read_only, B).public
    single = json.dumps({"Statement": stmt(action="s3:*", resource="*")})  # no Version
    assert parse_bucket_policy(single, B).public
    named = parse_bucket_policy(doc(stmt(principal={"AWS": [
        "arn:aws:iam::123456789012:user/alice", "u-bob"]})), B)
    assert not named.public
    pinned = parse_bucket_policy(doc(stmt(
        Condition={"IpAddress": {"aws:SourceIp": ["10.0.0.0/8"]}})), B)
    assert not pinned.public
    assert parse_bucket_policy(doc(stmt(effect="Deny")), B).public is False
    assert parse_bucket_policy(doc({**{k: v for k, v in stmt().items()
                                      if k != "Principal"},
                                   "NotPrincipal": {"AWS": "u-bob"}}), B).public


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["Version", "Statement", "Effect", "Principal",
                                       "Action", "Resource", "Condition", "NotAction",
                                       "AWS", "Sid", "StringLike", "aws:SourceIp",
                                       "NotPrincipal", "NotResource", "Id"])
                      | st.text(max_size=8), children, max_size=5),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_any_json_is_a_policy_or_a_policy_error(document: Any) -> None:
    """4xx (MalformedPolicy) or success: never another exception (a 500)."""
    try:
        policy = parse_bucket_policy(json.dumps(document), B)
    except PolicyDocumentError:
        return
    policy.verdict(Caller("u"), ("s3:GetObject",), OBJ, values(aws__SourceIp="1.2.3.4"))
    assert isinstance(policy.public, bool)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_policy_or_a_policy_error(body: bytes) -> None:
    try:
        parse_bucket_policy(body, B)
    except PolicyDocumentError:
        pass


# -- conditions ---------------------------------------------------------------------------

@pytest.mark.parametrize(("block", "request_values", "holds"), [
    ({"StringEquals": {"s3:prefix": "a"}}, {"s3:prefix": "a"}, True),
    ({"StringEquals": {"s3:prefix": ["x", "a"]}}, {"s3:prefix": "a"}, True),
    ({"StringNotEquals": {"s3:prefix": "a"}}, {"s3:prefix": "a"}, False),
    ({"StringEqualsIgnoreCase": {"s3:prefix": "A"}}, {"s3:prefix": "a"}, True),
    ({"StringLike": {"aws:Referer": "https://*.example.com/*"}},
     {"aws:referer": "https://www.example.com/page"}, True),
    ({"StringNotLike": {"aws:Referer": "https://*.example.com/*"}},
     {"aws:referer": "https://evil.test/"}, True),
    ({"StringEquals": {"s3:prefix": "a"}}, {}, False),
    ({"StringEqualsIfExists": {"s3:prefix": "a"}}, {}, True),
    ({"StringNotEquals": {"s3:prefix": "a"}}, {}, False),
    ({"Null": {"s3:prefix": "true"}}, {}, True),
    ({"Null": {"s3:prefix": "false"}}, {"s3:prefix": "a"}, True),
    ({"NumericLessThanEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": "10"}, True),
    ({"NumericGreaterThan": {"s3:max-keys": "10"}}, {"s3:max-keys": "9"}, False),
    ({"NumericEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": "ten"}, False),
    ({"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}},
     {"aws:currenttime": "2026-11-28T03:00:00Z"}, True),
    ({"DateGreaterThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}},
     {"aws:currenttime": "2026-11-28T03:00:00Z"}, False),
    ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:securetransport": "false"}, True),
    ({"Bool": {"aws:SecureTransport": False}}, {"aws:securetransport": "true"}, False),
    ({"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}}, {"aws:sourceip": "127.0.0.1"}, True),
    ({"IpAddress": {"aws:SourceIp": ["10.0.0.0/8", "::1/128"]}},
     {"aws:sourceip": "::1"}, True),
    ({"NotIpAddress": {"aws:SourceIp": "127.0.0.0/8"}}, {"aws:sourceip": "10.1.1.1"}, True),
    ({"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}}, {"aws:sourceip": "::ffff:127.0.0.1"},
     True),
    ({"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:user/a*"}},
     {"aws:principalarn": "arn:aws:iam::000000000000:user/alice"}, True),
    ({"StringEquals": {"s3:ExistingObjectTag/team": "red"}},
     {"s3:existingobjecttag/team": "red"}, True),
    ({"StringEquals": {"s3:RequestObjectTag/team": "red"}}, {}, False),
    ({"StringEquals": {"s3:x-amz-acl": "public-read"}}, {"s3:x-amz-acl": "private"}, False),
    ({"StringEquals": {"s3:x-amz-server-side-encryption": "AES256"}},
     {"s3:x-amz-server-side-encryption": "AES256"}, True),
    ({"StringEquals": {"s3:signatureversion": "AWS4-HMAC-SHA256"}},
     {"s3:signatureversion": "AWS4-HMAC-SHA256"}, True),
    ({"StringEquals": {"aws:UserAgent": "x"}, "Bool": {"aws:SecureTransport": "true"}},
     {"aws:useragent": "x", "aws:securetransport": "false"}, False),
])
def test_condition_operators(block: dict[str, Any], request_values: dict[str, str],
                             holds: bool) -> None:
    clauses = compile_conditions(block)
    found = FixedValues({k: (v,) for k, v in request_values.items()})
    assert all_hold(clauses, found) is holds


def test_set_operators() -> None:
    keys = FixedValues({"s3:requestobjecttagkeys": ("a", "b")})
    assert all_hold(compile_conditions(
        {"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a", "b", "c"]}}), keys)
    assert not all_hold(compile_conditions(
        {"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}}), keys)
    assert all_hold(compile_conditions(
        {"ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": ["b"]}}), keys)
    assert all_hold(compile_conditions(  # vacuously true on a missing key
        {"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}}), FixedValues({}))


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_any_condition_block_compiles_or_is_refused(block: Any) -> None:
    try:
        clauses = compile_conditions(block)
    except ConditionError:
        return
    all_hold(clauses, FixedValues({c.key: ("1",) for c in clauses}))


# -- ACL rules ----------------------------------------------------------------------------

def test_canned_acls_and_header_grants() -> None:
    assert canned_acl("public-read", "o").public
    assert not canned_acl("private", "o").public
    assert canned_acl("bucket-owner-full-control", "w", "o").grants[-1] == \
        Grant("o", "FULL_CONTROL")
    with pytest.raises(AclError):
        canned_acl("everyone-please", "o")
    grants = header_grants({"x-amz-grant-read": f'uri="{ALL_USERS}", id="u-bob"',
                            "x-amz-grant-write": 'id="u-carol"'})
    assert grants == (Grant(ALL_USERS, "READ"), Grant("u-bob", "READ"),
                      Grant("u-carol", "WRITE"))
    for bad in ('emailAddress="a@b.c"', "id=", "uri=http://nowhere"):
        with pytest.raises(AclError):
            header_grants({"x-amz-grant-read": bad})
    acl = Acl("o", (Grant("o", "FULL_CONTROL"), Grant(AUTHENTICATED_USERS, "READ")))
    assert Acl.from_json(acl.to_json()) == acl


# -- the decision -------------------------------------------------------------------------

def access(policy: str | None = None, *, acl: Acl | None = None,
           block: PublicAccessBlock | None = None, ownership: str | None = None
           ) -> BucketAccess:
    documents = {"policy": policy, "acl": None if acl is None else acl.to_json(),
                 "public_access_block": None if block is None else block.to_json(),
                 "ownership": ownership}
    return compile_access(BucketRecord(B, "u-owner", "us-east-1", 0.0), documents)


def allowed(principal: Principal | None, bucket: BucketAccess | None, action: str = "s3:GetObject",
            resource: str = OBJ, identity: tuple[dict[str, Any], ...] = (),
            request_values: FixedValues | None = None) -> bool:
    policies = tuple(compile_policy({"Version": "2012-10-17", "Statement": [s]})
                     for s in identity)
    need = Need(action, resource, B, key="k" if "/" in resource[13:] else "")
    request = AccessRequest(principal, (need,), policies, {B: bucket} if bucket else {},
                            values=request_values or FixedValues({}))
    return decide(request).allowed


def id_allow(action: str = "s3:GetObject", resource: str = "*",
             effect: str = "Allow") -> dict[str, Any]:
    return {"Effect": effect, "Action": [action], "Resource": [resource]}


def test_root_bypasses_and_nothing_allowed_is_denied() -> None:
    deny_all = access(doc(stmt(effect="Deny", action="s3:*", resource="*")))
    assert allowed(ROOT, deny_all)
    assert not allowed(ALICE, None)
    assert not allowed(None, None)


def test_identity_and_bucket_policy_union_and_deny_wins() -> None:
    assert allowed(ALICE, None, identity=(id_allow(),))
    by_policy = access(doc(stmt(principal={"AWS": "u-alice"})))
    assert allowed(ALICE, by_policy)
    assert not allowed(BOB, by_policy)
    assert not allowed(None, by_policy)  # a named principal is never anonymous
    denying = access(doc(stmt(effect="Deny", principal={"AWS": "u-alice"})))
    assert not allowed(ALICE, denying, identity=(id_allow(),))
    assert allowed(BOB, denying, identity=(id_allow(),))
    assert not allowed(ALICE, by_policy, identity=(id_allow(effect="Deny"),))
    account = access(doc(stmt(principal={"AWS": "arn:aws:iam::123456789012:root"})))
    assert allowed(BOB, account) and not allowed(None, account)


def test_not_principal_not_action_not_resource() -> None:
    everyone_but_bob = access(doc({"Effect": "Deny", "NotPrincipal": {"AWS": "u-bob"},
                                   "Action": "s3:*", "Resource": "*"}))
    assert not allowed(ALICE, everyone_but_bob, identity=(id_allow(),))
    assert allowed(BOB, everyone_but_bob, identity=(id_allow(),))
    all_but_delete = access(doc({"Effect": "Allow", "Principal": "*",
                                 "NotAction": "s3:DeleteObject", "Resource": "*"}))
    assert allowed(None, all_but_delete)
    assert not allowed(None, all_but_delete, "s3:DeleteObject")
    not_secret = access(doc({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                             "NotResource": f"arn:aws:s3:::{B}/secret/*"}))
    assert allowed(None, not_secret)
    assert not allowed(None, not_secret, resource=f"arn:aws:s3:::{B}/secret/x")


def test_spec_actions_cover_sub_actions_and_granular_deny_wins() -> None:
    public = access(doc(stmt()))
    assert allowed(None, public, "s3:GetObjectVersion")
    assert allowed(ALICE, None, "s3:GetObjectVersion", identity=(id_allow(),))
    assert allowed(ALICE, None, "s3:ListBucketVersions", f"arn:aws:s3:::{B}",
                   identity=(id_allow("s3:ListBucket"),))
    granular_deny = access(doc(stmt(), stmt(effect="Deny", action="s3:GetObjectVersion")))
    assert allowed(None, granular_deny, "s3:GetObject")
    assert not allowed(None, granular_deny, "s3:GetObjectVersion")


def test_conditions_in_the_decision() -> None:
    local = access(doc(stmt(Condition={"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}})))
    assert allowed(None, local, request_values=values(aws__SourceIp="127.0.0.9"))
    assert not allowed(None, local, request_values=values(aws__SourceIp="8.8.8.8"))
    tls_only = access(doc(stmt(effect="Deny", action="s3:*", resource="*",
                               Condition={"Bool": {"aws:SecureTransport": "false"}})))
    assert not allowed(ALICE, tls_only, identity=(id_allow(),),
                       request_values=values(aws__SecureTransport="false"))
    assert allowed(ALICE, tls_only, identity=(id_allow(),),
                   request_values=values(aws__SecureTransport="true"))


def test_acls_count_only_when_enabled_and_public_access_block() -> None:
    public_acl = canned_acl("public-read", "u-owner")
    enforced = access(acl=public_acl)
    assert not allowed(None, enforced, "s3:ListBucket", f"arn:aws:s3:::{B}")
    writer = access(acl=public_acl, ownership="ObjectWriter")
    assert allowed(None, writer, "s3:ListBucket", f"arn:aws:s3:::{B}")
    assert not allowed(None, writer, "s3:PutObject")
    ignoring = access(acl=public_acl, ownership="ObjectWriter",
                      block=PublicAccessBlock(ignore_public_acls=True))
    assert not allowed(None, ignoring, "s3:ListBucket", f"arn:aws:s3:::{B}")
    authenticated = access(acl=canned_acl("authenticated-read", "u-owner"),
                           ownership="BucketOwnerPreferred")
    assert allowed(ALICE, authenticated, "s3:ListBucket", f"arn:aws:s3:::{B}")
    assert not allowed(None, authenticated, "s3:ListBucket", f"arn:aws:s3:::{B}")
    restricted = access(doc(stmt()), block=PublicAccessBlock(restrict_public_buckets=True))
    assert not allowed(None, restricted)
    assert allowed(ALICE, access(doc(stmt(principal={"AWS": "u-alice"})),
                                 block=PublicAccessBlock.all_on()))


def test_object_acls_in_the_decision() -> None:
    """An object's ACL counts only where ACLs are enabled, for the actions an object ACL
    grants, and IgnorePublicAcls drops its public grants; `acl_may_decide` says when the
    caller should load it (never for a write, never where ACLs are disabled)."""
    public = canned_acl("public-read", "u-owner")
    need = Need("s3:GetObject", OBJ, B, key="k")

    def with_object_acl(bucket: BucketAccess, action: str = "s3:GetObject",
                        principal: Principal | None = None) -> bool:
        one = Need(action, OBJ, B, key="k")
        return decide(AccessRequest(principal, (one,), (), {B: bucket},
                                    {(B, "k"): public})).allowed

    writer = access(ownership="ObjectWriter")
    assert with_object_acl(writer)
    assert with_object_acl(writer, "s3:GetObjectVersion")
    assert not with_object_acl(writer, "s3:PutObject")
    assert not with_object_acl(writer, "s3:DeleteObject")
    assert not with_object_acl(access())  # BucketOwnerEnforced: ignored
    assert not with_object_acl(access(ownership="ObjectWriter",
                                      block=PublicAccessBlock(ignore_public_acls=True)))
    assert with_object_acl(access(ownership="ObjectWriter",
                                  block=PublicAccessBlock(block_public_acls=True)))
    denied = access(doc(stmt(effect="Deny")), ownership="ObjectWriter")
    assert not with_object_acl(denied)  # an explicit Deny wins over the ACL
    assert acl_may_decide(writer, need)
    assert not acl_may_decide(writer, Need("s3:PutObject", OBJ, B, key="k"))
    assert not acl_may_decide(writer, Need("s3:ListBucket", f"arn:aws:s3:::{B}", B))
    assert not acl_may_decide(access(), need)
    assert not acl_may_decide(None, need)
    reader = canned_acl("private", "u-owner")
    only_alice = Acl("u-owner", (*reader.grants, Grant("u-alice", "READ")))
    assert decide(AccessRequest(ALICE, (need,), (), {B: writer},
                                {(B, "k"): only_alice})).allowed
    assert not decide(AccessRequest(BOB, (need,), (), {B: writer},
                                    {(B, "k"): only_alice})).allowed


_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:GetObjectAcl",
            "s3:PutObjectAcl", "s3:DeleteObject")
_CANNED = ("private", "public-read", "public-read-write", "authenticated-read")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([None, ALICE, BOB]), st.sampled_from(_ACTIONS),
       st.sampled_from(["BucketOwnerEnforced", "ObjectWriter", "BucketOwnerPreferred"]),
       st.sampled_from(_CANNED), st.sampled_from(_CANNED),
       st.tuples(st.booleans(), st.booleans()), st.booleans(), st.booleans(),
       st.sampled_from([None, "Allow", "Deny"]))
def test_the_decision_with_acls_keeps_awss_rules(
        caller: Principal | None, action: str, ownership: str, bucket_canned: str,
        object_canned: str, flags: tuple[bool, bool], identity_allows: bool,
        grant_alice: bool, policy_effect: str | None) -> None:
    """Whatever the ACLs, ownership and public access block: an explicit Deny in the bucket
    policy refuses; with ACLs disabled the ACLs never allow; IgnorePublicAcls keeps public
    grants from allowing anyone; an identity Allow never turns an allowed request denied."""
    ignore, restrict = flags
    block = PublicAccessBlock(ignore_public_acls=ignore, restrict_public_buckets=restrict)
    policy = None if policy_effect is None else doc(stmt(effect=policy_effect, action=action))
    bucket = access(policy, acl=canned_acl(bucket_canned, "u-owner"), block=block,
                    ownership=ownership)
    object_acl = canned_acl(object_canned, "u-owner")
    if grant_alice:
        object_acl = Acl("u-owner", (*object_acl.grants, Grant("u-alice", "READ")))
    need = Need(action, OBJ, B, key="k")

    def allowed_with(identity: tuple[Any, ...]) -> bool:
        return decide(AccessRequest(caller, (need,), identity, {B: bucket},
                                    {(B, "k"): object_acl})).allowed

    everything = (compile_policy({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["*"]}]}),)
    plain = allowed_with(())
    if policy_effect == "Deny":
        assert not plain and not allowed_with(everything)
        return
    if caller is not None and identity_allows:
        assert allowed_with(everything)  # grants and the rest add up
    if policy_effect is None:
        by_acl = plain  # nothing but the ACLs could allow it
        if ownership == "BucketOwnerEnforced":
            assert not by_acl
        if ignore and (caller is None or caller is BOB):
            assert not by_acl  # only public grants (or none) name them
        if caller is not None and action in ("s3:PutObject", "s3:DeleteObject") and by_acl:
            assert bucket_canned == "public-read-write"  # writes: the bucket ACL's WRITE


def test_a_stored_policy_that_no_longer_compiles_denies_everyone() -> None:
    broken = access('{"Version": "2012-10-17", "Statement": "nope"}')
    assert not allowed(ALICE, broken, identity=(id_allow(),))


def test_an_import_checks_a_bucket_policy_before_anything_is_written() -> None:
    from objstore.engine.transfer import BucketDocuments
    from objstore.errors import AdminError

    documents = BucketDocuments(None, None)  # type: ignore[arg-type]
    documents.check_config("policy", doc(stmt()), B)
    with pytest.raises(AdminError):
        documents.check_config("policy", doc(stmt(resource="arn:aws:s3:::other/*")), B)
