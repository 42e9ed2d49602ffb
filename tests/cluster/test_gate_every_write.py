"""The write gate and the capacity guard cover every write (issue 26, item 2), with real
daemons and boto3: three quorum nodes (one worker each, SQLite) sharing one cluster for
the module. Node a keeps a reserve larger than any disk (`capacity_reserve_bytes`), b and
c keep none, so through a every write that brings bytes trips the capacity guard (rule
12) and through b the same write is stored.

1. Multipart uploads count their bytes: through a, CreateMultipartUpload and
   AbortMultipartUpload (no bytes) are served, UploadPart, UploadPartCopy and the
   CompleteMultipartUpload of parts uploaded through b answer 507 InsufficientStorage;
   through b the same completion succeeds.
2. With b and c stopped, a's gate is closed: a representative mutation of every family
   (objects, copies, deletes, tagging, retention, legal hold, multipart, buckets, bucket
   configuration, ACLs) answers 503 ServiceUnavailable + Retry-After: 5 and changes
   nothing; reads are served; an admin IAM change and a setting still succeed, and reach b
   when it returns (the control plane reconciles them as ever)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cluster.clients import body_of, has_bucket
from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b", "c")
BUCKET = "gated"
PEBIBYTE = 1024**5
DEADLINE = 30.0
TAGS = [{"Key": "colour", "Value": "green"}]


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {"a": {"capacity_reserve_bytes": str(PEBIBYTE)},
                 "b": {"capacity_reserve_bytes": "0"}, "c": {"capacity_reserve_bytes": "0"}}
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        wait_until_trusted(started, DEADLINE)
        b = started["b"].s3
        b.create_bucket(Bucket=BUCKET)  # best-effort fan-out; anti-entropy brings a miss
        for name in ("a", "c"):
            wait_for(f"the bucket on {name}",
                     lambda name=name: has_bucket(started[name], BUCKET), DEADLINE)
        yield started


def answer(call: Callable[[], object]) -> tuple[int, str, str | None]:
    """(HTTP status, error code, Retry-After) of an S3 call: (200, "", None) on success."""
    try:
        call()
    except ClientError as error:
        meta = error.response["ResponseMetadata"]
        return (meta["HTTPStatusCode"], error.response["Error"]["Code"],
                meta["HTTPHeaders"].get("retry-after"))
    return 200, "", None


def parts_of(etags: list[str]) -> dict[str, Any]:
    return {"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, 1)]}


def test_parts_and_completions_count_against_the_smallest_nodes_reserve(
        nodes: dict[str, Node]) -> None:
    a, b = nodes["a"].s3, nodes["b"].s3
    b.put_object(Bucket=BUCKET, Key="source", Body=b"s" * 4096)
    wait_for("the source on a", lambda: body_of(nodes["a"], BUCKET, "source") is not None,
             DEADLINE)
    # Through a: no bytes, no refusal; bytes, 507.
    upload = a.create_multipart_upload(Bucket=BUCKET, Key="big")["UploadId"]
    assert answer(lambda: a.upload_part(Bucket=BUCKET, Key="big", UploadId=upload,
                                        PartNumber=1, Body=b"p" * 4096)
                  ) == (507, "InsufficientStorage", None)
    assert answer(lambda: a.upload_part_copy(
        Bucket=BUCKET, Key="big", UploadId=upload, PartNumber=2,
        CopySource={"Bucket": BUCKET, "Key": "source"})) == (507, "InsufficientStorage", None)
    assert a.list_parts(Bucket=BUCKET, Key="big", UploadId=upload).get("Parts", []) == []
    a.abort_multipart_upload(Bucket=BUCKET, Key="big", UploadId=upload)
    # Parts stored through b, completed through a: the object is a's write, 507.
    upload = b.create_multipart_upload(Bucket=BUCKET, Key="assembled")["UploadId"]
    etag = b.upload_part(Bucket=BUCKET, Key="assembled", UploadId=upload, PartNumber=1,
                         Body=b"q" * 4096)["ETag"]
    assert answer(lambda: a.complete_multipart_upload(
        Bucket=BUCKET, Key="assembled", UploadId=upload,
        MultipartUpload=parts_of([etag]))) == (507, "InsufficientStorage", None)
    assert answer(lambda: a.head_object(Bucket=BUCKET, Key="assembled"))[0] == 404
    # Through b, whose reserve is 0, the same completion is stored and replicated.
    b.complete_multipart_upload(Bucket=BUCKET, Key="assembled", UploadId=upload,
                                MultipartUpload=parts_of([etag]))
    wait_for("the assembled object on a",
             lambda: body_of(nodes["a"], BUCKET, "assembled") == b"q" * 4096, DEADLINE)


def test_a_closed_gate_refuses_every_family_and_serves_reads_and_admin(
        nodes: dict[str, Node]) -> None:
    a_node, b_node = nodes["a"], nodes["b"]
    a, b = a_node.s3, b_node.s3
    b.put_object(Bucket=BUCKET, Key="kept", Body=b"written with a quorum")
    b.put_object_tagging(Bucket=BUCKET, Key="kept", Tagging={"TagSet": TAGS})
    pending = b.create_multipart_upload(Bucket=BUCKET, Key="pending")["UploadId"]
    wait_for("the object and its tags on a", lambda: answer(
        lambda: a.get_object_tagging(Bucket=BUCKET, Key="kept"))[0] == 200
        and a.get_object_tagging(Bucket=BUCKET, Key="kept")["TagSet"] == TAGS, DEADLINE)
    nodes["b"].daemon.stop()
    nodes["c"].daemon.stop()
    wait_for("a's gate closed", lambda: a_node.admin.get("/cluster").json["gate"] == "closed",
             DEADLINE)
    copy_source = {"Bucket": BUCKET, "Key": "kept"}
    new_bucket = f"new-{uuid.uuid4().hex[:8]}"
    mutations: dict[str, Callable[[], object]] = {
        "PutObject": lambda: a.put_object(Bucket=BUCKET, Key="refused", Body=b"x"),
        "CopyObject": lambda: a.copy_object(Bucket=BUCKET, Key="copy", CopySource=copy_source),
        "DeleteObject": lambda: a.delete_object(Bucket=BUCKET, Key="kept"),
        "DeleteObjects": lambda: a.delete_objects(
            Bucket=BUCKET, Delete={"Objects": [{"Key": "kept"}]}),
        "PutObjectTagging": lambda: a.put_object_tagging(
            Bucket=BUCKET, Key="kept", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}),
        "DeleteObjectTagging": lambda: a.delete_object_tagging(Bucket=BUCKET, Key="kept"),
        "PutBucketTagging": lambda: a.put_bucket_tagging(Bucket=BUCKET,
                                                         Tagging={"TagSet": TAGS}),
        "DeleteBucketTagging": lambda: a.delete_bucket_tagging(Bucket=BUCKET),
        "PutObjectRetention": lambda: a.put_object_retention(
            Bucket=BUCKET, Key="kept",
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": "2099-01-01T00:00:00Z"}),
        "PutObjectLegalHold": lambda: a.put_object_legal_hold(
            Bucket=BUCKET, Key="kept", LegalHold={"Status": "ON"}),
        "CreateMultipartUpload": lambda: a.create_multipart_upload(Bucket=BUCKET, Key="mpu"),
        "UploadPart": lambda: a.upload_part(Bucket=BUCKET, Key="pending", UploadId=pending,
                                            PartNumber=1, Body=b"part"),
        "UploadPartCopy": lambda: a.upload_part_copy(
            Bucket=BUCKET, Key="pending", UploadId=pending, PartNumber=2,
            CopySource=copy_source),
        "CompleteMultipartUpload": lambda: a.complete_multipart_upload(
            Bucket=BUCKET, Key="pending", UploadId=pending,
            MultipartUpload=parts_of(['"0123456789abcdef0123456789abcdef"'])),
        "AbortMultipartUpload": lambda: a.abort_multipart_upload(
            Bucket=BUCKET, Key="pending", UploadId=pending),
        "CreateBucket": lambda: a.create_bucket(Bucket=new_bucket),
        "DeleteBucket": lambda: a.delete_bucket(Bucket=BUCKET),
        "PutBucketVersioning": lambda: a.put_bucket_versioning(
            Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"}),
        "PutBucketLifecycleConfiguration": lambda: a.put_bucket_lifecycle_configuration(
            Bucket=BUCKET, LifecycleConfiguration={"Rules": [{
                "ID": "r", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
                "Expiration": {"Days": 7}}]}),
        "DeleteBucketLifecycle": lambda: a.delete_bucket_lifecycle(Bucket=BUCKET),
        "PutObjectLockConfiguration": lambda: a.put_object_lock_configuration(
            Bucket=BUCKET, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"}),
        "PutBucketAcl": lambda: a.put_bucket_acl(Bucket=BUCKET, ACL="private"),
        "PutObjectAcl": lambda: a.put_object_acl(Bucket=BUCKET, Key="kept", ACL="private"),
    }
    answers = {name: answer(call) for name, call in mutations.items()}
    assert answers == {name: (503, "ServiceUnavailable", "5") for name in mutations}
    # Nothing changed, and reads are served.
    assert a.get_object(Bucket=BUCKET, Key="kept")["Body"].read() == b"written with a quorum"
    assert a.get_object_tagging(Bucket=BUCKET, Key="kept")["TagSet"] == TAGS
    assert [o["Key"] for o in a.list_objects_v2(Bucket=BUCKET)["Contents"]] == [
        "assembled", "kept", "source"]
    assert a.get_bucket_versioning(Bucket=BUCKET).get("Status") is None
    assert answer(lambda: a.get_bucket_lifecycle_configuration(Bucket=BUCKET))[0] == 404
    assert answer(lambda: a.head_bucket(Bucket=new_bucket))[0] == 404
    assert BUCKET in {bucket["Name"] for bucket in a.list_buckets()["Buckets"]}
    # The operator can still act: IAM and settings are not gated.
    user = a_node.admin.ok("POST", "/users", {"username": f"oncall-{uuid.uuid4().hex[:6]}"},
                           201)
    a_node.admin.ok("PUT", "/settings/lifecycle_evaluation_interval", {"value": 77})
    # b returns: the gate opens again and b holds the change made during the outage.
    b_node.daemon.start()
    wait_for("a's gate open", lambda: a_node.admin.get("/cluster").json["gate"] == "open",
             DEADLINE)
    wait_for("the user made during the outage on b",
             lambda: b_node.admin.get(f"/users/{user['user_id']}").status == 200, DEADLINE)
    assert answer(lambda: b_node.s3.put_object(Bucket=BUCKET, Key="after", Body=b"y"))[0] == 200
