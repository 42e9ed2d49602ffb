"""No admin action gives its caller more than it holds, end to end with signed admin
requests against the real daemon: the two escalations of the robustness issue (a
svc:ManageCredentials helpdesk minting a key for an administrator, a svc:ManageUsers holder
attaching AdministratorAccess), what stays allowed, root, the effective-grants flag, and the
refusals in the audit log."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient, Reply
from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon

WAIT_SECONDS = 10.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def statement(actions: list[str], resources: list[str] | None = None,
              effect: str = "Allow") -> dict[str, Any]:
    return {"Effect": effect, "Action": actions, "Resource": resources or ["*"]}


class Person:
    """A non-root user with one credential, made by root."""

    def __init__(self, root: AdminClient, *grant_ids: str) -> None:
        self.name = unique("person")
        self.user_id: str = root.ok("POST", "/users", {"username": self.name}, 201)["user_id"]
        key = root.ok("POST", f"/users/{self.user_id}/credentials", {}, 201)
        self.access_key: str = key["access_key_id"]
        self.secret_key: str = key["secret_access_key"]
        self.admin = root.as_user(self.access_key, self.secret_key)
        for grant_id in grant_ids:
            root.ok("PUT", f"/users/{self.user_id}/grants/{grant_id}", None, 204)

    def grant_ids(self, root: AdminClient) -> set[str]:
        return {g["grant_id"] for g in root.ok("GET", f"/users/{self.user_id}/grants")}


@pytest.fixture
def root(daemon: Daemon) -> AdminClient:
    return AdminClient(daemon.endpoint)


@pytest.fixture
def builtin(root: AdminClient) -> dict[str, str]:
    return {g["name"]: g["grant_id"] for g in root.ok("GET", "/grants")}


def make_grant(root: AdminClient, *statements: dict[str, Any]) -> str:
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    grant_id: str = root.ok("POST", "/grants", {"name": unique("grant"), "document": document},
                            201)["grant_id"]
    return grant_id


def assert_denied(reply: Reply) -> None:
    assert reply.status == 403, (reply.status, reply.body)
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.error == "AccessDenied"


def audited(root: AdminClient, reply: Reply) -> dict[str, Any]:
    """The audit entry of `reply`'s request, once the log has it."""
    request_id = reply.headers["x-amz-request-id"]
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        entries = root.ok("GET", "/audit?limit=1000")["entries"]
        found = [e for e in entries if e["request_id"] == request_id]
        if found:
            return found[0]  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"request {request_id} was never audited"
        time.sleep(0.2)


def test_manage_credentials_cannot_mint_a_key_for_an_administrator(
    daemon: Daemon, root: AdminClient, builtin: dict[str, str]
) -> None:
    bucket = unique("private")
    root_s3 = make_client(daemon.endpoint)
    root_s3.create_bucket(Bucket=bucket)
    root_s3.put_object(Bucket=bucket, Key="payroll", Body=b"secret")
    helpdesk = Person(root, make_grant(root, statement(["svc:ManageCredentials"])))
    administrator = Person(root, builtin["AdministratorAccess"])

    refused = helpdesk.admin.post(f"/users/{administrator.user_id}/credentials", {})
    assert_denied(refused)
    assert "secret_access_key" not in refused.body.decode()
    assert len(root.ok("GET", f"/users/{administrator.user_id}/credentials")) == 1
    assert_denied(helpdesk.admin.put(f"/credentials/{administrator.access_key}",
                                     {"active": False}))
    assert_denied(helpdesk.admin.delete(f"/credentials/{administrator.access_key}"))
    reader = Person(root, builtin["S3ReadOnlyAccess"])  # wider than the helpdesk, too
    assert_denied(helpdesk.admin.post(f"/users/{reader.user_id}/credentials", {}))

    # A less privileged user: the helpdesk's job, and the key works as that user.
    plain = Person(root)
    key = helpdesk.admin.ok("POST", f"/users/{plain.user_id}/credentials", {}, 201)
    as_plain = make_client(daemon.endpoint, key["access_key_id"], key["secret_access_key"])
    with pytest.raises(ClientError):
        as_plain.get_object(Bucket=bucket, Key="payroll")
    assert_denied(root.as_user(key["access_key_id"], key["secret_access_key"]).post(
        "/users", {"username": unique("x")}))

    entry = audited(root, refused)
    assert (entry["operation"], entry["status"], entry["error_code"]) == (
        "admin:CreateUserCredential", 403, "AccessDenied")
    assert entry["username"] == helpdesk.name


def test_manage_users_cannot_attach_a_grant_it_does_not_hold(
    root: AdminClient, builtin: dict[str, str]
) -> None:
    manager = Person(root, make_grant(root, statement(["svc:ManageUsers", "s3:Get*",
                                                      "s3:List*"])))
    other = Person(root)
    administrator = builtin["AdministratorAccess"]
    to_self = manager.admin.put(f"/users/{manager.user_id}/grants/{administrator}")
    assert_denied(to_self)
    assert_denied(manager.admin.put(f"/users/{other.user_id}/grants/{administrator}"))
    assert_denied(manager.admin.put(
        f"/users/{other.user_id}/grants/{builtin['S3FullAccess']}"))
    assert administrator not in manager.grant_ids(root) and other.grant_ids(root) == set()
    assert manager.admin.ok("GET", "/me")["effective_actions"] == [
        "s3:Get*", "s3:List*", "svc:ManageUsers"]

    # A grant it holds may be given.
    manager.admin.ok("PUT", f"/users/{other.user_id}/grants/{builtin['S3ReadOnlyAccess']}",
                     None, 204)
    assert other.grant_ids(root) == {builtin["S3ReadOnlyAccess"]}
    # A user wider than the manager is out of reach, even to change its name.
    wide = Person(root, builtin["S3FullAccess"])
    assert_denied(manager.admin.put(f"/users/{wide.user_id}", {"description": "mine now"}))
    assert_denied(manager.admin.delete(f"/users/{wide.user_id}"))

    entry = audited(root, to_self)
    assert (entry["operation"], entry["status"], entry["error_code"]) == (
        "admin:AttachUserGrant", 403, "AccessDenied")


def test_teams_and_grant_documents_cannot_carry_more(
    root: AdminClient, builtin: dict[str, str]
) -> None:
    manager = Person(root, make_grant(root, statement(
        ["svc:ManageTeams", "svc:ManageGrants", "s3:GetObject"])))
    team = manager.admin.ok("POST", "/teams", {"name": unique("team")}, 201)["team_id"]
    assert_denied(manager.admin.put(f"/teams/{team}/grants/{builtin['AdministratorAccess']}"))
    assert_denied(manager.admin.put(f"/teams/{team}/grants/{builtin['S3ReadOnlyAccess']}"))
    mine = manager.admin.ok("POST", "/grants", {"name": unique("mine"), "document": {
        "Version": "2012-10-17", "Statement": [statement(["s3:GetObject"])]}}, 201)["grant_id"]
    manager.admin.ok("PUT", f"/teams/{team}/grants/{mine}", None, 204)
    manager.admin.ok("PUT", f"/teams/{team}/members/{manager.user_id}", None, 204)
    # Widening a grant that reaches a user (the manager itself, through the team): refused.
    wider = {"document": {"Version": "2012-10-17", "Statement": [statement(["*"])]}}
    assert_denied(manager.admin.put(f"/grants/{mine}", wider))
    assert root.ok("GET", f"/grants/{mine}")["document"]["Statement"][0]["Action"] == [
        "s3:GetObject"]
    # A team that holds more than the manager takes no members from it.
    wide_team = root.ok("POST", "/teams", {"name": unique("wide")}, 201)["team_id"]
    root.ok("PUT", f"/teams/{wide_team}/grants/{builtin['S3FullAccess']}", None, 204)
    assert_denied(manager.admin.put(f"/teams/{wide_team}/members/{manager.user_id}"))


def test_root_may_do_everything(root: AdminClient, builtin: dict[str, str]) -> None:
    administrator = Person(root, builtin["AdministratorAccess"])
    root.ok("POST", f"/users/{administrator.user_id}/credentials", {}, 201)
    team = root.ok("POST", "/teams", {"name": unique("admins")}, 201)["team_id"]
    root.ok("PUT", f"/teams/{team}/grants/{builtin['AdministratorAccess']}", None, 204)
    root.ok("PUT", f"/teams/{team}/members/{administrator.user_id}", None, 204)
    # A non-root administrator covers everyone but root.
    other = Person(root, builtin["S3FullAccess"])
    administrator.admin.ok("POST", f"/users/{other.user_id}/credentials", {}, 201)
    root_id = root.ok("GET", "/me")["user"]["user_id"]
    assert_denied(administrator.admin.post(f"/users/{root_id}/credentials", {}))


def test_effective_grants_show_administrator_equivalence(
    root: AdminClient, builtin: dict[str, str]
) -> None:
    person = Person(root, builtin["AdministratorAccess"], builtin["S3FullAccess"])
    flags = {e["name"]: e["administrator_equivalent"]
             for e in root.ok("GET", f"/users/{person.user_id}/effective-grants")}
    assert flags == {"AdministratorAccess": True, "S3FullAccess": False}
