"""Policy validation and evaluation as plain functions."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from objstore.iam.policy import (
    BUILTIN_GRANTS,
    PolicyError,
    allowed_actions,
    compile_policy,
    glob_match,
    is_allowed,
    validate,
)


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(actions: list[str], resources: list[str]) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources}


def deny(actions: list[str], resources: list[str]) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": actions, "Resource": resources}


PHOTOS = doc(allow(["s3:GetObject"], ["arn:aws:s3:::photos/*"]),
             deny(["s3:GetObject"], ["arn:aws:s3:::photos/private/*"]))


@pytest.mark.parametrize(("action", "resource", "expected"), [
    ("s3:GetObject", "arn:aws:s3:::photos/a.jpg", True),
    ("s3:GetObject", "arn:aws:s3:::photos/private/b.jpg", False),
    ("s3:PutObject", "arn:aws:s3:::photos/a.jpg", False),
    ("s3:GetObject", "arn:aws:s3:::other/a.jpg", False),
    ("s3:ListBucket", "arn:aws:s3:::photos", False),  # object ARN does not grant listing
])
def test_photos_scenario(action: str, resource: str, expected: bool) -> None:
    validate(PHOTOS)
    assert is_allowed([compile_policy(PHOTOS)], action, resource) is expected


def test_deny_in_any_document_wins() -> None:
    everything = compile_policy(BUILTIN_GRANTS["AdministratorAccess"][1])
    no_delete = compile_policy(doc(deny(["s3:Delete*"], ["*"])))
    assert is_allowed([everything], "s3:DeleteObject", "arn:aws:s3:::b/k")
    assert not is_allowed([everything, no_delete], "s3:DeleteObject", "arn:aws:s3:::b/k")
    assert is_allowed([everything, no_delete], "svc:ManageUsers", "*")


def test_nothing_means_denied() -> None:
    assert not is_allowed([], "s3:GetObject", "arn:aws:s3:::b/k")


def test_wildcards_in_resources() -> None:
    policy = compile_policy(doc(allow(["s3:*"], ["arn:aws:s3:::logs-????/*"])))
    assert is_allowed([policy], "s3:PutObject", "arn:aws:s3:::logs-2024/x/y")
    assert not is_allowed([policy], "s3:PutObject", "arn:aws:s3:::logs-24/x")
    assert not is_allowed([policy], "svc:ManageUsers", "*")


def test_aws_encryption_names_are_aliases() -> None:
    policy = compile_policy(doc(allow(["s3:PutEncryptionConfiguration"], ["*"])))
    assert is_allowed([policy], "s3:PutBucketEncryption", "arn:aws:s3:::b")
    assert is_allowed([policy], "s3:DeleteBucketEncryption", "arn:aws:s3:::b")
    assert not is_allowed([policy], "s3:GetBucketEncryption", "arn:aws:s3:::b")


def test_read_only_builtin() -> None:
    read_only = compile_policy(BUILTIN_GRANTS["S3ReadOnlyAccess"][1])
    assert is_allowed([read_only], "s3:GetObject", "arn:aws:s3:::b/k")
    assert is_allowed([read_only], "s3:ListAllMyBuckets", "*")
    assert not is_allowed([read_only], "s3:PutObject", "arn:aws:s3:::b/k")


def test_effective_actions_are_the_union_of_allows() -> None:
    policies = [compile_policy(PHOTOS), compile_policy(doc(allow(["svc:ManageUsers"], ["*"])))]
    assert allowed_actions(policies) == ["s3:GetObject", "svc:ManageUsers"]


def test_builtins_are_valid() -> None:
    for _, document in BUILTIN_GRANTS.values():
        validate(document)


@pytest.mark.parametrize(("document", "culprit"), [
    ({"Version": "2008-10-17", "Statement": [allow(["*"], ["*"])]}, "Version"),
    ({"Statement": [allow(["*"], ["*"])]}, "Version"),
    (doc(), "Statement"),
    ({"Version": "2012-10-17", "Statement": {}}, "Statement"),
    (doc({"Effect": "Maybe", "Action": ["*"], "Resource": ["*"]}), "Effect"),
    (doc(allow(["s3:GetObjekt"], ["*"])), "s3:GetObjekt"),
    (doc(allow(["s3:Nothing*"], ["*"])), "s3:Nothing*"),
    (doc(allow([], ["*"])), "Action"),
    (doc({"Effect": "Allow", "Resource": ["*"]}), "Action"),
    (doc(allow(["*"], ["arn:aws:ec2:::x"])), "arn:aws:ec2:::x"),
    (doc(allow(["*"], ["arn:aws:s3:::Bad_Bucket"])), "Bad_Bucket"),
    (doc(allow(["*"], [])), "Resource"),
    (doc({**allow(["*"], ["*"]), "Principal": "*"}), "Principal"),
    ([], "object"),
])
def test_validation_names_the_culprit(document: Any, culprit: str) -> None:
    with pytest.raises(PolicyError) as caught:
        validate(document)
    assert culprit in str(caught.value)


@pytest.mark.timeout(10)
def test_wildcard_patterns_match_in_linear_time() -> None:
    # One regex with ".*" per star backtracked exponentially: ten "*?" pairs took 13 s.
    resource = "arn:aws:s3:::b/" + "a" * 1000
    assert not glob_match("arn:aws:s3:::b/" + "*?" * 200 + "x", resource)
    assert glob_match("arn:aws:s3:::b/" + "*?" * 200, resource)
    assert not glob_match("*a" * 300 + "x", "a" * 1000)
    assert glob_match("*a" * 300, "a" * 1000)


@pytest.mark.parametrize(("pattern", "value", "expected"), [
    ("", "", True), ("*", "", True), ("?", "", False), ("a*b", "ab", True),
    ("a*b", "aXb", True), ("a*b", "aXbY", False), ("*.txt", "a.txt", True),
    ("a?c*d?", "abcXXde", True), ("a?c*d?", "abcXXd", False), ("**", "x", True),
    ("a*b*a", "aba", True), ("a*b*a", "ab", False), ("*ab", "aab", True),
])
def test_wildcards(pattern: str, value: str, expected: bool) -> None:
    assert glob_match(pattern, value) is expected


@given(st.text("ab?*", max_size=8), st.text("ab?*", max_size=8))
def test_the_string_shortcuts_agree_with_fnmatch(pattern: str, value: str) -> None:
    """glob_match's exact and trailing-star shortcuts answer as the general matcher:
    fnmatchcase with `[` escaped is the reference (`*` any run, `?` one character)."""
    assert glob_match(pattern, value) is fnmatch.fnmatchcase(value, pattern)


def test_text_no_store_can_encode_is_refused() -> None:
    document = {"Version": "2012-10-17", "Statement": [
        {"Sid": "\udcff", "Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}
    with pytest.raises(PolicyError, match="not valid Unicode"):
        validate(document)
