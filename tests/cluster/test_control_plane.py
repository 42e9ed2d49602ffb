"""The control plane of a real three-node cluster (Cluster rules 3, 6, 13): buckets, IAM,
settings, bucket configuration and object tags changed through one node reach the others
(an op notice makes each peer pull and merge the sender's control snapshot; tags travel
as rows), and a deleted credential stays deleted everywhere. Tags changed on a, then on b,
end as b's on every node (tags_updated_at), also when a node was down for either change
and caught up through anti-entropy."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.cluster.clients import error_code, has_bucket, s3_as
from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b", "c")
DEADLINE = 30.0
CATCH_UP_SECONDS = 60.0
FAST = {"anti_entropy_interval_seconds": "0.5"}
S3_FULL_ACCESS = "S3FullAccess"


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides={name: FAST for name in NAMES}) as started:
        wait_until_trusted(started, DEADLINE)
        yield started


def fresh_bucket(nodes: dict[str, Node], through: str = "a") -> str:
    bucket = f"ctl-{uuid.uuid4().hex[:12]}"
    nodes[through].s3.create_bucket(Bucket=bucket)
    for name in NAMES:
        wait_for(f"bucket {bucket} on {name}",
                 lambda name=name: has_bucket(nodes[name], bucket), DEADLINE)
    return bucket


def test_a_bucket_created_on_one_node_appears_on_the_others(nodes: dict[str, Node]) -> None:
    bucket = fresh_bucket(nodes, "a")
    nodes["b"].s3.create_bucket(Bucket=bucket)  # one root on every node: idempotent
    nodes["b"].s3.put_object(Bucket=bucket, Key="through-b", Body=b"written on b")
    for name in ("a", "c"):
        got = nodes[name].s3.get_object(Bucket=bucket, Key="through-b")
        assert got["Body"].read() == b"written on b"


def test_an_object_put_right_after_its_bucket_reaches_every_node(
        nodes: dict[str, Node]) -> None:
    """The first replicated row of a bucket a peer does not hold yet makes the peer pull
    the control plane first: the quorum write succeeds without waiting for the notice."""
    bucket = f"ctl-{uuid.uuid4().hex[:12]}"
    nodes["a"].s3.create_bucket(Bucket=bucket)
    nodes["a"].s3.put_object(Bucket=bucket, Key="at-once", Body=b"no wait")
    for name in ("b", "c"):
        got = nodes[name].s3.get_object(Bucket=bucket, Key="at-once")
        assert got["Body"].read() == b"no wait"


def test_a_credential_made_on_a_signs_on_b_until_deleted(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    bucket = fresh_bucket(nodes, "c")
    user = a.admin.ok("POST", "/users", {"username": f"u-{uuid.uuid4().hex[:8]}"}, 201)
    grants = {g["name"]: g["grant_id"] for g in a.admin.ok("GET", "/grants")}
    a.admin.ok("PUT", f"/users/{user['user_id']}/grants/{grants[S3_FULL_ACCESS]}", None, 204)
    key = a.admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    on_b = s3_as(b, key["access_key_id"], key["secret_access_key"])
    wait_for("the new credential works on b", lambda: error_code(
        lambda: on_b.put_object(Bucket=bucket, Key="by-user", Body=b"x")) is None, DEADLINE)
    assert nodes["c"].s3.get_object(Bucket=bucket, Key="by-user")["Body"].read() == b"x"

    reply = a.admin.delete(f"/credentials/{key['access_key_id']}")
    assert reply.status == 204, (reply.status, reply.body)
    wait_for("b refuses the deleted credential", lambda: error_code(
        lambda: on_b.list_objects_v2(Bucket=bucket)) == "InvalidAccessKeyId", DEADLINE)
    # More changes make every node pull again: the credential is not resurrected.
    for name in NAMES:
        fresh_bucket(nodes, name)
    for name in NAMES:
        node_client = s3_as(nodes[name], key["access_key_id"], key["secret_access_key"])
        assert error_code(lambda c=node_client: c.list_objects_v2(Bucket=bucket)) \
            == "InvalidAccessKeyId"
    assert all(c["access_key_id"] != key["access_key_id"]
               for c in b.admin.ok("GET", f"/users/{user['user_id']}/credentials"))


def test_a_setting_changed_on_a_is_seen_on_b(nodes: dict[str, Node]) -> None:
    nodes["a"].admin.ok("PUT", "/settings/lifecycle_evaluation_interval", {"value": 42})

    def seen() -> bool:
        reply = nodes["b"].admin.get("/settings/lifecycle_evaluation_interval")
        return reply.status == 200 and reply.json.get("value") == 42

    wait_for("the setting on b", seen, DEADLINE)
    # node_id is node-local: never replicated
    assert nodes["b"].admin.ok("GET", "/settings/node_id")["value"] == "node-b"


def test_object_tags_set_on_a_are_read_on_b(nodes: dict[str, Node]) -> None:
    bucket = fresh_bucket(nodes, "a")
    nodes["a"].s3.put_object(Bucket=bucket, Key="tagged", Body=b"tag me")
    tags = [{"Key": "colour", "Value": "blue"}, {"Key": "size", "Value": "small"}]
    nodes["a"].s3.put_object_tagging(Bucket=bucket, Key="tagged", Tagging={"TagSet": tags})

    def tagged() -> bool:
        got = nodes["b"].s3.get_object_tagging(Bucket=bucket, Key="tagged")["TagSet"]
        return sorted(got, key=lambda t: t["Key"]) == tags

    wait_for("the tags on b", tagged, DEADLINE)


def test_an_object_acl_set_on_a_opens_the_object_on_b(nodes: dict[str, Node]) -> None:
    """An object ACL travels as a row (acl_changed), the bucket's ownership and public
    access block as control-plane documents: b serves the object to anonymous callers."""
    bucket = fresh_bucket(nodes, "a")
    on_a = nodes["a"].s3
    on_a.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls={
        "Rules": [{"ObjectOwnership": "ObjectWriter"}]})
    on_a.delete_public_access_block(Bucket=bucket)
    on_a.put_object(Bucket=bucket, Key="shared", Body=b"open")
    http = urllib3.PoolManager(retries=False, timeout=10.0)
    url = f"{nodes['b'].daemon.endpoint}/{bucket}/shared"
    wait_for("the object on b", lambda: http.request("GET", url).status == 403, DEADLINE)
    on_a.put_object_acl(Bucket=bucket, Key="shared", ACL="public-read")
    wait_for("the public object on b", lambda: http.request("GET", url).status == 200,
             DEADLINE)
    grants = nodes["b"].s3.get_object_acl(Bucket=bucket, Key="shared")["Grants"]
    assert {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"} in \
        [g["Grantee"] for g in grants]


def tag_set(node: Node, bucket: str, key: str) -> dict[str, str] | None:
    """The tags `node` serves for `key` (None while it does not hold the object)."""
    try:
        got = node.s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    except ClientError as error:
        if error.response["Error"]["Code"] in ("NoSuchKey", "NoSuchBucket"):
            return None
        raise
    return {tag["Key"]: tag["Value"] for tag in got}


def put_tags(node: Node, bucket: str, key: str, tags: dict[str, str]) -> None:
    node.s3.put_object_tagging(Bucket=bucket, Key=key, Tagging={"TagSet": [
        {"Key": name, "Value": value} for name, value in tags.items()]})


def tagged_everywhere(nodes: dict[str, Node], bucket: str, key: str,
                      tags: dict[str, str], deadline: float = DEADLINE) -> None:
    for name in NAMES:
        wait_for(f"{key}'s tags {tags} on {name}",
                 lambda name=name: tag_set(nodes[name], bucket, key) == tags, deadline)


def tagged_object(nodes: dict[str, Node], key: str) -> str:
    bucket = fresh_bucket(nodes)
    nodes["a"].s3.put_object(Bucket=bucket, Key=key, Body=b"tags race")
    tagged_everywhere(nodes, bucket, key, {})
    return bucket


def test_tags_changed_on_a_then_on_b_end_as_bs_everywhere(nodes: dict[str, Node]) -> None:
    bucket = tagged_object(nodes, "raced")
    put_tags(nodes["a"], bucket, "raced", {"by": "a"})
    put_tags(nodes["b"], bucket, "raced", {"by": "b", "second": "yes"})
    tagged_everywhere(nodes, bucket, "raced", {"by": "b", "second": "yes"})
    nodes["a"].s3.delete_object_tagging(Bucket=bucket, Key="raced")
    tagged_everywhere(nodes, bucket, "raced", {})


def test_a_node_down_during_both_tag_changes_ends_with_the_later(
        nodes: dict[str, Node]) -> None:
    bucket = tagged_object(nodes, "while-c-away")
    nodes["c"].daemon.stop()
    try:
        put_tags(nodes["a"], bucket, "while-c-away", {"by": "a"})
        put_tags(nodes["b"], bucket, "while-c-away", {"by": "b"})
    finally:
        nodes["c"].daemon.start()
    tagged_everywhere(nodes, bucket, "while-c-away", {"by": "b"}, CATCH_UP_SECONDS)


def test_the_node_holding_the_older_tags_catches_up_to_the_later(
        nodes: dict[str, Node]) -> None:
    bucket = tagged_object(nodes, "while-a-away")
    put_tags(nodes["a"], bucket, "while-a-away", {"by": "a"})
    tagged_everywhere(nodes, bucket, "while-a-away", {"by": "a"})
    nodes["a"].daemon.stop()
    try:
        put_tags(nodes["b"], bucket, "while-a-away", {"by": "b"})
    finally:
        nodes["a"].daemon.start()
    tagged_everywhere(nodes, bucket, "while-a-away", {"by": "b"}, CATCH_UP_SECONDS)


def test_bucket_versioning_enabled_on_a_is_seen_on_c(nodes: dict[str, Node]) -> None:
    bucket = fresh_bucket(nodes, "b")
    nodes["a"].s3.put_bucket_versioning(Bucket=bucket,
                                        VersioningConfiguration={"Status": "Enabled"})
    wait_for("versioning on c", lambda: nodes["c"].s3.get_bucket_versioning(
        Bucket=bucket).get("Status") == "Enabled", DEADLINE)
    metrics = nodes["c"].admin.get("/metrics").body.decode()
    pulls = [line for line in metrics.splitlines()
             if line.startswith("objstore_cluster_control_pulls_total ")]
    assert pulls and float(pulls[0].split()[1]) > 0


def test_a_bucket_deleted_on_one_node_is_gone_everywhere(nodes: dict[str, Node]) -> None:
    bucket = fresh_bucket(nodes, "c")
    nodes["a"].s3.delete_bucket(Bucket=bucket)
    for name in NAMES:
        wait_for(f"bucket {bucket} gone on {name}",
                 lambda name=name: not has_bucket(nodes[name], bucket), DEADLINE)


def test_a_legal_hold_set_on_a_is_read_on_c(nodes: dict[str, Node]) -> None:
    bucket = f"ctl-{uuid.uuid4().hex[:12]}"
    nodes["a"].s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    put = nodes["a"].s3.put_object(Bucket=bucket, Key="held", Body=b"keep me")
    version = put["VersionId"]
    nodes["a"].s3.put_object_legal_hold(Bucket=bucket, Key="held", VersionId=version,
                                        LegalHold={"Status": "ON"})

    def held() -> bool:
        try:
            got = nodes["c"].s3.get_object_legal_hold(Bucket=bucket, Key="held",
                                                       VersionId=version)
        except ClientError:
            return False
        return bool(got["LegalHold"]["Status"] == "ON")

    wait_for("the legal hold on c", held, DEADLINE)
    with pytest.raises(ClientError):
        nodes["c"].s3.delete_object(Bucket=bucket, Key="held", VersionId=version)
