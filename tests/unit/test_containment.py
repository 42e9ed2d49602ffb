"""The containment rule as plain functions: pattern inclusion and overlap, and whether one
set of policies allows nothing beyond another (wildcards, Deny, aliases, the S3 resource
space), checked against the evaluator itself on sample requests."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from objstore.iam.actions import KNOWN_ACTIONS
from objstore.iam.containment import (
    actions_overlap,
    administrator_equivalent,
    covers,
    excess,
    glob_covers,
    glob_overlaps,
)
from objstore.iam.policy import BUILTIN_GRANTS, Policy, compile_policy, glob_match, is_allowed


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(actions: list[str], resources: list[str]) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources}


def deny(actions: list[str], resources: list[str]) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": actions, "Resource": resources}


def policies(*statements: dict[str, Any]) -> tuple[Policy, ...]:
    return (compile_policy(doc(*statements)),) if statements else ()


def builtin(name: str) -> tuple[Policy, ...]:
    return (compile_policy(BUILTIN_GRANTS[name][1]),)


ADMIN, FULL, READ = builtin("AdministratorAccess"), builtin("S3FullAccess"), \
    builtin("S3ReadOnlyAccess")
CREDENTIALS_ONLY = policies(allow(["svc:ManageCredentials"], ["*"]))
USERS_ONLY = policies(allow(["svc:ManageUsers"], ["*"]))


# -- pattern inclusion and overlap --------------------------------------------------------


@pytest.mark.parametrize(("outer", "inner", "expected"), [
    ("s3:Get*", "s3:GetObject", True),
    ("s3:GetObject", "s3:Get*", False),
    ("s3:Get*", "s3:GetObject*", True),
    ("s3:*", "s3:Get*", True),
    ("s3:Get*", "s3:*", False),
    ("*", "s3:*", True),
    ("*", "*", True),
    ("s3:*", "*", False),
    ("svc:*", "svc:Manage*", True),
    ("svc:Manage*", "svc:*", False),
    ("arn:aws:s3:::bucket/*", "arn:aws:s3:::bucket/prefix/*", True),
    ("arn:aws:s3:::bucket/prefix/*", "arn:aws:s3:::bucket/*", False),
    ("arn:aws:s3:::bucket/*", "arn:aws:s3:::bucket", False),  # the bucket is not a key
    ("arn:aws:s3:::bucket*", "arn:aws:s3:::bucket/*", True),
    ("arn:aws:s3:::*", "arn:aws:s3:::b/k", True),
    ("arn:aws:s3:::b?/*", "arn:aws:s3:::b1/*", True),
    ("arn:aws:s3:::b?/*", "arn:aws:s3:::b?/x", True),
    ("arn:aws:s3:::b1/*", "arn:aws:s3:::b?/*", False),  # an inner ? is any character
    ("a?c", "abc", True),
    ("abc", "a?c", False),
    ("?*", "*", False),  # * matches the empty string, ?* does not
    ("*?", "?*", True),  # the same language, written differently
    ("a*", "a", True),
    ("a*b", "a*c*b", True),
    ("a*c*b", "a*b", False),
    ("", "", True),
    ("x", "", False),
])
def test_glob_covers(outer: str, inner: str, expected: bool) -> None:
    assert glob_covers(outer, inner) is expected


@pytest.mark.parametrize(("first", "second", "expected"), [
    ("s3:Get*", "*Object", True),
    ("s3:Get*", "s3:Put*", False),
    ("a*", "*b", True),
    ("a?", "abc", False),
    ("?", "", False),
    ("*", "", True),
    ("x*y", "x*z", False),
    ("arn:aws:s3:::b/private/*", "arn:aws:s3:::b/*", True),
    ("arn:aws:s3:::a/*", "arn:aws:s3:::b/*", False),
])
def test_glob_overlaps(first: str, second: str, expected: bool) -> None:
    assert glob_overlaps(first, second) is expected
    assert glob_overlaps(second, first) is expected


SAMPLES = ["", "a", "b", "ab", "ba", "abc", "aab", "s3:GetObject", "s3:Get", "x/y", "??", "*"]
PATTERNS = ["*", "?", "a*", "*b", "a?", "?*", "*?", "a*b", "*a*", "s3:Get*", "a", "ab", "??*"]


@pytest.mark.parametrize(("first", "second"), list(itertools.product(PATTERNS, repeat=2)))
def test_pattern_rules_agree_with_matching(first: str, second: str) -> None:
    """Inclusion is never claimed falsely; a shared sample is always seen as overlap."""
    if glob_covers(first, second):
        assert all(glob_match(first, s) for s in SAMPLES if glob_match(second, s))
    if any(glob_match(first, s) and glob_match(second, s) for s in SAMPLES):
        assert glob_overlaps(first, second)


def test_long_patterns_do_not_exhaust_the_stack() -> None:
    key = "k" * 5000
    assert glob_covers("arn:aws:s3:::b/*", f"arn:aws:s3:::b/{key}*")
    assert glob_overlaps(f"arn:aws:s3:::b/{key}*", f"*{key}")


def test_aliases_count_as_overlap() -> None:
    # A Deny of the AWS spelling refuses the request that needs the canonical name.
    assert actions_overlap("s3:PutEncryptionConfiguration", "s3:PutBucketEncryption")
    assert actions_overlap("s3:DeleteBucketEncryption", "s3:PutEncryption*")
    assert not actions_overlap("s3:GetObject", "s3:PutBucketEncryption")


# -- policy sets ------------------------------------------------------------------------------


def test_every_set_covers_itself_and_nothing_is_covered_by_anything() -> None:
    for found in (ADMIN, FULL, READ, CREDENTIALS_ONLY, (), policies(
            allow(["s3:*"], ["*"]), deny(["s3:Delete*"], ["arn:aws:s3:::b/*"]))):
        assert covers(found, found)
        assert covers(found, ())


def test_the_builtin_grants_nest() -> None:
    assert covers(ADMIN, FULL) and covers(ADMIN, READ) and covers(FULL, READ)
    assert not covers(READ, FULL) and not covers(FULL, ADMIN)
    assert excess(FULL, ADMIN) == "* on *"


def test_the_reported_escalations_are_not_covered() -> None:
    assert excess(CREDENTIALS_ONLY, ADMIN) == "* on *"
    assert not covers(USERS_ONLY, ADMIN)
    assert not covers(CREDENTIALS_ONLY, READ)
    assert covers(CREDENTIALS_ONLY, CREDENTIALS_ONLY)
    assert not covers(CREDENTIALS_ONLY, USERS_ONLY)


def test_action_and_resource_wildcards() -> None:
    holder = policies(allow(["s3:Get*"], ["arn:aws:s3:::bucket/*"]))
    assert covers(holder, policies(allow(["s3:GetObject"], ["arn:aws:s3:::bucket/prefix/*"])))
    assert covers(holder, policies(allow(["s3:GetObject", "s3:GetObjectTagging"],
                                         ["arn:aws:s3:::bucket/a", "arn:aws:s3:::bucket/b*"])))
    assert not covers(holder, policies(allow(["s3:GetObject"], ["arn:aws:s3:::other/*"])))
    assert not covers(holder, policies(allow(["s3:PutObject"], ["arn:aws:s3:::bucket/*"])))
    assert not covers(holder, policies(allow(["s3:ListBucket"], ["arn:aws:s3:::bucket"])))
    assert not covers(holder, policies(allow(["s3:*"], ["arn:aws:s3:::bucket/*"])))


def test_each_pair_may_be_covered_by_a_different_statement() -> None:
    holder = policies(allow(["s3:GetObject"], ["arn:aws:s3:::a/*"]),
                      allow(["s3:PutObject"], ["arn:aws:s3:::b/*"]))
    assert covers(holder, policies(allow(["s3:GetObject"], ["arn:aws:s3:::a/x"]),
                                   allow(["s3:PutObject"], ["arn:aws:s3:::b/y"])))
    # The cross product of one statement needs both pairs covered.
    assert not covers(holder, policies(allow(["s3:GetObject", "s3:PutObject"],
                                             ["arn:aws:s3:::a/*"])))


def test_s3_actions_live_in_the_s3_resource_space() -> None:
    holder = policies(allow(["s3:*"], ["arn:aws:s3:::*"]))
    assert covers(holder, FULL)  # s3:* on * is s3:* on arn:aws:s3:::*
    assert not covers(holder, policies(allow(["svc:ManageUsers"], ["*"])))
    assert not covers(holder, policies(allow(["*"], ["*"])))  # `*` reaches svc actions too


def test_a_deny_of_the_holder_matters_when_it_meets_an_allow() -> None:
    holder = policies(allow(["*"], ["*"]), deny(["s3:GetObject"], ["arn:aws:s3:::secret/*"]))
    assert not covers(holder, ADMIN)
    assert excess(holder, FULL) == "s3:GetObject on arn:aws:s3:::secret/* (denied to you)"
    # The same Deny (or a wider one) on the other side makes it harmless.
    assert covers(holder, policies(allow(["*"], ["*"]),
                                   deny(["s3:Get*"], ["arn:aws:s3:::secret*"])))
    # A narrower Deny does not.
    assert not covers(holder, policies(allow(["*"], ["*"]),
                                       deny(["s3:GetObject"], ["arn:aws:s3:::secret/a/*"])))
    # A Deny that meets nothing the other may do does not matter.
    assert covers(holder, policies(allow(["s3:GetObject"], ["arn:aws:s3:::public/*"])))
    assert covers(holder, policies(allow(["svc:ManageUsers"], ["*"])))


def test_a_deny_of_the_other_never_widens_it() -> None:
    other = policies(allow(["s3:*"], ["*"]), deny(["s3:PutObject"], ["*"]))
    assert not covers(READ, other)  # its Allow is still beyond S3ReadOnlyAccess
    assert covers(FULL, other)


def test_an_alias_deny_is_not_escaped() -> None:
    holder = policies(allow(["s3:*"], ["*"]), deny(["s3:PutEncryptionConfiguration"], ["*"]))
    assert not covers(holder, policies(allow(["s3:PutBucketEncryption"], ["*"])))
    assert is_allowed(policies(allow(["s3:PutBucketEncryption"], ["*"])),
                      "s3:PutBucketEncryption", "arn:aws:s3:::b")
    assert not is_allowed(holder, "s3:PutBucketEncryption", "arn:aws:s3:::b")


def test_a_broken_grant_of_the_holder_denies_everything() -> None:
    deny_all = policies(deny(["*"], ["*"]))  # what the authorizer makes of a broken grant
    assert not covers(deny_all, READ)
    assert covers(deny_all, ())


def test_administrator_equivalence() -> None:
    assert administrator_equivalent(ADMIN)
    assert administrator_equivalent(policies(allow(["*"], ["*"]), allow(["s3:GetObject"], ["*"])))
    assert not administrator_equivalent(FULL)
    assert not administrator_equivalent(policies(allow(["s3:*", "svc:*"], ["*"])))
    assert not administrator_equivalent(policies(allow(["*"], ["*"]),
                                                 deny(["svc:ManageGrants"], ["*"])))


REQUEST_RESOURCES = ["*", "arn:aws:s3:::", "arn:aws:s3:::bucket", "arn:aws:s3:::bucket/k",
                     "arn:aws:s3:::bucket/prefix/k", "arn:aws:s3:::secret/k", "arn:aws:s3:::x"]
SETS = [ADMIN, FULL, READ, CREDENTIALS_ONLY, USERS_ONLY, (),
        policies(allow(["s3:Get*"], ["arn:aws:s3:::bucket/*"])),
        policies(allow(["s3:GetObject"], ["arn:aws:s3:::bucket/prefix/*"])),
        policies(allow(["*"], ["*"]), deny(["s3:GetObject"], ["arn:aws:s3:::secret/*"])),
        policies(allow(["s3:*"], ["arn:aws:s3:::*"]), deny(["s3:Put*"], ["*"])),
        policies(allow(["s3:*", "svc:*"], ["*"]), deny(["svc:ManageUsers"], ["*"]))]


def evaluated(action: str, resource: str) -> str:
    return "arn:aws:s3:::" if resource == "*" and action.startswith("s3:") else resource


@pytest.mark.parametrize(("holder", "other"), list(itertools.product(SETS, repeat=2)))
def test_covered_means_every_request_allowed_is_allowed_to_the_holder(
    holder: tuple[Policy, ...], other: tuple[Policy, ...]
) -> None:
    if not covers(holder, other):
        return
    for action in sorted(KNOWN_ACTIONS | {"*"}):
        for resource in REQUEST_RESOURCES:
            where = evaluated(action, resource)
            if is_allowed(other, action, where):
                assert is_allowed(holder, action, where), (action, resource)
