"""The admin API in memory (StubTreq against the real root resource, site, admin gate and
SigV4 authenticator; fake engine services): what each route's declared authorization
lets through, the JSON errors, and the probes that never pass the gate."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from objstore.admin.iam_routes import FAMILIES as IAM_FAMILIES
from objstore.admin.iam_routes import IamRoutes
from objstore.admin.quota_routes import FAMILIES as QUOTA_FAMILIES
from objstore.admin.quota_routes import QuotaRoutes
from objstore.admin.transfer_routes import FAMILIES as TRANSFER_FAMILIES
from objstore.admin.transfer_routes import TransferRoutes
from objstore.config import ServerLimits
from objstore.engine.changes import Caller
from objstore.engine.quota import BucketQuota, NoSuchBucket, UsageFigures
from objstore.errors import AdminError
from tests.unit.resource_fixtures import ALICE, NOW, SECRETS, Answer, Node

URL = "http://s3.test/admin"


class FakeIam:
    async def list_users(self) -> list[Any]:
        return []

    async def get_user(self, user_id: str) -> Any:
        raise AdminError("NotFound", f"No user {user_id}.")


class FakeQuotas:
    def __init__(self) -> None:
        self.quotas: dict[str, BucketQuota] = {"b": BucketQuota()}

    async def get(self, bucket: str) -> tuple[BucketQuota, UsageFigures]:
        if bucket not in self.quotas:
            raise NoSuchBucket(bucket)
        return self.quotas[bucket], UsageFigures(objects=0, bytes=0)

    async def put(self, caller: Caller, bucket: str, quota: BucketQuota) -> None:
        await self.get(bucket)
        self.quotas[bucket] = quota


class FakeTransfer:
    async def export(self, caller: Any, sections: Any, *, include_secrets: bool
                     ) -> dict[str, Any]:
        return {"version": 1}


def mount(node: Node) -> Node:
    gate = node.admin.authorize
    authorizer: Any = node.authorizer
    node.admin.mount(IAM_FAMILIES, IamRoutes(gate=gate, iam=FakeIam(),  # type: ignore[arg-type]
                                             authorizer=authorizer))
    node.admin.mount(QUOTA_FAMILIES, QuotaRoutes(gate=gate,
                                                 quotas=FakeQuotas()))  # type: ignore[arg-type]
    node.admin.mount(TRANSFER_FAMILIES, TransferRoutes(
        gate=gate, transfer=FakeTransfer(), authorizer=authorizer,  # type: ignore[arg-type]
        io=None))  # type: ignore[arg-type]
    return node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return mount(Node(tmp_path))


def error(answer: Answer) -> tuple[int, str]:
    assert answer.headers["content-type"] == "application/json"
    return answer.status, json.loads(answer.body)["error"]


def test_health_never_passes_the_gate(node: Node) -> None:
    answer = node.send("GET", f"{URL}/health", who=None)
    assert (answer.status, json.loads(answer.body)) == (200, {"status": "ok"})
    assert node.authorizer.checked == []
    assert node.records() == []  # counted in the metrics, not audited


def test_unsigned_call_is_refused_as_json(node: Node) -> None:
    assert error(node.send("GET", f"{URL}/info", who=None)) == (403, "AccessDenied")
    assert error(node.send("GET", f"{URL}/users", who=None)) == (403, "AccessDenied")
    assert [r.operation for r in node.records()] == ["admin:GetServerInfo", "admin:ListUsers"]


def test_root_passes_every_declared_action(node: Node) -> None:
    assert node.send("GET", f"{URL}/info").status == 200
    assert node.send("GET", f"{URL}/users").status == 200
    assert node.send("GET", f"{URL}/buckets/b/quota").status == 200
    assert node.send("GET", f"{URL}/export").status == 200
    assert [action for _, action, _ in node.authorizer.checked] == [
        "svc:ViewServerInfo", "svc:ManageUsers", "*", "*", "svc:ManageUsers",
        "svc:ManageTeams", "svc:ManageGrants", "svc:ManageCredentials", "svc:ViewServerInfo"]


def test_a_user_needs_the_route_action(node: Node) -> None:
    assert error(node.send("GET", f"{URL}/users", who=ALICE)) == (403, "AccessDenied")
    node.authorizer.grants.add(("svc:ManageUsers", "*"))
    assert node.send("GET", f"{URL}/users", who=ALICE).status == 200
    assert error(node.send("GET", f"{URL}/users/u-9", who=ALICE)) == (404, "NotFound")
    assert error(node.send("GET", f"{URL}/info", who=ALICE)) == (403, "AccessDenied")
    assert error(node.send("GET", f"{URL}/buckets/b/quota", who=ALICE)) == (403, "AccessDenied")


def test_me_needs_only_authentication(node: Node) -> None:
    answer = node.send("GET", f"{URL}/me", who=ALICE)
    assert answer.status == 200
    assert json.loads(answer.body)["user"]["username"] == "alice"
    assert node.authorizer.checked == []


def test_export_also_runs_the_routes_caller_check(node: Node) -> None:
    node.authorizer.grants.add(("*", "*"))
    assert node.send("GET", f"{URL}/export", who=ALICE).status == 200
    node.authorizer.denied.add("svc:ManageGrants")
    answer = node.send("GET", f"{URL}/export", who=ALICE)
    assert error(answer) == (403, "AccessDenied")
    assert "svc:ManageGrants is denied" in json.loads(answer.body)["message"]


def test_errors_are_json(node: Node) -> None:
    assert error(node.send("GET", f"{URL}/nothing-here")) == (404, "NotFound")
    assert error(node.send("DELETE", f"{URL}/users")) == (405, "MethodNotAllowed")
    assert error(node.send("GET", f"{URL}/buckets/nope/quota")) == (404, "NotFound")
    assert error(node.send("PUT", f"{URL}/buckets/b/quota", body=b"[1]")) == (400, "BadRequest")


def test_per_address_rate_limit_is_applied_before_authentication(tmp_path: Path) -> None:
    node = mount(Node(tmp_path, limits=ServerLimits(rate_limit_per_ip_per_second=1.0,
                                                    rate_limit_per_ip_burst=1)))
    assert node.send("GET", f"{URL}/users").status == 200
    assert error(node.send("GET", f"{URL}/users", who=None)) == (503, "SlowDown")
    assert node.send("GET", f"{URL}/health").status == 200  # probes are never limited


# -- generic SigV4 signers and the codes of authentication failures ----------------------


@pytest.fixture
def botocore_at_node_time(monkeypatch: pytest.MonkeyPatch) -> None:
    moment = datetime.datetime.fromtimestamp(NOW, datetime.UTC)

    def fixed(remove_tzinfo: bool = True) -> datetime.datetime:
        return moment.replace(tzinfo=None) if remove_tzinfo else moment

    monkeypatch.setattr(botocore.auth, "get_current_datetime", fixed)


def generic(node: Node, method: str, url: str, body: bytes = b"", *,
            secret: str = SECRETS["AKIAROOT"], access_key: str = "AKIAROOT",
            tamper: bytes | None = None) -> Answer:
    """Send a request signed by botocore's plain SigV4Auth: no x-amz-content-sha256."""
    request = AWSRequest(method, url, data=body,
                         headers={"content-type": "application/json"} if body else {})
    botocore.auth.SigV4Auth(Credentials(access_key, secret), "s3", "us-east-1").add_auth(
        request)
    headers = {name.lower(): value for name, value in request.prepare().headers.items()
               if name.lower() != "content-length"}  # treq sends its own
    assert "x-amz-content-sha256" not in headers
    return node.send(method, url, who=None, body=body if tamper is None else tamper,
                     unsigned=headers)


@pytest.mark.usefixtures("botocore_at_node_time")
def test_generic_sigv4_signer_is_accepted(node: Node) -> None:
    assert generic(node, "GET", f"{URL}/users").status == 200
    body = json.dumps({"max_bytes": 1000}).encode()
    assert generic(node, "PUT", f"{URL}/buckets/b/quota", body).status == 200


@pytest.mark.usefixtures("botocore_at_node_time")
def test_generic_sigv4_signature_covers_the_body(node: Node) -> None:
    body = json.dumps({"max_bytes": 1000}).encode()
    answer = generic(node, "PUT", f"{URL}/buckets/b/quota", body,
                     tamper=json.dumps({"max_bytes": 9999}).encode())
    assert error(answer) == (403, "SignatureDoesNotMatch")


@pytest.mark.usefixtures("botocore_at_node_time")
def test_authentication_failures_keep_their_s3_code(node: Node) -> None:
    assert error(generic(node, "GET", f"{URL}/users", secret="wrong")) == (
        403, "SignatureDoesNotMatch")
    assert error(generic(node, "GET", f"{URL}/users", access_key="AKIANOBODY")) == (
        403, "InvalidAccessKeyId")
    node.clock.advance(3600)
    assert error(generic(node, "GET", f"{URL}/users")) == (403, "RequestTimeTooSkewed")
    malformed = {"authorization": "AWS4-HMAC-SHA256 Credential=AKIAROOT/x", "x-amz-date":
                 "20231114T221320Z"}
    assert error(node.send("GET", f"{URL}/users", who=None, unsigned=malformed)) == (
        400, "BadRequest")


def test_a_body_is_authorized_once_before_it_is_read(node: Node) -> None:
    body = json.dumps({"max_bytes": 1000}).encode()
    assert node.send("PUT", f"{URL}/buckets/b/quota", body=body).status == 200
    assert node.authorizer.checked == [("root", "*", "*")]
    assert error(node.send("PUT", f"{URL}/buckets/b/quota", body=body, who=ALICE)) == (
        403, "AccessDenied")
    assert error(node.send("PUT", f"{URL}/nothing-here", body=body, who=None)) == (
        404, "NotFound")
    assert error(node.send("PATCH", f"{URL}/users", body=body, who=None)) == (
        405, "MethodNotAllowed")
