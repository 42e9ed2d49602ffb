"""Every S3 route declares what it needs (issue 29): the table is enumerated, so a route
added later is checked the day it is added. Its action is a name policies may use, its
extras follow AWS's rules for the request's headers, and no S3 handler authorizes by
hand (the one decision runs at admission; DeleteObjects' keys and the lock headers a GET
shows go through `access.permits`, the same decision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from objstore.iam.actions import KNOWN_ACTIONS
from objstore.s3.route_needs import route_needs
from objstore.s3.routes import ROUTES, RouteKey

S3_DIR = Path(__file__).resolve().parents[2] / "objstore" / "s3"
# Routes AWS names, never served here (501), whose actions policies here need not know.
NOT_IN_POLICIES = {
    "s3:GetObjectTorrent", "s3:GetBucketMetadataTableConfiguration",
    "s3:CreateBucketMetadataTableConfiguration", "s3:DeleteBucketMetadataTableConfiguration",
    "s3express:CreateSession", "s3express:RenameObject",
}


@pytest.mark.parametrize("key", list(ROUTES), ids=lambda k: " ".join(map(str, k)))
def test_every_route_declares_a_known_action(key: RouteKey) -> None:
    route = ROUTES[key]
    assert route.action in KNOWN_ACTIONS | NOT_IN_POLICIES, (key, route.action)


def test_bucket_routes_need_bucket_actions_and_object_routes_object_actions() -> None:
    for (_, target, _), route in ROUTES.items():
        needs = route_needs(route.action, "b" if target != "service" else "",
                            "k" if target == "object" else "", {}, lambda _: None,
                            route.extra)
        expected = {"service": "*", "bucket": "arn:aws:s3:::b",
                    "object": "arn:aws:s3:::b/k"}[target]
        assert needs[0].resource == expected


def test_no_handler_authorizes_by_hand() -> None:
    for path in S3_DIR.glob("*.py"):
        text = path.read_text()
        assert "authorizer.check(" not in text, path.name
        assert "authorizer.allowed" not in text, path.name


def headers(**values: str):  # type: ignore[no-untyped-def]
    table = {name.replace("_", "-"): value for name, value in values.items()}
    return table.get


def actions_of(key: RouteKey, query: dict[str, str] | None = None, **values: str
               ) -> list[tuple[str, str]]:
    route = ROUTES[key]
    needs = route_needs(route.action, "b", "k" if key[1] == "object" else "", query or {},
                        headers(**values), route.extra)
    return [(need.action, need.resource) for need in needs]


def test_put_object_extras() -> None:
    put = ("PUT", "object", None)
    obj = "arn:aws:s3:::b/k"
    assert actions_of(put) == [("s3:PutObject", obj)]
    assert actions_of(put, x_amz_tagging="a=1") == [("s3:PutObject", obj),
                                                     ("s3:PutObjectTagging", obj)]
    assert actions_of(put, x_amz_object_lock_mode="GOVERNANCE",
                      x_amz_object_lock_legal_hold="ON") == [
        ("s3:PutObject", obj), ("s3:PutObjectRetention", obj), ("s3:PutObjectLegalHold", obj)]
    assert actions_of(put, x_amz_acl="public-read") == [("s3:PutObject", obj),
                                                         ("s3:PutObjectAcl", obj)]
    # A copy needs the source; its tags count only with the REPLACE directive.
    assert actions_of(put, x_amz_copy_source="/src/a%20b?versionId=v", x_amz_tagging="a=1") \
        == [("s3:PutObject", obj), ("s3:GetObjectVersion", "arn:aws:s3:::src/a b")]
    assert actions_of(put, x_amz_copy_source="src/x", x_amz_tagging="a=1",
                      x_amz_tagging_directive="REPLACE") == [
        ("s3:PutObject", obj), ("s3:GetObject", "arn:aws:s3:::src/x"),
        ("s3:PutObjectTagging", obj)]
    tagging = route_needs("s3:PutObject", "b", "k", {}, headers(x_amz_tagging="a=1"),
                          ROUTES[put].extra)[1]
    assert tagging.covered_by == ("s3:PutObject",)


def test_version_variants_and_other_extras() -> None:
    obj = "arn:aws:s3:::b/k"
    assert actions_of(("GET", "object", None), {"versionId": "v"}) == [
        ("s3:GetObjectVersion", obj)]
    assert actions_of(("DELETE", "object", "tagging"), {"versionId": "v"}) == [
        ("s3:DeleteObjectVersionTagging", obj)]
    assert actions_of(("PUT", "object", "uploadId"), x_amz_copy_source="s/o") == [
        ("s3:PutObject", obj), ("s3:GetObject", "arn:aws:s3:::s/o")]
    assert actions_of(("PUT", "bucket", None), x_amz_bucket_object_lock_enabled="true",
                      x_amz_object_ownership="ObjectWriter") == [
        ("s3:CreateBucket", "arn:aws:s3:::b"),
        ("s3:PutBucketObjectLockConfiguration", "arn:aws:s3:::b"),
        ("s3:PutBucketVersioning", "arn:aws:s3:::b"),
        ("s3:PutBucketOwnershipControls", "arn:aws:s3:::b")]
    assert ROUTES[("POST", "bucket", "delete")].per_key
    # A copy source that does not parse adds nothing (the handler refuses it).
    assert actions_of(("PUT", "object", None), x_amz_copy_source="/") == [
        ("s3:PutObject", obj)]


def test_the_decision_and_its_rules_import_no_twisted() -> None:
    """Pure, as docs/ARCHITECTURE.md lists them: run in a fresh interpreter."""
    import subprocess
    import sys

    modules = ["objstore.iam.decision", "objstore.iam.bucket_policy",
               "objstore.iam.conditions", "objstore.iam.acl_rules",
               "objstore.iam.public_access", "objstore.iam.anonymous_access",
               "objstore.s3.route_needs"]
    code = (f"import sys; import {', '.join(modules)}; "
            "sys.exit('twisted' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
