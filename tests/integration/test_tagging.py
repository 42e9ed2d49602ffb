"""Object and bucket tagging end to end through boto3: Put/Get/DeleteObjectTagging (per
version), the x-amz-tagging-count they show on GET/HEAD, the tag rules (InvalidTag), the
version-specific actions, and Put/Get/DeleteBucketTagging as a separate set of 50."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.daemon import Daemon
from tests.integration.test_object_operations import (
    allow,
    code_of,
    new_bucket,
    signed,
    user_with,
    xml_code,
)


def tag_set(tags: dict[str, str]) -> dict[str, Any]:
    return {"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]}


def tags_of(response: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in response["TagSet"]}


def test_object_tagging_round_trip(s3: Any) -> None:
    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="a=1")
    assert tags_of(s3.get_object_tagging(Bucket=bucket, Key="k")) == {"a": "1"}
    wanted = {"project": "alpha", "empty": "", "spaces ok": "v + - = . _ : / @"}
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set(wanted))
    assert tags_of(s3.get_object_tagging(Bucket=bucket, Key="k")) == wanted
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "3"
    assert s3.get_object(Bucket=bucket, Key="k")["TagCount"] == 3
    deleted = s3.delete_object_tagging(Bucket=bucket, Key="k")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == []
    assert "x-amz-tagging-count" not in s3.head_object(
        Bucket=bucket, Key="k")["ResponseMetadata"]["HTTPHeaders"]
    with pytest.raises(ClientError) as caught:
        s3.get_object_tagging(Bucket=bucket, Key="absent")
    assert code_of(caught) == "NoSuchKey"
    with pytest.raises(ClientError) as caught:
        s3.put_object_tagging(Bucket=bucket, Key="absent", Tagging=tag_set({"a": "1"}))
    assert code_of(caught) == "NoSuchKey"


def test_tags_belong_to_versions(s3: Any) -> None:
    bucket = new_bucket(s3)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    old = s3.put_object(Bucket=bucket, Key="k", Body=b"1", Tagging="v=old")["VersionId"]
    new = s3.put_object(Bucket=bucket, Key="k", Body=b"2")["VersionId"]
    put = s3.put_object_tagging(Bucket=bucket, Key="k", VersionId=old,
                                Tagging=tag_set({"v": "older"}))
    assert put["VersionId"] == old
    assert tags_of(s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=old)) == {
        "v": "older"}
    latest = s3.get_object_tagging(Bucket=bucket, Key="k")
    assert latest["VersionId"] == new and latest["TagSet"] == []
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set({"v": "newest"}))
    assert tags_of(s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=new)) == {
        "v": "newest"}
    removed = s3.delete_object_tagging(Bucket=bucket, Key="k", VersionId=old)
    assert removed["VersionId"] == old
    assert s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=old)["TagSet"] == []
    before = s3.head_object(Bucket=bucket, Key="k", VersionId=old)["LastModified"]
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == new  # latest unchanged
    assert before == s3.head_object(Bucket=bucket, Key="k", VersionId=old)["LastModified"]
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    with pytest.raises(ClientError) as caught:
        s3.get_object_tagging(Bucket=bucket, Key="k")
    assert code_of(caught) == "NoSuchKey"
    with pytest.raises(ClientError) as caught:
        s3.put_object_tagging(Bucket=bucket, Key="k", VersionId=marker,
                              Tagging=tag_set({"a": "1"}))
    assert code_of(caught) == "MethodNotAllowed"
    with pytest.raises(ClientError) as caught:
        s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=str(uuid.uuid4()))
    assert code_of(caught) == "NoSuchVersion"


@pytest.mark.parametrize("tags", [
    {f"k{i}": "v" for i in range(11)},
    {"k" * 129: "v"},
    {"k": "v" * 257},
    {"aws:reserved": "v"},
    {"bad*char": "v"},
])
def test_invalid_object_tags(s3: Any, tags: dict[str, str]) -> None:
    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="keep=1")
    with pytest.raises(ClientError) as caught:
        s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set(tags))
    assert code_of(caught) == "InvalidTag"
    assert tags_of(s3.get_object_tagging(Bucket=bucket, Key="k")) == {"keep": "1"}


def test_tagging_documents_are_validated(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    duplicate = (b"<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag>"
                 b"<Tag><Key>a</Key><Value>2</Value></Tag></TagSet></Tagging>")
    empty_key = b"<Tagging><TagSet><Tag><Key></Key><Value>1</Value></Tag></TagSet></Tagging>"
    for path in (f"/{bucket}/k?tagging", f"/{bucket}?tagging"):
        for body in (duplicate, empty_key):
            response = signed(daemon, "PUT", path, body=body)
            assert (response.status, xml_code(response)) == (400, "InvalidTag")
    for body in (b"<Tagging></Tagging>", b"<Tagging><TagSet><Tag><Key>a</Key></Tag>"
                 b"</TagSet></Tagging>", b"<Tags/>", b"not xml", b""):
        response = signed(daemon, "PUT", f"/{bucket}/k?tagging", body=body)
        assert (response.status, xml_code(response)) == (400, "MalformedXML"), body


def test_tagging_actions(daemon: Daemon, s3: Any) -> None:
    bucket = new_bucket(s3)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    version = s3.put_object(Bucket=bucket, Key="k", Body=b"x")["VersionId"]
    arns = [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    tagger = user_with(daemon, allow(["s3:PutObject", "s3:GetObjectTagging",
                                      "s3:PutObjectTagging"], arns))
    tagger.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set({"a": "1"}))
    assert tags_of(tagger.get_object_tagging(Bucket=bucket, Key="k")) == {"a": "1"}
    for call, params in [
        (tagger.get_object_tagging, {"VersionId": version}),
        (tagger.put_object_tagging, {"VersionId": version, "Tagging": tag_set({})}),
        (tagger.delete_object_tagging, {}),
        (tagger.get_bucket_tagging, {"Key": None}),
    ]:
        params = {k: v for k, v in params.items() if v is not None}
        if call == tagger.get_bucket_tagging:
            with pytest.raises(ClientError) as caught:
                call(Bucket=bucket)
        else:
            with pytest.raises(ClientError) as caught:
                call(Bucket=bucket, Key="k", **params)
        assert code_of(caught) == "AccessDenied"
    # Tags coming with the PUT need s3:PutObjectTagging, which the spec's s3:PutObject
    # covers there (S3-ACTIONS.md); a Deny of the granular action still refuses.
    writer = user_with(daemon, allow(["s3:PutObject"], arns))
    writer.put_object(Bucket=bucket, Key="w", Body=b"x", Tagging="a=1")
    no_tags = user_with(daemon, allow(["s3:PutObject"], arns),
                        {"Effect": "Deny", "Action": ["s3:PutObjectTagging"], "Resource": ["*"]})
    no_tags.put_object(Bucket=bucket, Key="w2", Body=b"x")
    with pytest.raises(ClientError) as caught:
        no_tags.put_object(Bucket=bucket, Key="w3", Body=b"x", Tagging="a=1")
    assert code_of(caught) == "AccessDenied"
    versioned = user_with(daemon, allow(["s3:GetObjectVersionTagging",
                                         "s3:PutObjectVersionTagging",
                                         "s3:DeleteObjectVersionTagging"], arns))
    versioned.put_object_tagging(Bucket=bucket, Key="k", VersionId=version,
                                 Tagging=tag_set({"b": "2"}))
    assert tags_of(versioned.get_object_tagging(Bucket=bucket, Key="k",
                                                VersionId=version)) == {"b": "2"}
    versioned.delete_object_tagging(Bucket=bucket, Key="k", VersionId=version)


def test_bucket_tagging(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    with pytest.raises(ClientError) as caught:
        s3.get_bucket_tagging(Bucket=bucket)
    assert code_of(caught) == "NoSuchTagSet"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    fifty = {f"key-{i}": f"value {i}" for i in range(50)}
    put = s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set(fifty))
    assert put["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert tags_of(s3.get_bucket_tagging(Bucket=bucket)) == fifty
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == []  # separate sets
    with pytest.raises(ClientError) as caught:
        s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set({**fifty, "one": "more"}))
    assert code_of(caught) == "InvalidTag"
    s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set({"team": "storage"}))
    assert tags_of(s3.get_bucket_tagging(Bucket=bucket)) == {"team": "storage"}
    deleted = s3.delete_bucket_tagging(Bucket=bucket)
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as caught:
        s3.get_bucket_tagging(Bucket=bucket)
    assert code_of(caught) == "NoSuchTagSet"
    s3.delete_bucket_tagging(Bucket=bucket)  # idempotent
    missing = signed(daemon, "GET", "/no-such-bucket-tags?tagging")
    assert (missing.status, xml_code(missing)) == (404, "NoSuchBucket")
    arns = [f"arn:aws:s3:::{bucket}"]
    tagger = user_with(daemon, allow(["s3:PutBucketTagging"], arns))
    tagger.put_bucket_tagging(Bucket=bucket, Tagging=tag_set({"a": "1"}))
    tagger.delete_bucket_tagging(Bucket=bucket)  # DeleteBucketTagging uses the Put action
    with pytest.raises(ClientError) as caught:
        tagger.get_bucket_tagging(Bucket=bucket)
    assert code_of(caught) == "AccessDenied"
