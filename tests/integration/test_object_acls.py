"""Object ACLs end to end (issue 29): stored per version, set by PutObjectAcl (canned,
grant headers, AccessControlPolicy XML, versionId) and by the ACL headers of PutObject,
CopyObject, CreateMultipartUpload and form uploads; evaluated for anonymous and other
users as AWS does; refused under BucketOwnerEnforced, blocked and ignored by the public
access block. boto3, awscli and plain HTTP against the shared daemon."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import requests
import urllib3
from botocore.exceptions import ClientError

from tests.integration.daemon import Daemon
from tests.integration.test_aws_cli import aws
from tests.integration.test_bucket_access import code
from tests.integration.test_object_operations import allow, user_with

HTTP = urllib3.PoolManager(retries=False)
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


def acl_bucket(s3: Any, ownership: str = "ObjectWriter", *, versioned: bool = False) -> str:
    name = f"oacl-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ObjectOwnership=ownership)
    s3.delete_public_access_block(Bucket=name)  # the node's default may block public ACLs
    if versioned:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def status(daemon: Daemon, bucket: str, key: str, query: str = "") -> int:
    return HTTP.request("GET", f"{daemon.endpoint}/{bucket}/{key}{query}").status


def grantees(s3: Any, bucket: str, key: str, **extra: Any) -> set[tuple[str, str]]:
    grants = s3.get_object_acl(Bucket=bucket, Key=key, **extra)["Grants"]
    return {(g["Grantee"].get("URI") or g["Grantee"].get("ID"), g["Permission"])
            for g in grants}


def test_public_read_object_beside_a_private_one(daemon: Daemon, s3: Any) -> None:
    bucket = acl_bucket(s3)
    s3.put_object(Bucket=bucket, Key="public", Body=b"open", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="private", Body=b"closed")
    assert status(daemon, bucket, "public") == 200
    assert HTTP.request("GET", f"{daemon.endpoint}/{bucket}/public").data == b"open"
    assert status(daemon, bucket, "private") == 403
    assert HTTP.request("PUT", f"{daemon.endpoint}/{bucket}/public", body=b"x").status == 403
    assert (ALL_USERS, "READ") in grantees(s3, bucket, "public")
    assert grantees(s3, bucket, "private") == {
        (s3.list_buckets()["Owner"]["ID"], "FULL_CONTROL")}
    # PutObjectAcl turns each around
    s3.put_object_acl(Bucket=bucket, Key="public", ACL="private")
    s3.put_object_acl(Bucket=bucket, Key="private",
                      GrantRead=f'uri="{ALL_USERS}"')
    assert status(daemon, bucket, "public") == 403
    assert status(daemon, bucket, "private") == 200
    # an overwrite without ACL headers is private again, as on AWS
    s3.put_object(Bucket=bucket, Key="private", Body=b"new")
    assert status(daemon, bucket, "private") == 403


def test_acl_of_one_version_by_xml(daemon: Daemon, s3: Any) -> None:
    bucket = acl_bucket(s3, "BucketOwnerPreferred", versioned=True)
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["VersionId"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"v2")
    owner = s3.list_buckets()["Owner"]
    policy = {"Owner": {"ID": owner["ID"]}, "Grants": [
        {"Grantee": {"Type": "CanonicalUser", "ID": owner["ID"]},
         "Permission": "FULL_CONTROL"},
        {"Grantee": {"Type": "Group", "URI": ALL_USERS}, "Permission": "READ"}]}
    s3.put_object_acl(Bucket=bucket, Key="k", VersionId=first, AccessControlPolicy=policy)
    assert (ALL_USERS, "READ") in grantees(s3, bucket, "k", VersionId=first)
    assert (ALL_USERS, "READ") not in grantees(s3, bucket, "k")
    assert status(daemon, bucket, "k", f"?versionId={first}") == 200
    assert status(daemon, bucket, "k") == 403
    with pytest.raises(ClientError) as refused:
        s3.put_object_acl(Bucket=bucket, Key="k", AccessControlPolicy={
            "Owner": {"ID": owner["ID"]}, "Grants": [
                {"Grantee": {"Type": "Group", "URI": "http://example.com/nobody"},
                 "Permission": "READ"}]})
    assert code(refused.value) == "MalformedACLError"


def test_authenticated_read_and_user_grants(daemon: Daemon, s3: Any) -> None:
    bucket = acl_bucket(s3)
    other = user_with(daemon, allow(["s3:ListAllMyBuckets"], ["*"]))
    s3.put_object(Bucket=bucket, Key="members", Body=b"m", ACL="authenticated-read")
    s3.put_object(Bucket=bucket, Key="mine", Body=b"x")
    assert other.get_object(Bucket=bucket, Key="members")["Body"].read() == b"m"
    assert status(daemon, bucket, "members") == 403
    with pytest.raises(ClientError) as refused:
        other.get_object(Bucket=bucket, Key="mine")
    assert code(refused.value) == "AccessDenied"
    # a grant to the user by canonical id, and READ_ACP lets them read the ACL only
    other_id = other.list_buckets()["Owner"]["ID"]
    s3.put_object_acl(Bucket=bucket, Key="mine", GrantReadACP=f'id="{other_id}"')
    assert other.get_object_acl(Bucket=bucket, Key="mine")["Grants"]
    with pytest.raises(ClientError) as refused:
        other.get_object(Bucket=bucket, Key="mine")
    assert code(refused.value) == "AccessDenied"
    with pytest.raises(ClientError) as refused:  # no such user
        s3.put_object_acl(Bucket=bucket, Key="mine", GrantRead='id="u-nobody-at-all"')
    assert code(refused.value) == "InvalidArgument"


def test_copy_takes_the_requests_acl_never_the_sources(daemon: Daemon, s3: Any) -> None:
    bucket = acl_bucket(s3)
    s3.put_object(Bucket=bucket, Key="src", Body=b"s", ACL="public-read")
    source = {"Bucket": bucket, "Key": "src"}
    s3.copy_object(Bucket=bucket, Key="plain-copy", CopySource=source)
    s3.copy_object(Bucket=bucket, Key="public-copy", CopySource=source, ACL="public-read")
    assert status(daemon, bucket, "plain-copy") == 403
    assert status(daemon, bucket, "public-copy") == 200


def test_multipart_upload_acl_applies_on_completion(daemon: Daemon, s3: Any) -> None:
    bucket = acl_bucket(s3)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ACL="public-read")
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload["UploadId"],
                          PartNumber=1, Body=b"p" * 10)
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": [
                                     {"PartNumber": 1, "ETag": part["ETag"]}]})
    assert status(daemon, bucket, "mp") == 200


def test_form_upload_acl_field(daemon: Daemon, s3: Any) -> None:
    bucket = acl_bucket(s3)
    presigned = s3.generate_presigned_post(bucket, "form", Fields={"acl": "public-read"},
                                           Conditions=[{"acl": "public-read"}],
                                           ExpiresIn=300)
    answer = requests.post(presigned["url"], data=presigned["fields"],
                           files={"file": ("a.txt", b"form")}, timeout=30)
    assert answer.status_code == 204, answer.text
    assert status(daemon, bucket, "form") == 200
    # the acl field needs s3:PutObjectAcl, as the x-amz-acl header does
    arns = [f"arn:aws:s3:::{bucket}/*"]
    for actions, expected in ((["s3:PutObject"], 403),
                              (["s3:PutObject", "s3:PutObjectAcl"], 204)):
        signer = user_with(daemon, allow(actions, arns))
        presigned = signer.generate_presigned_post(
            bucket, "by-user", Fields={"acl": "public-read"},
            Conditions=[{"acl": "public-read"}], ExpiresIn=300)
        answer = requests.post(presigned["url"], data=presigned["fields"],
                               files={"file": ("a.txt", b"user")}, timeout=30)
        assert answer.status_code == expected, answer.text


def test_public_access_block_and_enforced_ownership(daemon: Daemon, s3: Any) -> None:
    bucket = acl_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ACL="public-read")
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": False, "IgnorePublicAcls": True, "BlockPublicPolicy": False,
        "RestrictPublicBuckets": False})
    assert status(daemon, bucket, "k") == 403  # the public grant counts for nothing
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": False,
        "RestrictPublicBuckets": False})
    assert status(daemon, bucket, "k") == 200  # stored grants still count
    for attempt in (lambda: s3.put_object(Bucket=bucket, Key="n", Body=b"x",
                                          ACL="public-read"),
                    lambda: s3.put_object_acl(Bucket=bucket, Key="k",
                                              ACL="public-read-write")):
        with pytest.raises(ClientError) as blocked:
            attempt()
        assert code(blocked.value) == "AccessDenied"
    s3.put_object_acl(Bucket=bucket, Key="k", ACL="private")  # not public: allowed

    enforced = acl_bucket(s3, "BucketOwnerEnforced")
    s3.put_object(Bucket=enforced, Key="k", Body=b"x", ACL="bucket-owner-full-control")
    for attempt in (lambda: s3.put_object(Bucket=enforced, Key="k", Body=b"x",
                                          ACL="public-read"),
                    lambda: s3.put_object_acl(Bucket=enforced, Key="k", ACL="public-read")):
        with pytest.raises(ClientError) as refused:
            attempt()
        assert code(refused.value) == "AccessControlListNotSupported"
    assert status(daemon, enforced, "k") == 403


def test_awscli_object_acls(daemon: Daemon, s3: Any, aws_env: dict[str, str],
                            tmp_path: Any) -> None:
    bucket = acl_bucket(s3)
    source = tmp_path / "f.txt"
    source.write_bytes(b"cli")
    copied = aws(aws_env, daemon.endpoint, "s3", "cp", "--acl", "public-read", str(source),
                 f"s3://{bucket}/cli.txt")
    assert copied.returncode == 0, copied.stderr
    assert status(daemon, bucket, "cli.txt") == 200
    changed = aws(aws_env, daemon.endpoint, "s3api", "put-object-acl", "--bucket", bucket,
                  "--key", "cli.txt", "--acl", "private")
    assert changed.returncode == 0, changed.stderr
    assert status(daemon, bucket, "cli.txt") == 403
    shown = aws(aws_env, daemon.endpoint, "s3api", "get-object-acl", "--bucket", bucket,
                "--key", "cli.txt")
    assert shown.returncode == 0 and "FULL_CONTROL" in shown.stdout
