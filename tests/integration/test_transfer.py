"""GET /admin/export and POST /admin/import between two real daemons: a configuration
exported from one node and imported into a fresh one exports again identically (ids
included; only timestamps and the root user's id differ), dry runs change nothing, and
only administrators may use either endpoint."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon

DOC = {"Version": "2012-10-17",
       "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
                      "Resource": ["arn:aws:s3:::shared", "arn:aws:s3:::shared/*"]}]}
LIFECYCLE = {"Rules": [{"ID": "expire-tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
                        "Expiration": {"Days": 7}}]}


@pytest.fixture
def fresh(daemon: Daemon, tmp_path: Path) -> Iterator[Daemon]:
    """A second, empty node on the same backend."""
    node = Daemon(tmp_path / "fresh", backend=daemon.backend)
    node.start()
    yield node
    node.cleanup()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def populate(daemon: Daemon) -> dict[str, Any]:
    admin = AdminClient(daemon.endpoint)
    alice = admin.ok("POST", "/users", {"username": unique("alice"), "description": "A"}, 201)
    bob = admin.ok("POST", "/users", {"username": unique("bob")}, 201)
    team = admin.ok("POST", "/teams", {"name": unique("team"), "description": "t"}, 201)
    grant = admin.ok("POST", "/grants", {"name": unique("grant"), "document": DOC}, 201)
    admin.ok("PUT", f"/teams/{team['team_id']}/members/{alice['user_id']}", status=204)
    admin.ok("PUT", f"/teams/{team['team_id']}/grants/{grant['grant_id']}", status=204)
    admin.ok("PUT", f"/users/{bob['user_id']}/grants/{grant['grant_id']}", status=204)
    key = admin.ok("POST", f"/users/{alice['user_id']}/credentials", {"description": "ci"}, 201)
    s3: Any = make_client(daemon.endpoint)
    bucket = unique("cfg")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "team", "Value": "a"}]})
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=LIFECYCLE)
    admin.ok("PUT", "/settings/lifecycle_evaluation_interval", {"value": 120})
    return {"alice": alice, "bob": bob, "team": team, "grant": grant, "key": key,
            "bucket": bucket}


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """An export minus what a new node may differ in: timestamps and the root's user id."""
    document = copy.deepcopy(document)
    document.pop("exported_at")
    roots = {u["user_id"] for u in document["users"] if u["is_root"]}
    for section in ("users", "teams", "grants", "credentials", "buckets"):
        for entry in document[section]:
            entry.pop("created_at", None)
            entry.pop("updated_at", None)
            for holder in [entry, entry.get("owner") or {}, *entry.get("members", [])]:
                if holder.get("user_id") in roots:
                    holder["user_id"] = "<root>"
    return document


def test_round_trip_into_a_fresh_node(daemon: Daemon, fresh: Daemon) -> None:
    made = populate(daemon)
    source, target = AdminClient(daemon.endpoint), AdminClient(fresh.endpoint)
    exported = source.ok("GET", "/export?include_secrets=true")
    assert exported["secrets_included"] is True
    report = target.ok("POST", "/import", exported)
    assert report["errors"] == [], report
    assert made["alice"]["username"] in report["created"]["users"]
    assert made["bucket"] in report["created"]["buckets"]
    again = target.ok("GET", "/export?include_secrets=true")
    assert comparable(again) == comparable(exported)
    # ids survive, and the imported credential works on the new node
    assert target.ok("GET", f"/users/{made['alice']['user_id']}")["team_count"] == 1
    key = made["key"]
    me = target.as_user(key["access_key_id"], key["secret_access_key"]).ok("GET", "/me")
    assert me["user"]["user_id"] == made["alice"]["user_id"]
    # node-local settings never travel
    assert "node_id" not in exported["settings"]
    assert exported["settings"].get("lifecycle_evaluation_interval") is not None


def test_secrets_are_masked_unless_asked_and_sections_filter(daemon: Daemon) -> None:
    populate(daemon)
    admin = AdminClient(daemon.endpoint)
    masked = admin.ok("GET", "/export?sections=credentials,users")
    assert masked["sections"] == ["users", "credentials"] and "grants" not in masked
    assert {c["secret_access_key"] for c in masked["credentials"]} == {"****"}
    bad = admin.get("/export?sections=users,passwords")
    assert bad.status == 400 and bad.error == "BadRequest"


def test_dry_run_changes_nothing(daemon: Daemon, fresh: Daemon) -> None:
    made = populate(daemon)
    exported = AdminClient(daemon.endpoint).ok("GET", "/export?include_secrets=true")
    target = AdminClient(fresh.endpoint)
    before = target.ok("GET", "/export?include_secrets=true")
    report = target.ok("POST", "/import?mode=dry_run", exported)
    assert report["dry_run"] is True and report["errors"] == []
    assert made["team"]["name"] in report["created"]["teams"]
    after = target.ok("GET", "/export?include_secrets=true")
    assert comparable(after) == comparable(before)


def test_masked_credentials_are_errors_and_modes_are_checked(daemon: Daemon,
                                                             fresh: Daemon) -> None:
    made = populate(daemon)
    exported = AdminClient(daemon.endpoint).ok("GET", "/export")
    target = AdminClient(fresh.endpoint)
    report = target.ok("POST", "/import?sections=users,credentials", exported)
    failed = {e["item"] for e in report["errors"] if e["section"] == "credentials"}
    assert made["key"]["access_key_id"] in failed
    assert set(report["created"]) == {"users", "credentials"}
    assert target.post("/import?mode=merge", exported).status == 400
    assert target.post("/import", {"format": "something-else"}).status == 400


def test_only_administrators_may_export_or_import(daemon: Daemon) -> None:
    admin = AdminClient(daemon.endpoint)
    user = admin.ok("POST", "/users", {"username": unique("op")}, 201)
    key = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    caller = admin.as_user(key["access_key_id"], key["secret_access_key"])
    assert caller.get("/export").status == 403
    svc_only = admin.ok("POST", "/grants", {"name": unique("svc"), "document": {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["svc:*"], "Resource": ["*"]}]}}, 201)
    admin.ok("PUT", f"/users/{user['user_id']}/grants/{svc_only['grant_id']}", status=204)
    assert caller.get("/export").status == 403  # every svc action is not `*`
    administrator = next(g for g in admin.ok("GET", "/grants")
                         if g["name"] == "AdministratorAccess")
    admin.ok("PUT", f"/users/{user['user_id']}/grants/{administrator['grant_id']}", status=204)
    assert caller.get("/export?sections=users").status == 200
    deny = admin.ok("POST", "/grants", {"name": unique("deny"), "document": {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Action": ["svc:ManageCredentials"],
                       "Resource": ["*"]}]}}, 201)
    admin.ok("PUT", f"/users/{user['user_id']}/grants/{deny['grant_id']}", status=204)
    refused = caller.post("/import", {})
    assert refused.status == 403 and "svc:ManageCredentials" in refused.json["message"]
