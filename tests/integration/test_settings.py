"""Runtime settings against the real daemon: GET/PUT/DELETE /admin/settings/{key} for the
known keys only, their validation, the read-only node-local node_id, authorization, and
the settings surviving in the control record."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import boto3
import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon
from tests.integration.test_rbac import Person, allow


@pytest.fixture
def admin(daemon: Daemon) -> AdminClient:
    return AdminClient(daemon.endpoint)


def control_settings(daemon: Daemon) -> dict[str, Any]:
    found = {}
    for path in (daemon.data_dir / "control" / "settings").glob("*.json"):
        document = json.loads(path.read_text())
        found[document["key"]] = document["data"]["value"]
    return found


@pytest.mark.parametrize(("key", "value", "stored"), [
    ("region", "eu-west-3", "eu-west-3"),
    ("lifecycle_evaluation_interval", 30, "30"),
    ("lifecycle_evaluation_interval", 2.5, "2.5"),
    ("lifecycle_evaluation_interval", "45", "45"),
])
def test_put_get_delete(daemon: Daemon, admin: AdminClient, key: str, value: Any,
                        stored: str) -> None:
    put = admin.ok("PUT", f"/settings/{key}", {"value": value})
    assert put["key"] == key
    assert admin.ok("GET", f"/settings/{key}") == put
    assert str(put["value"]) == stored
    assert control_settings(daemon)[key] == stored
    admin.ok("DELETE", f"/settings/{key}", status=204)
    assert key not in control_settings(daemon)
    for method in ("GET", "DELETE"):
        reply = admin.call(method, f"/settings/{key}")
        assert (reply.status, reply.error) == (404, "NotFound")


@pytest.mark.parametrize(("key", "body"), [
    ("no_such_setting", {"value": 1}),
    ("lifecycle_evaluation_interval", {"value": 0}),
    ("lifecycle_evaluation_interval", {"value": 0.5}),
    ("lifecycle_evaluation_interval", {"value": -3}),
    ("lifecycle_evaluation_interval", {"value": "soon"}),
    ("lifecycle_evaluation_interval", {"value": True}),
    ("lifecycle_evaluation_interval", {"value": None}),
    ("lifecycle_evaluation_interval", {}),
    ("region", {"value": "Not A Region"}),
    ("region", {"value": ""}),
    ("region", {"value": 7}),
    ("region", {"key": "other", "value": "us-east-1"}),
])
def test_invalid_is_400(admin: AdminClient, key: str, body: dict[str, Any]) -> None:
    reply = admin.put(f"/settings/{key}", body)
    assert (reply.status, reply.error) == (400, "BadRequest"), reply.body
    assert admin.get(f"/settings/{key}").status in (400, 404)  # nothing was stored


def test_unknown_keys_are_400_everywhere(admin: AdminClient) -> None:
    for method in ("GET", "DELETE"):
        reply = admin.call(method, "/settings/no_such_setting")
        assert (reply.status, reply.error) == (400, "BadRequest")


def test_node_id_is_node_local_and_read_only(admin: AdminClient) -> None:
    node_id = admin.ok("GET", "/settings/node_id")["value"]
    assert node_id
    for method, body in (("PUT", {"value": "other"}), ("DELETE", None)):
        reply = admin.call(method, "/settings/node_id", body)
        assert (reply.status, reply.error) == (400, "BadRequest")
    assert admin.ok("GET", "/settings/node_id")["value"] == node_id
    listed = {entry["key"]: entry for entry in admin.ok("GET", "/settings")}
    assert set(listed) == {"region", "lifecycle_evaluation_interval", "node_id",
                           "replication_credentials"}
    assert listed["node_id"]["node_local"] and not listed["node_id"]["writable"]
    assert not listed["region"]["node_local"]


def test_authorization(admin: AdminClient) -> None:
    reader = Person(admin)
    reader.grant(allow(["svc:ViewServerInfo"], ["*"]))
    assert reader.client.get("/settings/node_id").status == 200
    reply = reader.client.put("/settings/region", {"value": "us-west-2"})
    assert (reply.status, reply.error) == (403, "AccessDenied")
    nobody = Person(admin)
    assert nobody.client.get("/settings").status == 403
    reader.grant(allow(["*"], ["*"]))
    assert reader.client.put("/settings/region", {"value": "us-west-2"}).status == 200
    assert reader.client.delete("/settings/region").status == 204



def regional_client(daemon: Daemon, region: str) -> Any:
    return boto3.client("s3", endpoint_url=daemon.endpoint, region_name=region,
                        aws_access_key_id=ROOT_ACCESS_KEY, aws_secret_access_key=ROOT_SECRET_KEY,
                        config=BotoConfig(retries={"max_attempts": 1}))


def test_region_takes_effect_without_a_restart(daemon: Daemon, admin: AdminClient) -> None:
    """The credential scope, a new bucket's region (GetBucketLocation, HeadBucket's
    x-amz-bucket-region); an existing bucket keeps its own, as on AWS."""
    old = f"region-old-{uuid.uuid4().hex[:8]}"
    regional_client(daemon, "us-east-1").create_bucket(Bucket=old)
    admin.ok("PUT", "/settings/region", {"value": "eu-test-1"})
    try:
        eu = regional_client(daemon, "eu-test-1")
        new = f"region-new-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + 10  # every worker reads the change within a second
        while True:
            try:
                eu.create_bucket(Bucket=new, CreateBucketConfiguration={
                    "LocationConstraint": "eu-test-1"})
                break
            except ClientError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert eu.get_bucket_location(Bucket=new)["LocationConstraint"] == "eu-test-1"
        head = eu.head_bucket(Bucket=new)
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-bucket-region"] == "eu-test-1"
        assert eu.get_bucket_location(Bucket=old)["LocationConstraint"] is None  # us-east-1
        with pytest.raises(ClientError) as wrong:
            regional_client(daemon, "ap-nowhere-1").list_buckets()
        assert wrong.value.response["Error"]["Code"] == "AuthorizationHeaderMalformed"
    finally:
        admin.ok("DELETE", "/settings/region", status=204)
