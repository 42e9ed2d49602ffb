"""Object lock end to end through boto3: lock-enabled buckets and their configuration (the
spec's empty-bucket divergence), retention and legal hold by request header and by API,
default retention, the lock headers of GET/HEAD, the integrity-header rule, and every lock
rule on every path that deletes or overwrites a version: DeleteObject, DeleteObjects, an
overwrite of the null version (PutObject, CopyObject, CompleteMultipartUpload, a Suspended
DeleteObject) and retention changes, with and without the governance bypass."""

from __future__ import annotations

import base64
import datetime
import hashlib
import uuid
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from objstore.meta.store import SyncMetaStore
from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon
from tests.integration.test_object_operations import (
    allow,
    code_of,
    meta,
    new_bucket,
    signed,
    user_with,
    xml_code,
)

__all__ = ["meta"]  # the fixture, imported for its use below

FAR = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)
FARTHER = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
PART = 5 * 1024 * 1024


def lock_bucket(s3: Any, default: dict[str, Any] | None = None) -> str:
    name = f"l-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    if default is not None:
        s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": default}})
    return name


def denied(call: Any, code: str = "AccessDenied", **params: Any) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call(**params)
    assert code_of(caught) == code, caught.value.response["Error"]
    return caught.value


def retained(s3: Any, bucket: str, key: str, mode: str, until: datetime.datetime = FAR
             ) -> str:
    return str(s3.put_object(Bucket=bucket, Key=key, Body=b"locked", ObjectLockMode=mode,
                             ObjectLockRetainUntilDate=until)["VersionId"])


def md5_of(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


# -- the configuration --------------------------------------------------------------------


def test_lock_enabled_bucket_and_its_configuration(s3: Any) -> None:
    bucket = lock_bucket(s3)
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    config = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
    assert config == {"ObjectLockEnabled": "Enabled"}
    for rule in ({"Mode": "GOVERNANCE", "Days": 3}, {"Mode": "COMPLIANCE", "Years": 2}):
        s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": rule}})
        config = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
        assert config["Rule"]["DefaultRetention"] == rule
    s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled"})  # no rule: no default retention
    assert "Rule" not in s3.get_object_lock_configuration(
        Bucket=bucket)["ObjectLockConfiguration"]
    denied(s3.put_bucket_versioning, "InvalidBucketState", Bucket=bucket,
           VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"


@pytest.mark.parametrize(("rule", "code"), [
    ("<Mode>GOVERNANCE</Mode><Days>0</Days>", "InvalidRetentionPeriod"),
    ("<Mode>GOVERNANCE</Mode><Days>-1</Days>", "InvalidRetentionPeriod"),
    ("<Mode>COMPLIANCE</Mode><Years>0</Years>", "InvalidRetentionPeriod"),
    ("<Mode>COMPLIANCE</Mode><Years>101</Years>", "InvalidRetentionPeriod"),
    ("<Mode>COMPLIANCE</Mode><Days>36501</Days>", "InvalidRetentionPeriod"),
    ("<Mode>GOVERNANCE</Mode><Days>1</Days><Years>1</Years>", "MalformedXML"),
    ("<Mode>GOVERNANCE</Mode>", "MalformedXML"),
    ("<Mode>governance</Mode><Days>1</Days>", "MalformedXML"),
    ("<Mode>ABC</Mode><Days>1</Days>", "MalformedXML"),
    ("<Days>1</Days>", "MalformedXML"),
    ("<Mode>GOVERNANCE</Mode><Days>one</Days>", "MalformedXML"),
])
def test_default_retention_is_validated(s3: Any, daemon: Daemon, rule: str,
                                        code: str) -> None:
    bucket = lock_bucket(s3)
    body = (f"<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule>"
            f"<DefaultRetention>{rule}</DefaultRetention></Rule></ObjectLockConfiguration>"
            ).encode()
    response = signed(daemon, "PUT", f"/{bucket}?object-lock", body=body,
                      headers={"Content-MD5": md5_of(body)})
    assert (response.status, xml_code(response)) == (400, code)


def test_lock_configuration_refusals(s3: Any, daemon: Daemon) -> None:
    bucket = lock_bucket(s3)
    body = (b"<ObjectLockConfiguration><ObjectLockEnabled>Disabled</ObjectLockEnabled>"
            b"</ObjectLockConfiguration>")
    response = signed(daemon, "PUT", f"/{bucket}?object-lock", body=body,
                      headers={"Content-MD5": md5_of(body)})
    assert (response.status, xml_code(response)) == (400, "MalformedXML")
    good = (b"<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled>"
            b"</ObjectLockConfiguration>")
    bare = signed(daemon, "PUT", f"/{bucket}?object-lock", body=good)
    assert (bare.status, xml_code(bare)) == (400, "InvalidRequest")
    plain = new_bucket(s3)
    error = denied(s3.get_object_lock_configuration, "ObjectLockConfigurationNotFoundError",
                   Bucket=plain)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_lock_can_be_enabled_on_an_empty_bucket_only(s3: Any) -> None:
    """The spec's deliberate divergence: AWS accepts any versioned bucket."""
    empty = new_bucket(s3)
    s3.put_object_lock_configuration(Bucket=empty, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    assert s3.get_bucket_versioning(Bucket=empty)["Status"] == "Enabled"
    version = s3.put_object(Bucket=empty, Key="k", Body=b"x")["VersionId"]
    assert s3.head_object(Bucket=empty, Key="k", VersionId=version)["ObjectLockMode"] == \
        "GOVERNANCE"
    full = new_bucket(s3)
    s3.put_object(Bucket=full, Key="k", Body=b"x")
    error = denied(s3.put_object_lock_configuration, "InvalidBucketState", Bucket=full,
                   ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    only_markers = new_bucket(s3)
    s3.put_bucket_versioning(Bucket=only_markers,
                             VersioningConfiguration={"Status": "Enabled"})
    s3.delete_object(Bucket=only_markers, Key="k")
    denied(s3.put_object_lock_configuration, "InvalidBucketState", Bucket=only_markers,
           ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=full).get("Status") is None


# -- retention and legal hold on writes and reads ---------------------------------------------


def test_lock_headers_on_put_and_on_reads(s3: Any) -> None:
    bucket = lock_bucket(s3)
    version = s3.put_object(Bucket=bucket, Key="k", Body=b"x", ObjectLockMode="GOVERNANCE",
                            ObjectLockRetainUntilDate=FAR,
                            ObjectLockLegalHoldStatus="ON")["VersionId"]
    for read in (s3.head_object, s3.get_object):
        got = read(Bucket=bucket, Key="k", VersionId=version)
        assert got["ObjectLockMode"] == "GOVERNANCE"
        assert got["ObjectLockRetainUntilDate"] == FAR
        assert got["ObjectLockLegalHoldStatus"] == "ON"
    retention = s3.get_object_retention(Bucket=bucket, Key="k")["Retention"]
    assert retention == {"Mode": "GOVERNANCE", "RetainUntilDate": FAR}
    assert s3.get_object_legal_hold(Bucket=bucket, Key="k")["LegalHold"] == {"Status": "ON"}
    s3.put_object_legal_hold(Bucket=bucket, Key="k", LegalHold={"Status": "OFF"})
    plain = s3.put_object(Bucket=bucket, Key="plain", Body=b"x")["VersionId"]
    head = s3.head_object(Bucket=bucket, Key="plain")
    assert "ObjectLockMode" not in head and "ObjectLockLegalHoldStatus" not in head
    denied(s3.get_object_retention, "NoSuchObjectLockConfiguration", Bucket=bucket,
           Key="plain", VersionId=plain)
    denied(s3.get_object_legal_hold, "NoSuchObjectLockConfiguration", Bucket=bucket,
           Key="plain")
    denied(s3.get_object_retention, "NoSuchKey", Bucket=bucket, Key="absent")
    denied(s3.get_object_retention, "NoSuchVersion", Bucket=bucket, Key="k",
           VersionId=str(uuid.uuid4()))


@pytest.mark.parametrize(("headers", "message"), [
    ({"ObjectLockMode": "GOVERNANCE"}, "must both be supplied"),
    ({"ObjectLockRetainUntilDate": FAR}, "must both be supplied"),
    ({"ObjectLockMode": "FOREVER", "ObjectLockRetainUntilDate": FAR}, "wormMode"),
    ({"ObjectLockMode": "GOVERNANCE",
      "ObjectLockRetainUntilDate": datetime.datetime(2001, 1, 1, tzinfo=datetime.UTC)},
     "in the future"),
    ({"ObjectLockLegalHoldStatus": "MAYBE"}, "Legal Hold"),
])
def test_lock_headers_are_validated(s3: Any, headers: dict[str, Any], message: str) -> None:
    bucket = lock_bucket(s3)
    error = denied(s3.put_object, "InvalidArgument", Bucket=bucket, Key="k", Body=b"x",
                   **headers)
    assert message in error.response["Error"]["Message"]
    assert "Versions" not in s3.list_object_versions(Bucket=bucket)


def test_lock_requests_on_a_bucket_without_lock(s3: Any) -> None:
    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    message = "Bucket is missing Object Lock Configuration"
    for call, params in [
        (s3.put_object, {"Body": b"x", "ObjectLockMode": "GOVERNANCE",
                         "ObjectLockRetainUntilDate": FAR}),
        (s3.put_object, {"Body": b"x", "ObjectLockLegalHoldStatus": "ON"}),
        (s3.get_object_retention, {}), (s3.get_object_legal_hold, {}),
        (s3.put_object_retention, {"Retention": {"Mode": "GOVERNANCE",
                                                 "RetainUntilDate": FAR}}),
        (s3.put_object_legal_hold, {"LegalHold": {"Status": "ON"}}),
        (s3.create_multipart_upload, {"ObjectLockLegalHoldStatus": "ON"}),
    ]:
        error = denied(call, "InvalidRequest", Bucket=bucket, Key="k", **params)
        assert error.response["Error"]["Message"] == message


def test_default_retention_applies_to_every_kind_of_new_version(s3: Any) -> None:
    bucket = lock_bucket(s3, {"Mode": "COMPLIANCE", "Days": 2})
    now = datetime.datetime.now(datetime.UTC)
    put = s3.put_object(Bucket=bucket, Key="put", Body=b"x")["VersionId"]
    copy = s3.copy_object(Bucket=bucket, Key="copy",
                          CopySource={"Bucket": bucket, "Key": "put"})["VersionId"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"p")
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload,
                                        MultipartUpload={"Parts": [
                                            {"PartNumber": 1, "ETag": part["ETag"]}]})
    for key, version in (("put", put), ("copy", copy), ("mp", done["VersionId"])):
        retention = s3.get_object_retention(Bucket=bucket, Key=key, VersionId=version)
        assert retention["Retention"]["Mode"] == "COMPLIANCE"
        until = retention["Retention"]["RetainUntilDate"]
        assert abs((until - now).total_seconds() - 2 * 86400) < 120
    explicit = s3.put_object(Bucket=bucket, Key="explicit", Body=b"x",
                             ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=FARTHER)
    assert s3.get_object_retention(Bucket=bucket, Key="explicit",
                                   VersionId=explicit["VersionId"])["Retention"] == {
        "Mode": "GOVERNANCE", "RetainUntilDate": FARTHER}


def test_lock_headers_of_copy_and_multipart(s3: Any) -> None:
    bucket = lock_bucket(s3)
    source = retained(s3, bucket, "src", "COMPLIANCE")
    copied = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket,
                                                                  "Key": "src"},
                            ObjectLockLegalHoldStatus="ON")
    head = s3.head_object(Bucket=bucket, Key="dst", VersionId=copied["VersionId"])
    assert head["ObjectLockLegalHoldStatus"] == "ON" and "ObjectLockMode" not in head
    assert s3.head_object(Bucket=bucket, Key="src", VersionId=source)["ObjectLockMode"] == \
        "COMPLIANCE"
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ObjectLockMode="GOVERNANCE",
                                        ObjectLockRetainUntilDate=FAR)["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"p")
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload,
                                        MultipartUpload={"Parts": [
                                            {"PartNumber": 1, "ETag": part["ETag"]}]})
    head = s3.head_object(Bucket=bucket, Key="mp", VersionId=done["VersionId"])
    assert (head["ObjectLockMode"], head["ObjectLockRetainUntilDate"]) == ("GOVERNANCE", FAR)


def test_writes_with_lock_parameters_need_an_integrity_header(daemon: Daemon,
                                                              s3: Any) -> None:
    bare: Any = make_client(daemon.endpoint, request_checksum_calculation="when_required")
    bucket = lock_bucket(s3)
    bare.put_object(Bucket=bucket, Key="free", Body=b"x")  # no lock parameters: no rule
    message = "Content-MD5 OR x-amz-checksum- HTTP header is required for Put Object"
    for params in ({"ObjectLockLegalHoldStatus": "ON"},
                   {"ObjectLockMode": "GOVERNANCE", "ObjectLockRetainUntilDate": FAR}):
        error = denied(bare.put_object, "InvalidRequest", Bucket=bucket, Key="k", Body=b"x",
                       **params)
        assert message in error.response["Error"]["Message"]
        bare.put_object(Bucket=bucket, Key="k", Body=b"x", ContentMD5=md5_of(b"x"), **params)
    defaulted = lock_bucket(s3, {"Mode": "GOVERNANCE", "Days": 1})
    denied(bare.put_object, "InvalidRequest", Bucket=defaulted, Key="k", Body=b"x")
    s3.put_object(Bucket=defaulted, Key="k", Body=b"x")  # boto3 sends a CRC32 by default
    upload = bare.create_multipart_upload(Bucket=defaulted, Key="mp")["UploadId"]
    error = denied(bare.upload_part, "InvalidRequest", Bucket=defaulted, Key="mp",
                   UploadId=upload, PartNumber=1, Body=b"p")
    assert "Put Part" in error.response["Error"]["Message"]
    bare.upload_part(Bucket=defaulted, Key="mp", UploadId=upload, PartNumber=1, Body=b"p",
                     ContentMD5=md5_of(b"p"))


# -- the rules on DeleteObject ---------------------------------------------------------------


def test_governance_blocks_deletion_unless_bypassed_with_permission(daemon: Daemon,
                                                                    s3: Any) -> None:
    bucket = lock_bucket(s3)
    version = retained(s3, bucket, "k", "GOVERNANCE")
    denied(s3.delete_object, Bucket=bucket, Key="k", VersionId=version)
    arns = [f"arn:aws:s3:::{bucket}/*"]
    plain = user_with(daemon, allow(["s3:DeleteObjectVersion", "s3:DeleteObject"], arns))
    denied(plain.delete_object, Bucket=bucket, Key="k", VersionId=version,
           BypassGovernanceRetention=True)
    bypasser = user_with(daemon, allow(["s3:DeleteObjectVersion",
                                        "s3:BypassGovernanceRetention"], arns))
    denied(bypasser.delete_object, Bucket=bucket, Key="k", VersionId=version)  # no header
    marker = plain.delete_object(Bucket=bucket, Key="k")  # delete markers are always allowed
    assert marker["DeleteMarker"] is True
    done = bypasser.delete_object(Bucket=bucket, Key="k", VersionId=version,
                                  BypassGovernanceRetention=True)
    assert done["VersionId"] == version
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker["VersionId"])  # markers too
    assert "Versions" not in s3.list_object_versions(Bucket=bucket)


def test_compliance_and_legal_hold_cannot_be_bypassed(s3: Any) -> None:
    bucket = lock_bucket(s3)
    compliant = retained(s3, bucket, "c", "COMPLIANCE")
    held = s3.put_object(Bucket=bucket, Key="h", Body=b"x",
                         ObjectLockLegalHoldStatus="ON")["VersionId"]
    both = s3.put_object(Bucket=bucket, Key="g", Body=b"x", ObjectLockMode="GOVERNANCE",
                         ObjectLockRetainUntilDate=FAR,
                         ObjectLockLegalHoldStatus="ON")["VersionId"]
    for key, version in (("c", compliant), ("h", held), ("g", both)):
        for bypass in (False, True):
            denied(s3.delete_object, Bucket=bucket, Key=key, VersionId=version,
                   BypassGovernanceRetention=bypass)
    s3.put_object_legal_hold(Bucket=bucket, Key="h", LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=bucket, Key="h", VersionId=held)
    s3.put_object_legal_hold(Bucket=bucket, Key="g", VersionId=both,
                             LegalHold={"Status": "OFF"})
    denied(s3.delete_object, Bucket=bucket, Key="g", VersionId=both)
    s3.delete_object(Bucket=bucket, Key="g", VersionId=both, BypassGovernanceRetention=True)
    remaining = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [(v["Key"], v["VersionId"]) for v in remaining] == [("c", compliant)]


# -- the rules on retention changes ---------------------------------------------------------


def test_governance_retention_changes(daemon: Daemon, s3: Any) -> None:
    bucket = lock_bucket(s3)
    version = retained(s3, bucket, "k", "GOVERNANCE")
    before = s3.head_object(Bucket=bucket, Key="k")["LastModified"]
    s3.put_object_retention(Bucket=bucket, Key="k", Retention={  # extending: always allowed
        "Mode": "GOVERNANCE", "RetainUntilDate": FARTHER})
    for retention in ({"Mode": "GOVERNANCE", "RetainUntilDate": FAR},
                      {"Mode": "COMPLIANCE", "RetainUntilDate": FARTHER}, {}):
        denied(s3.put_object_retention, Bucket=bucket, Key="k", Retention=retention)
    arns = [f"arn:aws:s3:::{bucket}/*"]
    plain = user_with(daemon, allow(["s3:PutObjectRetention"], arns))
    denied(plain.put_object_retention, Bucket=bucket, Key="k", BypassGovernanceRetention=True,
           Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    bypasser = user_with(daemon, allow(["s3:PutObjectRetention",
                                        "s3:BypassGovernanceRetention"], arns))
    bypasser.put_object_retention(Bucket=bucket, Key="k", BypassGovernanceRetention=True,
                                  Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    assert s3.get_object_retention(Bucket=bucket, Key="k")["Retention"]["RetainUntilDate"] == FAR
    s3.put_object_retention(Bucket=bucket, Key="k", VersionId=version, Retention={},
                            BypassGovernanceRetention=True)
    denied(s3.get_object_retention, "NoSuchObjectLockConfiguration", Bucket=bucket, Key="k")
    s3.delete_object(Bucket=bucket, Key="k", VersionId=version)  # nothing protects it now
    past = datetime.datetime(2001, 1, 1, tzinfo=datetime.UTC)
    other = retained(s3, bucket, "o", "GOVERNANCE")
    error = denied(s3.put_object_retention, "InvalidArgument", Bucket=bucket, Key="o",
                   VersionId=other, BypassGovernanceRetention=True,
                   Retention={"Mode": "GOVERNANCE", "RetainUntilDate": past})
    assert "future" in error.response["Error"]["Message"]
    assert s3.head_object(Bucket=bucket, Key="o")["LastModified"] >= before


def test_compliance_retention_can_only_be_extended(s3: Any) -> None:
    bucket = lock_bucket(s3)
    retained(s3, bucket, "k", "COMPLIANCE")
    for retention in ({"Mode": "COMPLIANCE", "RetainUntilDate": FAR - datetime.timedelta(1)},
                      {"Mode": "GOVERNANCE", "RetainUntilDate": FARTHER}, {}):
        denied(s3.put_object_retention, Bucket=bucket, Key="k", Retention=retention,
               BypassGovernanceRetention=True)
    s3.put_object_retention(Bucket=bucket, Key="k", Retention={
        "Mode": "COMPLIANCE", "RetainUntilDate": FARTHER})
    assert s3.get_object_retention(Bucket=bucket, Key="k")["Retention"] == {
        "Mode": "COMPLIANCE", "RetainUntilDate": FARTHER}


def test_lock_changes_keep_last_modified_and_the_listing(s3: Any) -> None:
    bucket = lock_bucket(s3)
    old = retained(s3, bucket, "k", "GOVERNANCE")
    s3.put_object(Bucket=bucket, Key="k", Body=b"newer")
    listing = s3.list_object_versions(Bucket=bucket)["Versions"]
    s3.put_object_retention(Bucket=bucket, Key="k", VersionId=old, Retention={
        "Mode": "GOVERNANCE", "RetainUntilDate": FARTHER})
    s3.put_object_legal_hold(Bucket=bucket, Key="k", VersionId=old,
                             LegalHold={"Status": "ON"})
    assert s3.list_object_versions(Bucket=bucket)["Versions"] == listing
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"newer"


@pytest.mark.parametrize("body", [
    b"<Retention><Mode>governance</Mode><RetainUntilDate>2099-01-01T00:00:00Z"
    b"</RetainUntilDate></Retention>",
    b"<Retention><Mode>GOVERNANCE</Mode></Retention>",
    b"<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>soon</RetainUntilDate></Retention>",
    b"<LegalHold><Status>MAYBE</Status></LegalHold>",
])
def test_retention_and_legal_hold_documents_are_validated(s3: Any, daemon: Daemon,
                                                          body: bytes) -> None:
    bucket = lock_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    resource = "legal-hold" if body.startswith(b"<LegalHold") else "retention"
    response = signed(daemon, "PUT", f"/{bucket}/k?{resource}", body=body,
                      headers={"Content-MD5": md5_of(body)})
    assert (response.status, xml_code(response)) == (400, "MalformedXML")
    bare = signed(daemon, "PUT", f"/{bucket}/k?legal-hold",
                  body=b"<LegalHold><Status>ON</Status></LegalHold>")
    assert (bare.status, xml_code(bare)) == (400, "InvalidRequest")


# -- the rules on DeleteObjects ----------------------------------------------------------------


def test_delete_objects_applies_the_rules_per_key(s3: Any) -> None:
    bucket = lock_bucket(s3)
    governed = retained(s3, bucket, "g", "GOVERNANCE")
    compliant = retained(s3, bucket, "c", "COMPLIANCE")
    free = s3.put_object(Bucket=bucket, Key="f", Body=b"x")["VersionId"]
    objects = [{"Key": "g", "VersionId": governed}, {"Key": "c", "VersionId": compliant},
               {"Key": "f", "VersionId": free}, {"Key": "c"}]
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
    assert sorted((e["Key"], e["Code"]) for e in result["Errors"]) == [
        ("c", "AccessDenied"), ("g", "AccessDenied")]
    deleted = {(d["Key"], d.get("VersionId"), d.get("DeleteMarker")) for d in result["Deleted"]}
    assert deleted == {("f", free, None), ("c", None, True)}
    bypassed = s3.delete_objects(Bucket=bucket, BypassGovernanceRetention=True, Delete={
        "Objects": [{"Key": "g", "VersionId": governed}, {"Key": "c", "VersionId": compliant}]})
    assert [(e["Key"], e["Code"]) for e in bypassed["Errors"]] == [("c", "AccessDenied")]
    assert [d["Key"] for d in bypassed["Deleted"]] == ["g"]


# -- the rules on overwrites of the null version ------------------------------------------------


def test_a_locked_null_version_is_never_overwritten(s3: Any, meta: SyncMetaStore) -> None:
    """A lock-enabled bucket can never be Suspended, so no S3 call makes this state; a
    replicated or recovered row can. Every write that would replace the null version is
    refused, like a delete of it."""
    bucket = new_bucket(s3)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"locked")
    s3.put_object(Bucket=bucket, Key="src", Body=b"other")
    record = meta.get_object(bucket, "k", "null")
    assert record is not None
    meta.update_object(replace(record, retention_mode="COMPLIANCE",
                               retain_until_date=FAR.timestamp()))
    denied(s3.put_object, Bucket=bucket, Key="k", Body=b"overwrite")
    denied(s3.copy_object, Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "src"})
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=1, Body=b"p")
    denied(s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload,
           MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    denied(s3.delete_object, Bucket=bucket, Key="k")  # the null marker would replace it
    denied(s3.delete_object, Bucket=bucket, Key="k", VersionId="null")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"locked"
    record = meta.get_object(bucket, "k", "null")
    assert record is not None
    meta.update_object(replace(record, retention_mode=None, retain_until_date=None,
                               legal_hold_status="ON"))
    denied(s3.put_object, Bucket=bucket, Key="k", Body=b"overwrite")
    meta.update_object(replace(record, retention_mode=None, retain_until_date=None,
                               legal_hold_status="OFF"))
    s3.put_object(Bucket=bucket, Key="k", Body=b"free")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"free"


# -- permissions ---------------------------------------------------------------------------------


def test_lock_permissions(daemon: Daemon, s3: Any) -> None:
    bucket = lock_bucket(s3)
    version = s3.put_object(Bucket=bucket, Key="k", Body=b"x", ObjectLockMode="GOVERNANCE",
                            ObjectLockRetainUntilDate=FAR,
                            ObjectLockLegalHoldStatus="ON")["VersionId"]
    arns = [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    writer = user_with(daemon, allow(["s3:PutObject", "s3:GetObject", "s3:GetObjectVersion"],
                                     arns))
    writer.put_object(Bucket=bucket, Key="w", Body=b"x")
    denied(writer.put_object, Bucket=bucket, Key="w", Body=b"x", ObjectLockMode="GOVERNANCE",
           ObjectLockRetainUntilDate=FAR)
    denied(writer.put_object, Bucket=bucket, Key="w", Body=b"x",
           ObjectLockLegalHoldStatus="ON")
    head = writer.head_object(Bucket=bucket, Key="k", VersionId=version)
    assert "ObjectLockMode" not in head and "ObjectLockLegalHoldStatus" not in head
    for call, params in [(writer.get_object_retention, {}), (writer.get_object_legal_hold, {}),
                         (writer.put_object_legal_hold, {"LegalHold": {"Status": "OFF"}})]:
        denied(call, Bucket=bucket, Key="k", **params)
    denied(writer.get_object_lock_configuration, Bucket=bucket)
    denied(writer.put_object_lock_configuration, Bucket=bucket,
           ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    reader = user_with(daemon, allow(["s3:GetObject", "s3:GetObjectRetention"], arns))
    head = reader.head_object(Bucket=bucket, Key="k")
    assert head["ObjectLockMode"] == "GOVERNANCE" and "ObjectLockLegalHoldStatus" not in head
    creator = user_with(daemon, allow(["s3:CreateBucket"], ["*"]))
    name = f"l-{uuid.uuid4().hex[:16]}"
    denied(creator.create_bucket, Bucket=name, ObjectLockEnabledForBucket=True)
    creator.create_bucket(Bucket=name)
    assert status_of_bucket(s3, name) == 200


def status_of_bucket(s3: Any, name: str) -> int:
    try:
        return int(s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"])
    except ClientError as error:
        return int(error.response["ResponseMetadata"]["HTTPStatusCode"])


def test_delete_marker_retention_requests(s3: Any) -> None:
    bucket = lock_bucket(s3)
    retained(s3, bucket, "k", "GOVERNANCE")
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    denied(s3.get_object_retention, "NoSuchKey", Bucket=bucket, Key="k")
    error = denied(s3.get_object_retention, "MethodNotAllowed", Bucket=bucket, Key="k",
                   VersionId=marker)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 405
    denied(s3.put_object_legal_hold, "MethodNotAllowed", Bucket=bucket, Key="k",
           VersionId=marker, LegalHold={"Status": "ON"})
