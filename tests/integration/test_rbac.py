"""RBAC end to end against the real daemon: the acceptance scenario of the access-control
issue, svc:* actions on the admin API, revocation on the very next request, presigned URLs
from /admin/presign, and the whole IAM control plane surviving a lost database."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon, drop_database, objstore_cli

HTTP = urllib3.PoolManager(retries=False, timeout=30.0)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def code_of(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(actions: list[str], resources: list[str], effect: str = "Allow") -> dict[str, Any]:
    return {"Effect": effect, "Action": actions, "Resource": resources}


class Person:
    """A non-root user with one credential, as the admin API creates them."""

    def __init__(self, admin: AdminClient, name: str | None = None) -> None:
        self.admin = admin
        self.user = admin.ok("POST", "/users", {"username": name or unique("user")}, 201)
        self.user_id: str = self.user["user_id"]
        credential = admin.ok("POST", f"/users/{self.user_id}/credentials", {}, 201)
        self.access_key: str = credential["access_key_id"]
        self.secret_key: str = credential["secret_access_key"]
        self.client = admin.as_user(self.access_key, self.secret_key)

    def s3(self, daemon: Daemon) -> Any:
        return make_client(daemon.endpoint, self.access_key, self.secret_key)

    def grant(self, *statements: dict[str, Any]) -> str:
        created = self.admin.ok("POST", "/grants",
                                {"name": unique("grant"), "document": policy(*statements)}, 201)
        grant_id: str = created["grant_id"]
        self.admin.ok("PUT", f"/users/{self.user_id}/grants/{grant_id}", None, 204)
        return grant_id


@pytest.fixture
def admin(daemon: Daemon) -> AdminClient:
    return AdminClient(daemon.endpoint)


@pytest.fixture
def root_s3(daemon: Daemon) -> Any:
    return make_client(daemon.endpoint)


# -- the acceptance scenario ----------------------------------------------------------------


def test_acceptance_scenario(daemon: Daemon, admin: AdminClient, root_s3: Any) -> None:
    root_s3.create_bucket(Bucket="photos")
    root_s3.put_object(Bucket="photos", Key="a.jpg", Body=b"public picture")
    root_s3.put_object(Bucket="photos", Key="private/b.jpg", Body=b"private picture")

    user = admin.ok("POST", "/users", {"username": unique("photographer")}, 201)
    user_id = user["user_id"]
    credential = admin.ok("POST", f"/users/{user_id}/credentials", {}, 201)
    team = admin.ok("POST", "/teams", {"name": unique("viewers")}, 201)
    grant = admin.ok("POST", "/grants", {"name": unique("photos-read"), "document": policy(
        allow(["s3:GetObject"], ["arn:aws:s3:::photos/*"]),
        allow(["s3:GetObject"], ["arn:aws:s3:::photos/private/*"], effect="Deny"),
    )}, 201)
    admin.ok("PUT", f"/teams/{team['team_id']}/grants/{grant['grant_id']}", None, 204)
    admin.ok("PUT", f"/teams/{team['team_id']}/members/{user_id}", None, 204)

    s3 = make_client(daemon.endpoint, credential["access_key_id"],
                     credential["secret_access_key"])
    assert s3.get_object(Bucket="photos", Key="a.jpg")["Body"].read() == b"public picture"
    with pytest.raises(ClientError) as denied:
        s3.get_object(Bucket="photos", Key="private/b.jpg")
    assert code_of(denied) == "AccessDenied"
    with pytest.raises(ClientError) as denied:
        s3.put_object(Bucket="photos", Key="new.jpg", Body=b"x")
    assert code_of(denied) == "AccessDenied"

    me = admin.as_user(credential["access_key_id"], credential["secret_access_key"])
    identity = me.ok("GET", "/me")
    assert identity == {"user": {"user_id": user_id, "username": user["username"],
                                 "is_root": False},
                        "effective_actions": ["s3:GetObject"]}
    assert admin.ok("GET", f"/users/{user_id}/effective-grants") == [{
        "grant_id": grant["grant_id"], "name": grant["name"], "description": "",
        "source": f"team:{team['name']}", "administrator_equivalent": False}]

    admin.ok("DELETE", f"/teams/{team['team_id']}/members/{user_id}", None, 204)
    with pytest.raises(ClientError) as denied:
        s3.get_object(Bucket="photos", Key="a.jpg")
    assert code_of(denied) == "AccessDenied"
    assert me.ok("GET", "/me")["effective_actions"] == []
    assert admin.ok("GET", f"/users/{user_id}/effective-grants") == []


# -- S3 authorization -----------------------------------------------------------------------


def test_builtin_grants_give_what_their_names_say(
    daemon: Daemon, admin: AdminClient, root_s3: Any
) -> None:
    bucket = unique("builtin")
    root_s3.create_bucket(Bucket=bucket)
    root_s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    grants = {g["name"]: g["grant_id"] for g in admin.ok("GET", "/grants")}
    reader = Person(admin)
    admin.ok("PUT", f"/users/{reader.user_id}/grants/{grants['S3ReadOnlyAccess']}", None, 204)
    s3 = reader.s3(daemon)
    assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    with pytest.raises(ClientError) as denied:
        s3.delete_object(Bucket=bucket, Key="k")
    assert code_of(denied) == "AccessDenied"
    assert_admin_denied(reader.client, "GET", "/users")

    writer = Person(admin)
    admin.ok("PUT", f"/users/{writer.user_id}/grants/{grants['S3FullAccess']}", None, 204)
    own = unique("own")
    writer.s3(daemon).create_bucket(Bucket=own)
    writer.s3(daemon).put_object(Bucket=own, Key="k", Body=b"w")
    assert_admin_denied(writer.client, "GET", "/info")

    boss = Person(admin)
    admin.ok("PUT", f"/users/{boss.user_id}/grants/{grants['AdministratorAccess']}", None, 204)
    assert boss.client.ok("GET", "/me")["effective_actions"] == ["*"]
    assert boss.client.ok("GET", "/info")["version"]
    boss.s3(daemon).delete_object(Bucket=own, Key="k")


def test_bucket_arn_for_bucket_operations(daemon: Daemon, admin: AdminClient, root_s3: Any
                                          ) -> None:
    bucket = unique("arns")
    root_s3.create_bucket(Bucket=bucket)
    root_s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    person = Person(admin)
    person.grant(allow(["s3:*"], [f"arn:aws:s3:::{bucket}/*"]))
    s3 = person.s3(daemon)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    with pytest.raises(ClientError) as denied:
        s3.list_objects_v2(Bucket=bucket)
    assert code_of(denied) == "AccessDenied"
    with pytest.raises(ClientError) as denied:
        s3.list_buckets()
    assert code_of(denied) == "AccessDenied"
    person.grant(allow(["s3:ListBucket"], [f"arn:aws:s3:::{bucket}"]),
                 allow(["s3:ListAllMyBuckets"], ["arn:aws:s3:::*"]))
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_revoking_a_grant_applies_to_the_next_request(
    daemon: Daemon, admin: AdminClient, root_s3: Any
) -> None:
    bucket = unique("revoke")
    root_s3.create_bucket(Bucket=bucket)
    root_s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    person = Person(admin)
    grant_id = person.grant(allow(["s3:GetObject"], ["*"]))
    s3 = person.s3(daemon)
    s3.get_object(Bucket=bucket, Key="k")
    admin.ok("DELETE", f"/users/{person.user_id}/grants/{grant_id}", None, 204)
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="k")
    admin.ok("PUT", f"/users/{person.user_id}/grants/{grant_id}", None, 204)
    s3.get_object(Bucket=bucket, Key="k")
    admin.ok("PUT", f"/grants/{grant_id}", {"document": policy(
        allow(["s3:GetObject"], ["*"], effect="Deny"))}, 204)
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="k")


# -- credentials that authenticate nobody --------------------------------------------------


def test_inactive_or_deleted_credential_authenticates_nobody(
    daemon: Daemon, admin: AdminClient, root_s3: Any
) -> None:
    person = Person(admin)
    person.grant(allow(["s3:ListAllMyBuckets"], ["*"]))
    spare = admin.ok("POST", f"/users/{person.user_id}/credentials", {}, 201)
    s3 = person.s3(daemon)
    s3.list_buckets()
    admin.ok("PUT", f"/credentials/{person.access_key}", {"active": False}, 204)
    with pytest.raises(ClientError) as refused:
        s3.list_buckets()
    assert code_of(refused) == "InvalidAccessKeyId"
    reply = person.client.get("/me")
    assert (reply.status, reply.error) == (403, "InvalidAccessKeyId")
    admin.ok("PUT", f"/credentials/{person.access_key}", {"active": True}, 204)
    s3.list_buckets()
    admin.ok("DELETE", f"/credentials/{person.access_key}", None, 204)
    with pytest.raises(ClientError) as refused:
        s3.list_buckets()
    assert code_of(refused) == "InvalidAccessKeyId"
    admin.ok("DELETE", f"/credentials/{spare['access_key_id']}", None, 204)
    admin.ok("DELETE", f"/users/{person.user_id}", None, 204)
    with pytest.raises(ClientError) as refused:
        make_client(daemon.endpoint, spare["access_key_id"],
                    spare["secret_access_key"]).list_buckets()
    assert code_of(refused) == "InvalidAccessKeyId"


# -- the admin API for non-root callers ------------------------------------------------------


def assert_admin_denied(client: AdminClient, method: str, path: str, body: Any = None) -> None:
    reply = client.call(method, path, body)
    assert reply.status == 403, (method, path, reply.status, reply.body)
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json["error"] == "AccessDenied"


ENDPOINT_ACTIONS = [
    ("GET", "/users", "svc:ManageUsers"),
    ("POST", "/users", "svc:ManageUsers"),
    ("GET", "/teams", "svc:ManageTeams"),
    ("GET", "/grants", "svc:ManageGrants"),
    ("GET", "/credentials", "svc:ManageCredentials"),
    ("GET", "/info", "svc:ViewServerInfo"),
    ("GET", "/stats", "svc:ViewServerInfo"),
    ("POST", "/presign", "svc:CreatePresignedUrl"),
]


@pytest.mark.parametrize(("method", "path", "action"), ENDPOINT_ACTIONS)
def test_admin_endpoints_need_their_svc_action(
    admin: AdminClient, method: str, path: str, action: str
) -> None:
    person = Person(admin)
    body = {"username": unique("made")} if path == "/users" else (
        {"bucket": "some-bucket", "key": "k"} if path == "/presign" else None)
    assert_admin_denied(person.client, method, path, body)
    assert person.client.ok("GET", "/me")["effective_actions"] == []
    person.grant(allow([action], ["*"]))
    reply = person.client.call(method, path, body)
    assert reply.status in (200, 201), reply.body
    for other_method, other_path, other_action in ENDPOINT_ACTIONS:
        if other_action != action and other_method == "GET":
            assert_admin_denied(person.client, other_method, other_path)


def test_user_credentials_need_manage_credentials(admin: AdminClient) -> None:
    person = Person(admin)
    target = Person(admin)
    person.grant(allow(["svc:ManageUsers"], ["*"]))
    assert_admin_denied(person.client, "GET", f"/users/{target.user_id}/credentials")
    person.grant(allow(["svc:ManageCredentials"], ["*"]))
    assert len(person.client.ok("GET", f"/users/{target.user_id}/credentials")) == 1


def test_explicit_deny_of_an_admin_action(admin: AdminClient) -> None:
    person = Person(admin)
    person.grant(allow(["svc:*"], ["*"]), allow(["svc:ManageGrants"], ["*"], effect="Deny"))
    person.client.ok("GET", "/users")
    assert_admin_denied(person.client, "GET", "/grants")


def test_non_root_cannot_mint_root_credentials_or_lock_itself_out(admin: AdminClient) -> None:
    person = Person(admin)
    person.grant(allow(["svc:ManageCredentials", "svc:ManageUsers"], ["*"]))
    root_id = admin.ok("GET", "/me")["user"]["user_id"]
    assert_admin_denied(person.client, "POST", f"/users/{root_id}/credentials", {})
    from tests.integration.daemon import ROOT_ACCESS_KEY

    assert_admin_denied(person.client, "PUT", f"/credentials/{ROOT_ACCESS_KEY}",
                        {"active": False})
    own = person.client.ok("GET", "/credentials")
    assert [c["access_key_id"] for c in own] == [person.access_key]
    reply = person.client.put(f"/credentials/{person.access_key}", {"active": False})
    assert reply.status == 409 and reply.json["error"] == "Conflict"
    reply = person.client.delete(f"/credentials/{person.access_key}")
    assert reply.status == 409 and reply.json["error"] == "Conflict"
    extra = person.client.ok("POST", "/credentials", {"description": "mine"}, 201)
    assert extra["user_id"] == person.user_id
    person.client.ok("DELETE", f"/credentials/{person.access_key}", None, 204)


# -- presigned URLs ----------------------------------------------------------------------------


def presign(client: AdminClient, **body: Any) -> dict[str, Any]:
    result: dict[str, Any] = client.ok("POST", "/presign", body)
    return result


def test_presigned_urls_work_against_the_s3_api(
    daemon: Daemon, admin: AdminClient, root_s3: Any
) -> None:
    bucket = unique("presign")
    root_s3.create_bucket(Bucket=bucket)
    key = "dir/a file+ü.txt"
    put = presign(admin, bucket=bucket, key=key, method="PUT", expires=120)
    assert HTTP.request("PUT", put["url"], body=b"via presign").status == 200
    get = presign(admin, bucket=bucket, key=key)
    assert "X-Amz-Signature=" in get["url"] and "X-Amz-Expires=3600" in get["url"]
    response = HTTP.request("GET", get["url"])
    assert (response.status, response.data) == (200, b"via presign")
    head = presign(admin, bucket=bucket, key=key, method="head")
    assert HTTP.request("HEAD", head["url"]).status == 200
    assert HTTP.request("PUT", get["url"], body=b"x").status == 403  # method is signed
    delete = presign(admin, bucket=bucket, key=key, method="DELETE")
    assert HTTP.request("DELETE", delete["url"]).status == 204
    assert HTTP.request("GET", get["url"]).status == 404


def test_presigned_url_expires(daemon: Daemon, admin: AdminClient, root_s3: Any) -> None:
    bucket = unique("expiry")
    root_s3.create_bucket(Bucket=bucket)
    root_s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    before = time.time()
    result = presign(admin, bucket=bucket, key="k", expires=1)
    expires_at = result["expires_at"]
    import datetime

    moment = datetime.datetime.fromisoformat(expires_at)
    assert moment.utcoffset() is not None and abs(moment.timestamp() - before - 1) < 3
    deadline = time.monotonic() + 10
    status = HTTP.request("GET", result["url"]).status
    while status == 200 and time.monotonic() < deadline:
        time.sleep(0.25)
        status = HTTP.request("GET", result["url"]).status
    assert status == 403


def test_presign_endpoint_override_and_bounds(admin: AdminClient) -> None:
    result = presign(admin, bucket="some-bucket", key="k",
                     endpoint="https://cdn.example.com:8443")
    assert result["url"].startswith("https://cdn.example.com:8443/some-bucket/k?")
    for body in (
        {"key": "k"}, {"bucket": "some-bucket"}, {"bucket": "some-bucket", "key": ""},
        {"bucket": "Bad_Bucket", "key": "k"},
        {"bucket": "some-bucket", "key": "k", "method": "POST"},
        {"bucket": "some-bucket", "key": "k", "expires": 0},
        {"bucket": "some-bucket", "key": "k", "expires": 604801},
        {"bucket": "some-bucket", "key": "k", "expires": "60"},
        {"bucket": "some-bucket", "key": "k", "endpoint": "ftp://x"},
        {"bucket": "some-bucket", "key": "k", "endpoint": "https://x/prefix"},
    ):
        reply = admin.post("/presign", body)
        assert reply.status == 400 and reply.json["error"] == "BadRequest", body
    assert presign(admin, bucket="some-bucket", key="k", expires=604800)["url"]


def test_presigned_url_carries_the_callers_rights(
    daemon: Daemon, admin: AdminClient, root_s3: Any
) -> None:
    bucket = unique("rights")
    root_s3.create_bucket(Bucket=bucket)
    root_s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    person = Person(admin)
    person.grant(allow(["svc:CreatePresignedUrl"], ["*"]),
                 allow(["s3:GetObject"], [f"arn:aws:s3:::{bucket}/*"]))
    get = presign(person.client, bucket=bucket, key="k")
    assert f"X-Amz-Credential={person.access_key}" in get["url"]
    assert HTTP.request("GET", get["url"]).data == b"v"
    put = presign(person.client, bucket=bucket, key="k", method="PUT")
    response = HTTP.request("PUT", put["url"], body=b"nope")
    assert response.status == 403 and b"AccessDenied" in response.data


# -- stats -------------------------------------------------------------------------------------


def test_stats(daemon: Daemon, admin: AdminClient, root_s3: Any) -> None:
    before = admin.ok("GET", "/stats")
    bucket = unique("stats")
    root_s3.create_bucket(Bucket=bucket)
    root_s3.put_object(Bucket=bucket, Key="k", Body=b"12345")
    after = admin.ok("GET", "/stats")
    assert after["bucket_count"] == before["bucket_count"] + 1
    assert after["object_count"] == before["object_count"] + 1
    assert after["total_size_bytes"] == before["total_size_bytes"] + 5
    assert after["disk_total_bytes"] >= after["disk_available_bytes"] > 0


# -- recovery ------------------------------------------------------------------------------------




def iam_snapshot(admin: AdminClient) -> dict[str, Any]:
    users = admin.ok("GET", "/users")
    teams = admin.ok("GET", "/teams")
    return {
        "users": users,
        "teams": teams,
        "grants": [admin.ok("GET", f"/grants/{g['grant_id']}")
                   for g in admin.ok("GET", "/grants")],
        "members": {t["team_id"]: admin.ok("GET", f"/teams/{t['team_id']}/members")
                    for t in teams},
        "team_grants": {t["team_id"]: admin.ok("GET", f"/teams/{t['team_id']}/grants")
                        for t in teams},
        "effective": {u["user_id"]: admin.ok("GET", f"/users/{u['user_id']}/effective-grants")
                      for u in users},
        "credentials": {u["user_id"]: admin.ok("GET", f"/users/{u['user_id']}/credentials")
                        for u in users},
    }


def test_recover_restores_the_iam_control_plane(node: Daemon) -> None:
    admin = AdminClient(node.endpoint)
    root_s3: Any = make_client(node.endpoint)
    root_s3.create_bucket(Bucket="photos")
    root_s3.put_object(Bucket="photos", Key="a.jpg", Body=b"a")
    root_s3.put_object(Bucket="photos", Key="private/b.jpg", Body=b"b")
    person = Person(admin, "keeper")
    person.grant(allow(["s3:ListAllMyBuckets"], ["*"]))
    team = admin.ok("POST", "/teams", {"name": "viewers", "description": "see"}, 201)
    grant = admin.ok("POST", "/grants", {"name": "photos-read", "document": policy(
        allow(["s3:GetObject"], ["arn:aws:s3:::photos/*"]),
        allow(["s3:GetObject"], ["arn:aws:s3:::photos/private/*"], effect="Deny"),
    )}, 201)
    admin.ok("PUT", f"/teams/{team['team_id']}/grants/{grant['grant_id']}", None, 204)
    admin.ok("PUT", f"/teams/{team['team_id']}/members/{person.user_id}", None, 204)
    gone = Person(admin, "leaver")
    gone_team = admin.ok("POST", "/teams", {"name": "gone"}, 201)
    admin.ok("PUT", f"/teams/{gone_team['team_id']}/members/{gone.user_id}", None, 204)
    admin.ok("DELETE", f"/credentials/{gone.access_key}", None, 204)
    admin.ok("DELETE", f"/users/{gone.user_id}", None, 204)
    admin.ok("DELETE", f"/teams/{gone_team['team_id']}", None, 204)
    admin.ok("PUT", f"/users/{person.user_id}", {"description": "renamed before the loss"},
             204)
    before = iam_snapshot(admin)
    node.stop()

    drop_database(node)
    result = objstore_cli(node, "recover")
    assert result.returncode == 0, result.stderr
    assert "recovered 1 buckets" in result.stderr
    node.start()

    assert iam_snapshot(admin) == before
    s3 = person.s3(node)
    assert s3.get_object(Bucket="photos", Key="a.jpg")["Body"].read() == b"a"
    with pytest.raises(ClientError) as denied:
        s3.get_object(Bucket="photos", Key="private/b.jpg")
    assert code_of(denied) == "AccessDenied"
    with pytest.raises(ClientError) as denied:
        s3.put_object(Bucket="photos", Key="c.jpg", Body=b"c")
    assert code_of(denied) == "AccessDenied"
    assert "photos" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
