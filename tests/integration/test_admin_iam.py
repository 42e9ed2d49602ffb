"""The IAM part of the admin API against the real daemon: every success shape and every
error path of the admin table (400, 404, 409), and that no error is ever anything but
JSON {error, message}."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.daemon import ROOT_ACCESS_KEY, Daemon

ISO_WITH_OFFSET = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
MISSING = "00000000-0000-4000-8000-000000000000"
DOC: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"],
                   "Resource": ["arn:aws:s3:::b/*"]}],
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def admin(daemon: Daemon) -> AdminClient:
    return AdminClient(daemon.endpoint)


@pytest.fixture
def user(admin: AdminClient) -> dict[str, Any]:
    created: dict[str, Any] = admin.ok("POST", "/users", {"username": unique("user")}, 201)
    return created


@pytest.fixture
def team(admin: AdminClient) -> dict[str, Any]:
    created: dict[str, Any] = admin.ok("POST", "/teams", {"name": unique("team")}, 201)
    return created


@pytest.fixture
def grant(admin: AdminClient) -> dict[str, Any]:
    created: dict[str, Any] = admin.ok(
        "POST", "/grants", {"name": unique("grant"), "document": DOC}, 201)
    return created


def root_user(admin: AdminClient) -> dict[str, Any]:
    me: dict[str, Any] = admin.ok("GET", "/me")["user"]
    return me


def assert_error(reply: Any, status: int, code: str) -> None:
    assert reply.status == status, reply.body
    assert reply.headers["Content-Type"] == "application/json"
    body = reply.json
    assert body["error"] == code and isinstance(body["message"], str) and body["message"]


# -- users -------------------------------------------------------------------------------


def test_user_lifecycle_and_shapes(admin: AdminClient) -> None:
    name = unique("alice")
    created = admin.ok("POST", "/users", {"username": name, "description": "d"}, 201)
    assert set(created) == {"user_id", "username", "description", "is_root", "created_at"}
    assert created["username"] == name and created["is_root"] is False
    assert ISO_WITH_OFFSET.match(created["created_at"])
    uuid.UUID(created["user_id"])
    user_id = created["user_id"]
    got = admin.ok("GET", f"/users/{user_id}")
    assert got == {**created, "credential_count": 0, "team_count": 0, "grant_count": 0}
    listed = {u["user_id"]: u for u in admin.ok("GET", "/users")}
    assert listed[user_id] == got
    assert any(u["is_root"] for u in listed.values())
    admin.ok("PUT", f"/users/{user_id}", {"username": name + "-x", "description": "e"}, 204)
    got = admin.ok("GET", f"/users/{user_id}")
    assert (got["username"], got["description"]) == (name + "-x", "e")
    admin.ok("DELETE", f"/users/{user_id}", None, 204)
    assert_error(admin.get(f"/users/{user_id}"), 404, "NotFound")


def test_users_created_through_the_api_are_never_root(admin: AdminClient) -> None:
    created = admin.ok("POST", "/users", {"username": unique("x"), "is_root": True}, 201)
    assert created["is_root"] is False


@pytest.mark.parametrize("body", [{}, {"username": ""}, {"username": "   "}, {"username": 7}])
def test_create_user_needs_a_username(admin: AdminClient, body: dict[str, Any]) -> None:
    assert_error(admin.post("/users", body), 400, "BadRequest")


def test_user_conflicts(admin: AdminClient, user: dict[str, Any]) -> None:
    other = admin.ok("POST", "/users", {"username": unique("other")}, 201)
    assert_error(admin.post("/users", {"username": user["username"]}), 409, "Conflict")
    assert_error(admin.put(f"/users/{other['user_id']}", {"username": user["username"]}),
                 409, "Conflict")
    root = root_user(admin)
    assert_error(admin.put(f"/users/{root['user_id']}", {"description": "x"}), 409, "Conflict")
    assert_error(admin.delete(f"/users/{root['user_id']}"), 409, "Conflict")
    admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    assert_error(admin.delete(f"/users/{user['user_id']}"), 409, "Conflict")
    assert_error(admin.put(f"/users/{other['user_id']}", {"username": ""}), 400, "BadRequest")


def test_delete_user_after_removing_its_credentials(
    admin: AdminClient, user: dict[str, Any], team: dict[str, Any], grant: dict[str, Any]
) -> None:
    user_id = user["user_id"]
    credential = admin.ok("POST", f"/users/{user_id}/credentials", {}, 201)
    admin.ok("PUT", f"/teams/{team['team_id']}/members/{user_id}", None, 204)
    admin.ok("PUT", f"/users/{user_id}/grants/{grant['grant_id']}", None, 204)
    admin.ok("DELETE", f"/credentials/{credential['access_key_id']}", None, 204)
    admin.ok("DELETE", f"/users/{user_id}", None, 204)
    assert admin.ok("GET", f"/teams/{team['team_id']}/members") == []
    assert admin.ok("GET", f"/teams/{team['team_id']}")["member_count"] == 0


# -- credentials ---------------------------------------------------------------------------


def test_user_credentials(admin: AdminClient, user: dict[str, Any]) -> None:
    user_id = user["user_id"]
    generated = admin.ok("POST", f"/users/{user_id}/credentials", {"description": "ci"}, 201)
    assert set(generated) == {"access_key_id", "secret_access_key", "description",
                              "created_at", "active", "user_id"}
    assert generated["user_id"] == user_id and generated["active"] is True
    assert generated["description"] == "ci" and len(generated["secret_access_key"]) >= 20
    supplied_key = unique("AKSUPPLIED").upper().replace("-", "")
    supplied = admin.ok("POST", f"/users/{user_id}/credentials",
                        {"access_key_id": supplied_key, "secret_access_key": "s3cr3t-value"},
                        201)
    assert (supplied["access_key_id"], supplied["secret_access_key"]) == (
        supplied_key, "s3cr3t-value")
    assert supplied["description"] == ""
    listed = admin.ok("GET", f"/users/{user_id}/credentials")
    assert sorted(c["access_key_id"] for c in listed) == sorted(
        [generated["access_key_id"], supplied_key])
    for entry in listed:
        assert set(entry) == {"access_key_id", "description", "created_at", "active"}
    assert admin.ok("GET", f"/users/{user_id}")["credential_count"] == 2
    assert_error(admin.post(f"/users/{user_id}/credentials", {"access_key_id": supplied_key}),
                 409, "Conflict")
    assert_error(admin.post(f"/users/{user_id}/credentials", {"access_key_id": "a/b"}),
                 400, "BadRequest")
    assert_error(admin.post(f"/users/{MISSING}/credentials", {}), 404, "NotFound")
    assert_error(admin.get(f"/users/{MISSING}/credentials"), 404, "NotFound")


def test_own_credentials(admin: AdminClient) -> None:
    root = root_user(admin)
    created = admin.ok("POST", "/credentials", {"description": "second"}, 201)
    assert created["user_id"] == root["user_id"] and "secret_access_key" in created
    listed = admin.ok("GET", "/credentials")
    keys = {c["access_key_id"] for c in listed}
    assert {ROOT_ACCESS_KEY, created["access_key_id"]} <= keys
    for entry in listed:
        assert "secret_access_key" not in entry and entry["user_id"] == root["user_id"]
    key = created["access_key_id"]
    admin.ok("PUT", f"/credentials/{key}", {"active": False, "description": "off"}, 204)
    entry = next(c for c in admin.ok("GET", "/credentials") if c["access_key_id"] == key)
    assert (entry["active"], entry["description"]) == (False, "off")
    admin.ok("DELETE", f"/credentials/{key}", None, 204)
    assert_error(admin.put(f"/credentials/{key}", {"active": True}), 404, "NotFound")
    assert_error(admin.delete(f"/credentials/{key}"), 404, "NotFound")


def test_last_active_root_credential_is_protected(admin: AdminClient) -> None:
    assert_error(admin.put(f"/credentials/{ROOT_ACCESS_KEY}", {"active": False}),
                 409, "Conflict")
    assert_error(admin.delete(f"/credentials/{ROOT_ACCESS_KEY}"), 409, "Conflict")
    admin.ok("PUT", f"/credentials/{ROOT_ACCESS_KEY}", {"description": "still root"}, 204)
    assert admin.ok("GET", "/me")["user"]["is_root"] is True


def test_credential_bodies_are_checked(admin: AdminClient) -> None:
    assert_error(admin.put(f"/credentials/{ROOT_ACCESS_KEY}", {"active": "no"}),
                 400, "BadRequest")
    assert_error(admin.post("/credentials", {"description": 5}), 400, "BadRequest")


# -- teams ---------------------------------------------------------------------------------


def test_team_lifecycle(admin: AdminClient, user: dict[str, Any], grant: dict[str, Any]
                        ) -> None:
    name = unique("devs")
    created = admin.ok("POST", "/teams", {"name": name, "description": "d"}, 201)
    assert set(created) == {"team_id", "name", "description", "created_at"}
    team_id = created["team_id"]
    assert admin.ok("GET", f"/teams/{team_id}") == {**created, "member_count": 0,
                                                    "grant_count": 0}
    admin.ok("PUT", f"/teams/{team_id}/members/{user['user_id']}", None, 204)
    admin.ok("PUT", f"/teams/{team_id}/members/{user['user_id']}", None, 204)  # idempotent
    admin.ok("PUT", f"/teams/{team_id}/grants/{grant['grant_id']}", None, 204)
    assert admin.ok("GET", f"/teams/{team_id}/members") == [{
        "user_id": user["user_id"], "username": user["username"], "description": "",
        "is_root": False}]
    assert admin.ok("GET", f"/teams/{team_id}/grants") == [{
        "grant_id": grant["grant_id"], "name": grant["name"], "description": ""}]
    assert admin.ok("GET", f"/users/{user['user_id']}/teams") == [{
        "team_id": team_id, "name": name, "description": "d"}]
    listed = {t["team_id"]: t for t in admin.ok("GET", "/teams")}
    assert (listed[team_id]["member_count"], listed[team_id]["grant_count"]) == (1, 1)
    admin.ok("PUT", f"/teams/{team_id}", {"name": name + "-x"}, 204)
    assert admin.ok("GET", f"/teams/{team_id}")["name"] == name + "-x"
    admin.ok("DELETE", f"/teams/{team_id}/members/{user['user_id']}", None, 204)
    admin.ok("DELETE", f"/teams/{team_id}/grants/{grant['grant_id']}", None, 204)
    admin.ok("PUT", f"/teams/{team_id}/members/{user['user_id']}", None, 204)
    admin.ok("DELETE", f"/teams/{team_id}", None, 204)
    assert admin.ok("GET", f"/users/{user['user_id']}/teams") == []
    assert_error(admin.get(f"/teams/{team_id}"), 404, "NotFound")


def test_team_errors(admin: AdminClient, team: dict[str, Any], user: dict[str, Any],
                     grant: dict[str, Any]) -> None:
    team_id = team["team_id"]
    for body in ({}, {"name": ""}, {"name": None}):
        assert_error(admin.post("/teams", body), 400, "BadRequest")
    assert_error(admin.post("/teams", {"name": team["name"]}), 409, "Conflict")
    other = admin.ok("POST", "/teams", {"name": unique("other")}, 201)
    assert_error(admin.put(f"/teams/{other['team_id']}", {"name": team["name"]}),
                 409, "Conflict")
    assert_error(admin.put(f"/teams/{team_id}/members/{MISSING}"), 404, "NotFound")
    assert_error(admin.put(f"/teams/{MISSING}/members/{user['user_id']}"), 404, "NotFound")
    assert_error(admin.delete(f"/teams/{team_id}/members/{user['user_id']}"), 404, "NotFound")
    assert_error(admin.put(f"/teams/{team_id}/grants/{MISSING}"), 404, "NotFound")
    assert_error(admin.put(f"/teams/{MISSING}/grants/{grant['grant_id']}"), 404, "NotFound")
    assert_error(admin.delete(f"/teams/{team_id}/grants/{grant['grant_id']}"), 404, "NotFound")


# -- grants --------------------------------------------------------------------------------


def test_builtin_grants_exist(admin: AdminClient) -> None:
    names = {g["name"]: g for g in admin.ok("GET", "/grants")}
    assert {"AdministratorAccess", "S3FullAccess", "S3ReadOnlyAccess"} <= set(names)
    full = admin.ok("GET", f"/grants/{names['S3ReadOnlyAccess']['grant_id']}")
    assert full["document"]["Version"] == "2012-10-17"
    builtin = names["AdministratorAccess"]["grant_id"]
    assert_error(admin.delete(f"/grants/{builtin}"), 409, "Conflict")
    assert_error(admin.put(f"/grants/{builtin}", {"description": "x"}), 409, "Conflict")


def test_grant_lifecycle(admin: AdminClient, user: dict[str, Any], team: dict[str, Any]
                         ) -> None:
    name = unique("read")
    created = admin.ok("POST", "/grants", {"name": name, "description": "d", "document": DOC},
                       201)
    assert set(created) == {"grant_id", "name", "description", "document", "created_at",
                            "updated_at"}
    assert created["document"] == DOC and ISO_WITH_OFFSET.match(created["updated_at"])
    grant_id = created["grant_id"]
    listed = {g["grant_id"]: g for g in admin.ok("GET", "/grants")}
    assert set(listed[grant_id]) == {"grant_id", "name", "description", "created_at"}
    assert admin.ok("GET", f"/grants/{grant_id}") == created
    new_doc = {**DOC, "Statement": [{**DOC["Statement"][0], "Effect": "Deny"}]}
    admin.ok("PUT", f"/grants/{grant_id}", {"document": new_doc, "name": name + "-x"}, 204)
    got = admin.ok("GET", f"/grants/{grant_id}")
    assert got["document"] == new_doc and got["name"] == name + "-x"
    admin.ok("PUT", f"/users/{user['user_id']}/grants/{grant_id}", None, 204)
    admin.ok("PUT", f"/teams/{team['team_id']}/grants/{grant_id}", None, 204)
    assert admin.ok("GET", f"/users/{user['user_id']}/grants") == [
        {"grant_id": grant_id, "name": name + "-x", "description": "d"}]
    admin.ok("DELETE", f"/grants/{grant_id}", None, 204)
    assert admin.ok("GET", f"/users/{user['user_id']}/grants") == []
    assert admin.ok("GET", f"/teams/{team['team_id']}/grants") == []
    assert_error(admin.get(f"/grants/{grant_id}"), 404, "NotFound")


def test_grant_document_as_json_text(admin: AdminClient) -> None:
    import json

    created = admin.ok("POST", "/grants",
                       {"name": unique("text"), "document": json.dumps(DOC)}, 201)
    assert created["document"] == DOC
    assert_error(admin.post("/grants", {"name": unique("bad"), "document": "{nope"}),
                 400, "BadRequest")


@pytest.mark.parametrize(("body", "culprit"), [
    ({"document": DOC}, "name"),
    ({"name": "", "document": DOC}, "name"),
    ({"name": "n"}, "document"),
    ({"name": "n", "document": {**DOC, "Version": "2008-10-17"}}, "Version"),
    ({"name": "n", "document": {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:Fly"], "Resource": ["*"]}]}}, "s3:Fly"),
    ({"name": "n", "document": {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["*"], "Resource": ["arn:aws:ec2:::x"]}]}},
     "arn:aws:ec2:::x"),
    ({"name": "n", "document": {"Version": "2012-10-17", "Statement": [
        {"Effect": "Maybe", "Action": ["*"], "Resource": ["*"]}]}}, "Effect"),
])
def test_create_grant_rejections_name_the_culprit(
    admin: AdminClient, body: dict[str, Any], culprit: str
) -> None:
    reply = admin.post("/grants", body)
    assert_error(reply, 400, "BadRequest")
    assert culprit in reply.json["message"]


def test_grant_errors(admin: AdminClient, grant: dict[str, Any], user: dict[str, Any]) -> None:
    grant_id = grant["grant_id"]
    assert_error(admin.post("/grants", {"name": grant["name"], "document": DOC}),
                 409, "Conflict")
    assert_error(admin.put(f"/grants/{grant_id}", {"document": {"Version": "1"}}),
                 400, "BadRequest")
    assert_error(admin.put(f"/grants/{MISSING}", {"description": "x"}), 404, "NotFound")
    assert_error(admin.delete(f"/grants/{MISSING}"), 404, "NotFound")
    assert_error(admin.put(f"/users/{user['user_id']}/grants/{MISSING}"), 404, "NotFound")
    assert_error(admin.put(f"/users/{MISSING}/grants/{grant_id}"), 404, "NotFound")
    assert_error(admin.delete(f"/users/{user['user_id']}/grants/{grant_id}"), 404, "NotFound")


# -- 404s of every "{id}" path, and bodies that are not JSON -----------------------------------


@pytest.mark.parametrize(("method", "path"), [
    ("GET", f"/users/{MISSING}"),
    ("PUT", f"/users/{MISSING}"),
    ("DELETE", f"/users/{MISSING}"),
    ("GET", f"/users/{MISSING}/grants"),
    ("GET", f"/users/{MISSING}/teams"),
    ("GET", f"/users/{MISSING}/effective-grants"),
    ("GET", f"/teams/{MISSING}"),
    ("PUT", f"/teams/{MISSING}"),
    ("DELETE", f"/teams/{MISSING}"),
    ("GET", f"/teams/{MISSING}/members"),
    ("GET", f"/teams/{MISSING}/grants"),
    ("GET", f"/grants/{MISSING}"),
    ("GET", "/no-such-family"),
    ("GET", "/users/"),
])
def test_missing_entities_are_json_404(admin: AdminClient, method: str, path: str) -> None:
    body = {"description": "x"} if method == "PUT" else None
    assert_error(admin.call(method, path, body), 404, "NotFound")


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/users"), ("POST", "/teams"), ("POST", "/grants"), ("POST", "/credentials"),
    ("PUT", f"/credentials/{ROOT_ACCESS_KEY}"), ("POST", "/presign"),
])
@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_bad_json_bodies_are_400(admin: AdminClient, method: str, path: str, raw: bytes
                                 ) -> None:
    assert_error(admin.call(method, path, raw=raw), 400, "BadRequest")


def test_wrong_method_is_json(admin: AdminClient) -> None:
    assert_error(admin.call("PATCH", "/users"), 405, "MethodNotAllowed")


def test_unsigned_and_badly_signed_calls_are_json_403(daemon: Daemon) -> None:
    import urllib3

    response = urllib3.PoolManager().request("GET", daemon.endpoint + "/admin/users")
    assert response.status == 403 and response.headers["Content-Type"] == "application/json"
    assert response.json()["error"] == "AccessDenied"
    wrong = AdminClient(daemon.endpoint, ROOT_ACCESS_KEY, "not-the-secret-0000000000")
    assert_error(wrong.get("/users"), 403, "SignatureDoesNotMatch")


def test_effective_grants_sources(admin: AdminClient, user: dict[str, Any],
                                  team: dict[str, Any], grant: dict[str, Any]) -> None:
    user_id = user["user_id"]
    admin.ok("PUT", f"/users/{user_id}/grants/{grant['grant_id']}", None, 204)
    admin.ok("PUT", f"/teams/{team['team_id']}/grants/{grant['grant_id']}", None, 204)
    admin.ok("PUT", f"/teams/{team['team_id']}/members/{user_id}", None, 204)
    entries = admin.ok("GET", f"/users/{user_id}/effective-grants")
    base = {"grant_id": grant["grant_id"], "name": grant["name"], "description": "",
            "administrator_equivalent": False}
    assert entries == [{**base, "source": "direct"},
                       {**base, "source": f"team:{team['name']}"}]


def test_oversized_json_body_is_json_413(admin: AdminClient) -> None:
    raw = b'{"username": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    assert_error(admin.call("POST", "/users", raw=raw), 413, "PayloadTooLarge")
