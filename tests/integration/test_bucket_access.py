"""Access from outside the account, end to end (issue 29): bucket policies (boto3, awscli,
minio-py's read-only and read-write policies), anonymous requests (curl, urllib3, boto3
UNSIGNED), public access block, ownership controls, bucket ACLs and
x-amz-expected-bucket-owner, against the shared daemon (unique bucket names)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import urllib3
from botocore import UNSIGNED
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon
from tests.integration.test_aws_cli import aws
from tests.integration.test_object_lock import denied, lock_bucket, retained
from tests.integration.test_object_operations import allow, user_with

HTTP = urllib3.PoolManager(retries=False)


def new_bucket(s3: Any, prefix: str = "pub") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def bucket(s3: Any) -> Iterator[str]:
    yield new_bucket(s3)


def anonymous(daemon: Daemon) -> Any:
    return boto3.client("s3", endpoint_url=daemon.endpoint, region_name="us-east-1",
                        config=BotoConfig(signature_version=UNSIGNED,
                                          retries={"max_attempts": 1}))


def code(error: ClientError) -> str:
    return str(error.response["Error"]["Code"])


def public_read(bucket: str, prefix: str = "") -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": ["*"]},
         "Action": ["s3:GetBucketLocation", "s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{bucket}"]},
        {"Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
         "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*"]}]})


def test_anonymous_is_denied_until_a_policy_allows(daemon: Daemon, s3: Any,
                                                   bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="pub/a.txt", Body=b"hello")
    s3.put_object(Bucket=bucket, Key="private/b.txt", Body=b"secret")
    url = f"{daemon.endpoint}/{bucket}/pub/a.txt"
    assert HTTP.request("GET", url).status == 403
    with pytest.raises(ClientError) as refused:
        s3.get_bucket_policy(Bucket=bucket)
    assert code(refused.value) == "NoSuchBucketPolicy"

    s3.put_bucket_policy(Bucket=bucket, Policy=public_read(bucket, "pub/"))
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == \
        json.loads(public_read(bucket, "pub/"))
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is True
    # curl, as a browser or a download script would
    fetched = subprocess.run(["curl", "-sf", url], capture_output=True, timeout=30)
    assert fetched.returncode == 0 and fetched.stdout == b"hello"
    assert HTTP.request("HEAD", url).status == 200
    assert HTTP.request("GET", f"{url}-missing").status == 404  # may list: told it is missing
    assert HTTP.request("GET", f"{daemon.endpoint}/{bucket}/private/b.txt").status == 403
    assert HTTP.request("PUT", url, body=b"x").status == 403
    unsigned = anonymous(daemon)
    listed = unsigned.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed["Contents"]] == ["private/b.txt", "pub/a.txt"]
    assert unsigned.get_object(Bucket=bucket, Key="pub/a.txt")["Body"].read() == b"hello"

    s3.delete_bucket_policy(Bucket=bucket)
    assert HTTP.request("GET", url).status == 403


def test_malformed_policies_are_refused(s3: Any, bucket: str) -> None:
    bad = [
        "not json",
        json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": "arn:aws:s3:::other-bucket/*"}]}),
        json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject",
             "Resource": f"arn:aws:s3:::{bucket}/*"}]}),
        json.dumps({"Version": "2012-10-17", "Statement": [  # no such user
            {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:user/nobody-here"},
             "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/*"}]}),
        json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:Fly",
             "Resource": f"arn:aws:s3:::{bucket}/*"}]}),
        json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": f"arn:aws:s3:::{bucket}/*",
             "Condition": {"StringEqualz": {"aws:Referer": "x"}}}]}),
    ]
    for policy in bad:
        with pytest.raises(ClientError) as refused:
            s3.put_bucket_policy(Bucket=bucket, Policy=policy)
        assert code(refused.value) == "MalformedPolicy", policy


def test_conditions_deny_and_identity_union(daemon: Daemon, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    user = user_with(daemon, allow(["s3:GetObject"], [f"arn:aws:s3:::{bucket}/*"]))
    outsider = user_with(daemon, allow(["s3:ListAllMyBuckets"], ["*"]))
    assert user.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    with pytest.raises(ClientError):
        outsider.get_object(Bucket=bucket, Key="k")
    policy = {"Version": "2012-10-17", "Statement": [
        # the bucket policy allows the outsider by name (identity and bucket policy union)
        {"Sid": "Outsider", "Effect": "Allow",
         "Principal": {"AWS": [f"arn:aws:iam::000000000000:user/{outsider.username}"]},
         "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/*"},
        # an explicit Deny wins over the user's identity grant (not from this UA)
        {"Sid": "NoCurl", "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/*",
         "Condition": {"StringLike": {"aws:UserAgent": "curl/*"}}},
        {"Sid": "LocalOnly", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/*",
         "Condition": {"IpAddress": {"aws:SourceIp": "127.0.0.0/8"},
                       "Bool": {"aws:SecureTransport": "false"}}}]}
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    assert outsider.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    url = f"{daemon.endpoint}/{bucket}/k"
    assert HTTP.request("GET", url, headers={"User-Agent": "python"}).status == 200
    assert HTTP.request("GET", url, headers={"User-Agent": "curl/8"}).status == 403
    # a missing key is 403 to who may not list the bucket (no probing for names), as AWS
    assert HTTP.request("GET", f"{url}-missing", headers={"User-Agent": "py"}).status == 403
    with pytest.raises(ClientError) as missing:
        s3.get_object(Bucket=bucket, Key="k-missing")
    assert code(missing.value) == "NoSuchKey"
    # s3:prefix on listing
    listing = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket",
         "Resource": f"arn:aws:s3:::{bucket}",
         "Condition": {"StringLike": {"s3:prefix": "public/*"}}}]}
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(listing))
    assert HTTP.request("GET", f"{daemon.endpoint}/{bucket}?prefix=public/x").status == 200
    assert HTTP.request("GET", f"{daemon.endpoint}/{bucket}?prefix=other").status == 403
    assert HTTP.request("GET", f"{daemon.endpoint}/{bucket}").status == 403


def test_public_access_block(daemon: Daemon, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    with pytest.raises(ClientError) as missing:
        s3.get_public_access_block(Bucket=bucket)
    assert code(missing.value) == "NoSuchPublicAccessBlockConfiguration"
    s3.put_bucket_policy(Bucket=bucket, Policy=public_read(bucket))
    url = f"{daemon.endpoint}/{bucket}/k"
    assert HTTP.request("GET", url).status == 200
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True})
    got = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert got == {"BlockPublicAcls": True, "IgnorePublicAcls": True,
                   "BlockPublicPolicy": True, "RestrictPublicBuckets": True}
    assert HTTP.request("GET", url).status == 403  # RestrictPublicBuckets
    with pytest.raises(ClientError) as blocked:
        s3.put_bucket_policy(Bucket=bucket, Policy=public_read(bucket))
    assert code(blocked.value) == "AccessDenied"  # BlockPublicPolicy
    s3.delete_public_access_block(Bucket=bucket)
    assert HTTP.request("GET", url).status == 200


def test_ownership_controls_and_bucket_acls(daemon: Daemon, s3: Any) -> None:
    bucket = new_bucket(s3)
    owned = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]
    assert owned["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    with pytest.raises(ClientError) as refused:
        s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    assert code(refused.value) == "AccessControlListNotSupported"
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    with pytest.raises(ClientError) as refused:
        s3.create_bucket(Bucket=f"acl-{uuid.uuid4().hex[:12]}", ACL="public-read")
    assert code(refused.value) == "InvalidBucketAclWithObjectOwnership"

    writer = f"acl-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=writer, ObjectOwnership="ObjectWriter", ACL="public-read")
    grants = s3.get_bucket_acl(Bucket=writer)["Grants"]
    assert {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"} in \
        [g["Grantee"] for g in grants]
    assert HTTP.request("GET", f"{daemon.endpoint}/{writer}").status == 200  # READ: list
    with pytest.raises(ClientError) as refused:  # ACLs can not be disabled while they grant
        s3.put_bucket_ownership_controls(Bucket=writer, OwnershipControls={
            "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    assert code(refused.value) == "InvalidBucketAclWithObjectOwnership"
    s3.put_bucket_acl(Bucket=writer, ACL="private")
    assert HTTP.request("GET", f"{daemon.endpoint}/{writer}").status == 403
    s3.put_object(Bucket=writer, Key="k", Body=b"x", ACL="public-read")  # stored
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x", ACL="public-read")
    assert code(refused.value) == "AccessControlListNotSupported"
    s3.put_object(Bucket=writer, Key="k", Body=b"x", ACL="bucket-owner-full-control")
    s3.put_bucket_ownership_controls(Bucket=writer, OwnershipControls={
        "Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]})
    assert s3.get_bucket_ownership_controls(Bucket=writer)["OwnershipControls"]["Rules"] \
        == [{"ObjectOwnership": "BucketOwnerPreferred"}]
    s3.put_public_access_block(Bucket=writer, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": False,
        "RestrictPublicBuckets": False})
    with pytest.raises(ClientError) as blocked:
        s3.put_bucket_acl(Bucket=writer, ACL="public-read-write")
    assert code(blocked.value) == "AccessDenied"


def test_governance_bypass_follows_the_bucket_policy(daemon: Daemon, s3: Any) -> None:
    """s3:BypassGovernanceRetention is decided with the bucket policy, as on AWS: a Deny
    there refuses a user whose grants allow it, an Allow there lets one without."""
    bucket = lock_bucket(s3)
    arns = [f"arn:aws:s3:::{bucket}/*"]
    granted = user_with(daemon, allow(["s3:DeleteObjectVersion",
                                       "s3:BypassGovernanceRetention"], arns))
    plain = user_with(daemon, allow(["s3:DeleteObjectVersion"], arns))
    granted_id = f"arn:aws:iam::000000000000:user/{granted.username}"
    plain_id = f"arn:aws:iam::000000000000:user/{plain.username}"
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Deny", "Principal": {"AWS": [granted_id]},
             "Action": "s3:BypassGovernanceRetention", "Resource": arns},
            {"Effect": "Allow", "Principal": {"AWS": [plain_id]},
             "Action": "s3:BypassGovernanceRetention", "Resource": arns}]}))
    first = retained(s3, bucket, "a", "GOVERNANCE")
    second = retained(s3, bucket, "b", "GOVERNANCE")
    denied(granted.delete_object, Bucket=bucket, Key="a", VersionId=first,
           BypassGovernanceRetention=True)
    denied(plain.delete_object, Bucket=bucket, Key="b", VersionId=second)  # no header
    done = plain.delete_object(Bucket=bucket, Key="b", VersionId=second,
                               BypassGovernanceRetention=True)
    assert done["VersionId"] == second
    s3.delete_bucket_policy(Bucket=bucket)
    granted.delete_object(Bucket=bucket, Key="a", VersionId=first,
                          BypassGovernanceRetention=True)


def test_expected_bucket_owner(s3: Any, bucket: str) -> None:
    owner = s3.list_buckets()["Owner"]["ID"]
    s3.head_bucket(Bucket=bucket, ExpectedBucketOwner=owner)
    s3.put_object(Bucket=bucket, Key="k", Body=b"v", ExpectedBucketOwner=owner)
    with pytest.raises(ClientError) as refused:
        s3.get_object(Bucket=bucket, Key="k", ExpectedBucketOwner="111122223333")
    assert code(refused.value) == "AccessDenied"
    with pytest.raises(ClientError):
        s3.head_bucket(Bucket=bucket, ExpectedBucketOwner="111122223333")


def test_minio_py_policies(daemon: Daemon, s3: Any) -> None:
    minio = pytest.importorskip("minio")
    host = daemon.endpoint.split("://", 1)[1]
    client = minio.Minio(host, access_key=ROOT_ACCESS_KEY, secret_key=ROOT_SECRET_KEY,
                         secure=False, region="us-east-1")
    bucket = new_bucket(s3, "minio")
    s3.put_object(Bucket=bucket, Key="a", Body=b"A")
    read_only = public_read(bucket)
    client.set_bucket_policy(bucket, read_only)
    assert json.loads(client.get_bucket_policy(bucket)) == json.loads(read_only)
    assert HTTP.request("GET", f"{daemon.endpoint}/{bucket}/a").data == b"A"
    assert HTTP.request("PUT", f"{daemon.endpoint}/{bucket}/b", body=b"B").status == 403
    read_write = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": ["*"]},
         "Action": ["s3:GetBucketLocation", "s3:ListBucket",
                    "s3:ListBucketMultipartUploads"],
         "Resource": [f"arn:aws:s3:::{bucket}"]},
        {"Effect": "Allow", "Principal": {"AWS": ["*"]},
         "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                    "s3:ListMultipartUploadParts", "s3:AbortMultipartUpload"],
         "Resource": [f"arn:aws:s3:::{bucket}/*"]}]})
    client.set_bucket_policy(bucket, read_write)
    assert HTTP.request("PUT", f"{daemon.endpoint}/{bucket}/b", body=b"B").status == 200
    assert s3.get_object(Bucket=bucket, Key="b")["Body"].read() == b"B"
    assert HTTP.request("DELETE", f"{daemon.endpoint}/{bucket}/b").status == 204
    client.delete_bucket_policy(bucket)
    assert HTTP.request("GET", f"{daemon.endpoint}/{bucket}/a").status == 403


def test_awscli_policy_and_public_access_block(daemon: Daemon, s3: Any,
                                               aws_env: dict[str, str]) -> None:
    bucket = new_bucket(s3, "cli")

    def cli(*args: str) -> str:
        done = aws(aws_env, daemon.endpoint, "s3api", *args, "--bucket", bucket)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("put-bucket-policy", "--policy", public_read(bucket))
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is True
    cli("put-public-access-block", "--public-access-block-configuration",
        "RestrictPublicBuckets=true")
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"][
        "RestrictPublicBuckets"] is True
    assert "BucketOwnerEnforced" in cli("get-bucket-ownership-controls")


def test_cli_public_links(daemon: Daemon, s3: Any, tmp_path: Any) -> None:
    """`objstore anonymous set/list` writes the bucket policy statements and leaves the
    operator's own alone; the admin API tells which prefixes anyone may read."""
    from tests.integration.test_admin_cli import Cli

    cli = Cli(daemon, tmp_path / "home")
    bucket = new_bucket(s3, "links")
    for key in ("pub/a", "priv/b", "in/c"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    own = {"Sid": "OperatorsOwn", "Effect": "Deny", "Principal": "*",
           "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{bucket}/priv/*"}
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(
        {"Version": "2012-10-17", "Statement": [own]}))
    cli.run("anonymous", "set", "download", f"{bucket}/pub/")
    cli.run("anonymous", "set", "upload", f"{bucket}/in/")
    listed = cli.json("anonymous", "list", bucket)
    assert listed["rules"] == [{"prefix": "in/", "access": "upload"},
                               {"prefix": "pub/", "access": "download"}]
    assert listed["public_prefixes"] == ["pub/"]
    assert "pub/  download" in cli.run("anonymous", "list", bucket).stdout
    base = f"{daemon.endpoint}/{bucket}"
    assert HTTP.request("GET", f"{base}/pub/a").data == b"pub/a"
    assert HTTP.request("GET", f"{base}/priv/b").status == 403
    assert HTTP.request("GET", f"{base}?prefix=pub/").status == 200
    assert HTTP.request("GET", f"{base}?prefix=priv/").status == 403
    assert HTTP.request("PUT", f"{base}/in/new", body=b"n").status == 200
    assert HTTP.request("GET", f"{base}/in/new").status == 403
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    assert own in policy["Statement"]
    cli.run("anonymous", "set", "none", f"{bucket}/pub/")
    cli.run("anonymous", "set", "none", f"{bucket}/in/")
    assert HTTP.request("GET", f"{base}/pub/a").status == 403
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])["Statement"] == [own]
    cli.run("anonymous", "set", "public", bucket)
    assert cli.json("anonymous", "list", bucket)["rules"] == [
        {"prefix": "", "access": "public"}]
    assert HTTP.request("GET", f"{base}/priv/b").status == 200
    assert HTTP.request("DELETE", f"{base}/priv/b").status == 403  # the operator's Deny
    refused = cli.run("anonymous", "set", "sideways", bucket, status=2)
    assert "invalid choice" in refused.stderr
