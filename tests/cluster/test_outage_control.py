"""The control plane converges on a node that was down (real daemons, SQLite and
PostgreSQL; issue 14): with node c stopped, a and b take IAM changes (a user, its access
key, a grant attached to it, a team with it as member and the grant attached; a user and
an access key deleted), bucket configuration (versioning, lifecycle, bucket tags, a
bucket quota, compression: S3 bucket policies are not implemented; a bucket deleted), a setting,
object tags, a multipart upload opened and one aborted. When c returns (its start waits
for /admin/health 200: syncing is over) it holds all of it, and nothing deleted comes
back: the deleted key is refused by c, the deleted user, bucket and aborted upload stay
gone, on every node. (The object tags may lose their tie on c, a known gap: see the end.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.cluster.clients import error_code, has_bucket, s3_as
from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted
from tests.integration.conftest import BACKENDS

pytestmark = pytest.mark.timeout(150)

NAMES = ("a", "b", "c")
DEADLINE = 60.0
FAST = {"anti_entropy_interval_seconds": "0.5"}
CONFIGURED, DOOMED = "configured", "doomed"
LIFECYCLE = {"Rules": [{"ID": "expire-logs", "Status": "Enabled",
                        "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 7}}]}
BUCKET_TAGS = [{"Key": "team", "Value": "storage"}]
OBJECT_TAGS = [{"Key": "colour", "Value": "green"}]
PART_ONE, PART_TWO = b"1" * (5 * 1024 * 1024), b"second part"


@pytest.fixture(scope="module", params=BACKENDS)
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES, backend=request.param,
                       cluster_overrides={name: FAST for name in NAMES}) as started:
        wait_until_trusted(started, DEADLINE)
        yield started


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def uploads(node: Node, bucket: str) -> set[str]:
    listed = node.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return {u["UploadId"] for u in listed}


def test_control_changes_made_while_a_node_was_down_reach_it(
        nodes: dict[str, Node]) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    bucket = unique(CONFIGURED)
    doomed = unique(DOOMED)
    a.s3.create_bucket(Bucket=bucket)
    a.s3.create_bucket(Bucket=doomed)
    a.s3.put_object(Bucket=bucket, Key="tagged", Body=b"tag me later")
    aborted = a.s3.create_multipart_upload(Bucket=bucket, Key="aborted")["UploadId"]
    completed = a.s3.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    parts = [a.s3.upload_part(Bucket=bucket, Key="assembled", UploadId=completed,
                              PartNumber=number, Body=body)["ETag"]
             for number, body in ((1, PART_ONE), (2, PART_TWO))]
    reborn = unique("reborn")
    a.s3.create_bucket(Bucket=reborn)
    a.s3.put_bucket_tagging(Bucket=reborn, Tagging={"TagSet": BUCKET_TAGS})
    a.s3.put_object(Bucket=reborn, Key="old", Body=b"of the first incarnation")
    leaving = a.admin.ok("POST", "/users", {"username": unique("leaving")}, 201)
    keeper = a.admin.ok("POST", "/users", {"username": unique("keeper")}, 201)
    grants = {g["name"]: g["grant_id"] for g in a.admin.ok("GET", "/grants")}
    a.admin.ok("PUT", f"/users/{keeper['user_id']}/grants/{grants['S3FullAccess']}", None, 204)
    old_key = a.admin.ok("POST", f"/users/{keeper['user_id']}/credentials", {}, 201)
    old_on_c = s3_as(c, old_key["access_key_id"], old_key["secret_access_key"])
    old_on_b = s3_as(b, old_key["access_key_id"], old_key["secret_access_key"])
    wait_for("b and c hold what was made before c stops", lambda: (
        error_code(lambda: old_on_b.list_objects_v2(Bucket=bucket)) is None and
        has_bucket(c, doomed) and aborted in uploads(c, bucket)
        and error_code(lambda: old_on_c.list_objects_v2(Bucket=bucket)) is None), DEADLINE)

    wait_for("c holds the reborn bucket's first incarnation", lambda: has_bucket(c, reborn)
             and error_code(lambda: c.s3.head_object(Bucket=reborn, Key="old")) is None,
             DEADLINE)
    c.daemon.stop()
    # An upload completed, a bucket deleted and made again (without its tags).
    a.s3.complete_multipart_upload(
        Bucket=bucket, Key="assembled", UploadId=completed,
        MultipartUpload={"Parts": [{"PartNumber": number + 1, "ETag": etag}
                                   for number, etag in enumerate(parts)]})
    a.s3.delete_object(Bucket=reborn, Key="old")
    a.s3.delete_bucket(Bucket=reborn)
    b.s3.create_bucket(Bucket=reborn)
    b.s3.put_object(Bucket=reborn, Key="new", Body=b"of the second incarnation")
    # IAM, through a and b.
    user = a.admin.ok("POST", "/users", {"username": unique("newcomer")}, 201)
    grant = b.admin.ok("POST", "/grants", {"name": unique("read"), "document": {
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}}, 201)
    wait_for("b's grant on a", lambda: a.admin.get(f"/grants/{grant['grant_id']}").status
             == 200, DEADLINE)
    a.admin.ok("PUT", f"/users/{user['user_id']}/grants/{grant['grant_id']}", None, 204)
    key = a.admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    team = b.admin.ok("POST", "/teams", {"name": unique("crew")}, 201)
    wait_for("the user on b", lambda: b.admin.get(f"/users/{user['user_id']}").status == 200,
             DEADLINE)
    b.admin.ok("PUT", f"/teams/{team['team_id']}/members/{user['user_id']}", None, 204)
    b.admin.ok("PUT", f"/teams/{team['team_id']}/grants/{grant['grant_id']}", None, 204)
    assert a.admin.delete(f"/users/{leaving['user_id']}").status == 204
    reply = b.admin.delete(f"/credentials/{old_key['access_key_id']}")
    assert reply.status == 204, (reply.status, reply.body)
    # Bucket configuration.
    a.s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    b.s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=LIFECYCLE)
    a.s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": BUCKET_TAGS})
    b.admin.ok("PUT", f"/buckets/{bucket}/quota", {"max_objects": 1000})  # no bucket policy
    a.admin.ok("PUT", f"/buckets/{bucket}/compression", {"algorithm": "zstd", "level": 6})
    a.s3.delete_bucket(Bucket=doomed)
    # A setting, object tags, multipart uploads.
    b.admin.ok("PUT", "/settings/lifecycle_evaluation_interval", {"value": 77})
    a.s3.put_object_tagging(Bucket=bucket, Key="tagged", Tagging={"TagSet": OBJECT_TAGS})
    opened = b.s3.create_multipart_upload(Bucket=bucket, Key="opened")["UploadId"]
    a.s3.abort_multipart_upload(Bucket=bucket, Key="aborted", UploadId=aborted)

    c.daemon.start()  # waits for /admin/health 200: c has synced with both peers

    lacking: list[str] = []

    def lacks(what: str) -> bool:
        lacking[:] = [what]
        return False

    def has_everything() -> bool:
        # IAM
        if c.admin.get(f"/users/{user['user_id']}").status != 200:
            return lacks("the new user")
        if c.admin.get(f"/users/{leaving['user_id']}").status != 404:
            return lacks("the deleted user gone")
        own = {k["access_key_id"] for k in
               c.admin.ok("GET", f"/users/{user['user_id']}/credentials")}
        if key["access_key_id"] not in own:
            return lacks("the new key")
        if {g["grant_id"] for g in c.admin.ok("GET", f"/users/{user['user_id']}/grants")} \
                != {grant["grant_id"]}:
            return lacks("the user's grant")
        if c.admin.get(f"/teams/{team['team_id']}").status != 200:
            return lacks("the team")
        members = {m["user_id"] for m in c.admin.ok("GET", f"/teams/{team['team_id']}/members")}
        team_grants = {g["grant_id"] for g in
                       c.admin.ok("GET", f"/teams/{team['team_id']}/grants")}
        if members != {user["user_id"]} or team_grants != {grant["grant_id"]}:
            return lacks("the team's members and grants")
        # Buckets and their configuration
        if has_bucket(c, doomed):
            return lacks("the deleted bucket gone")
        if c.s3.get_bucket_versioning(Bucket=bucket).get("Status") != "Enabled":
            return lacks("versioning")
        if error_code(lambda: c.s3.get_bucket_lifecycle_configuration(Bucket=bucket)):
            return lacks("lifecycle")
        if error_code(lambda: c.s3.get_bucket_tagging(Bucket=bucket)) or \
                c.s3.get_bucket_tagging(Bucket=bucket)["TagSet"] != BUCKET_TAGS:
            return lacks("bucket tags")
        if c.admin.ok("GET", f"/buckets/{bucket}/quota")["max_objects"] != 1000:
            return lacks("the quota")
        if c.admin.ok("GET", f"/buckets/{bucket}/compression")["level"] != 6:
            return lacks("the compression setting")
        # Setting, object tags, uploads
        setting = c.admin.get("/settings/lifecycle_evaluation_interval")
        if setting.status != 200 or setting.json.get("value") != 77:
            return lacks("the setting")
        if uploads(c, bucket) != {opened}:
            return lacks("the uploads")
        # The completed upload's object, the reborn bucket's second incarnation.
        if error_code(lambda: c.s3.head_object(Bucket=bucket, Key="assembled")):
            return lacks("the completed upload's object")
        if error_code(lambda: c.s3.head_object(Bucket=reborn, Key="new")):
            return lacks("the re-created bucket's object")
        return True

    try:
        wait_for("c holds every change made while it was down", has_everything, DEADLINE)
    except AssertionError:
        raise AssertionError(f"c still lacks {lacking}") from None
    assert c.s3.get_object(Bucket=bucket, Key="assembled")["Body"].read() \
        == PART_ONE + PART_TWO
    for node in (a, b, c):
        assert error_code(lambda node=node: node.s3.head_object(Bucket=reborn, Key="old")) \
            in ("404", "NoSuchKey")
        assert error_code(lambda node=node: node.s3.get_bucket_tagging(Bucket=reborn)) \
            == "NoSuchTagSet"
    rules = c.s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [rule["ID"] for rule in rules] == ["expire-logs"]
    # The new key signs on c with the grant it was given; the deleted one is refused.
    on_c = s3_as(c, key["access_key_id"], key["secret_access_key"])
    assert on_c.get_object(Bucket=bucket, Key="tagged")["Body"].read() == b"tag me later"
    assert error_code(lambda: old_on_c.list_objects_v2(Bucket=bucket)) == "InvalidAccessKeyId"
    # c's own snapshot, pulled by a and b, brings nothing deleted back.
    c.admin.ok("PUT", "/settings/lifecycle_evaluation_interval", {"value": 78})
    for node in (a, b):
        wait_for("c's later setting on a and b", lambda node=node: node.admin.get(
            "/settings/lifecycle_evaluation_interval").json.get("value") == 78, DEADLINE)
    for node in (a, b, c):
        assert not has_bucket(node, doomed)
        assert node.admin.get(f"/users/{leaving['user_id']}").status == 404
        assert uploads(node, bucket) == {opened}
        refused = s3_as(node, old_key["access_key_id"], old_key["secret_access_key"])
        assert error_code(lambda r=refused: r.list_objects_v2(Bucket=bucket)) \
            == "InvalidAccessKeyId"
    # Object tags: a tag change stamps tags_updated_at, newer than c's untagged copy.
    wait_for("the object tags on c", lambda: c.s3.get_object_tagging(
        Bucket=bucket, Key="tagged")["TagSet"] == OBJECT_TAGS, 15.0)
