"""Every XML request body a client can send, parsed: a value or an S3 error, never another
exception; what parses renders back and parses to the same value."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from objstore.engine import lifecycle_rules
from objstore.engine.lifecycle_rules import LifecycleConfiguration
from objstore.s3 import lifecycle_xml, multipart_xml, objects_xml, versioning_xml
from objstore.s3.xml import parse_create_bucket
from tests.fuzz.outcomes import Refused, outcome
from tests.fuzz.strategies import OneOf, Spec, body, schema_body, value

CHECKSUMS = list(multipart_xml.CHECKSUM_ELEMENTS)
DAYS = ("1", "30", "365", "0", "-1", "2147483648")
DATE = ("2030-01-01T00:00:00Z", "2030-01-01T00:00:00.000Z", "2030-01-01", "0001-01-01T00:00:00"
        "+14:00", "9999-12-31T23:59:59-14:00", "2030-02-30T00:00:00Z")
TAG: Spec = {"Key": value("k", "aws:k", "a b"), "Value": value("v", "")}


def operation_body(root: str, spec: Spec) -> st.SearchStrategy[bytes]:
    """What a client may send: mostly documents that follow the operation's schema (so
    examples reach the fields), else any structure or any bytes."""
    return st.one_of(schema_body(root, spec), schema_body(root, spec),
                     body(root, _names(spec)))


def _names(spec: Spec) -> list[str]:
    names = []
    for name, child in spec.items():
        if not isinstance(child, OneOf):
            names.append(name)
        if isinstance(child, dict):
            names += _names(child)
    return names


@given(operation_body("CreateBucketConfiguration", {"LocationConstraint": value(
    "us-east-1", "eu-west-1", "")}))
def test_create_bucket(data: bytes) -> None:
    outcome(parse_create_bucket, data)


@given(operation_body("CompleteMultipartUpload", {"Part": {
    "PartNumber": value("1", "2", "10000", "10001"), "ETag": value('"0123"', "e"),
    **{name: value("AAAAAA==") for name in CHECKSUMS[:2]}}}))
def test_complete_multipart_upload(data: bytes) -> None:
    parts = outcome(multipart_xml.parse_complete, data)
    if not isinstance(parts, Refused):
        assert parts and all(1 <= part.part_number <= 10000 for part in parts)


@given(operation_body("Delete", {"Quiet": value("true", "false"), "Object": {
    "Key": value("k", "a/b"), "VersionId": value("null"), "ETag": value("e"),
    "Size": value("1")}}))
def test_delete_objects(data: bytes) -> None:
    request = outcome(objects_xml.parse_delete_request, data)
    if not isinstance(request, Refused):
        outcomes = [objects_xml.DeleteEntryResult(e.key, e.version_id) for e in request.entries]
        objects_xml.delete_result_document(outcomes, quiet=request.quiet)


@given(operation_body("AccessControlPolicy", {
    "Owner": {"ID": value("u-root"), "DisplayName": value("root")},
    "AccessControlList": {"Grant": {"Grantee": {"ID": value("u-root"), "URI": value()},
                                    "Permission": value("FULL_CONTROL", "READ")}}}))
def test_access_control_policy(data: bytes) -> None:
    outcome(objects_xml.parse_access_control_policy, data)


@given(operation_body("VersioningConfiguration", {
    "Status": value("Enabled", "Suspended"), "MfaDelete": value("Disabled", "Enabled")}))
def test_versioning(data: bytes) -> None:
    status = outcome(versioning_xml.parse_versioning, data)
    if not isinstance(status, Refused):
        assert versioning_xml.parse_versioning(versioning_xml.versioning_document(status)) == (
            status)


@given(operation_body("ObjectLockConfiguration", {
    "ObjectLockEnabled": value("Enabled"), "Rule": {"DefaultRetention": {
        "Mode": value("GOVERNANCE", "COMPLIANCE"),
        "period": OneOf(Days=value(*DAYS), Years=value(*DAYS))}}}))
def test_object_lock_configuration(data: bytes) -> None:
    config = outcome(versioning_xml.parse_lock_configuration, data)
    if not isinstance(config, Refused):
        rendered = versioning_xml.lock_configuration_document(config)
        assert versioning_xml.parse_lock_configuration(rendered) == config


@given(operation_body("Retention", {
    "Mode": value("GOVERNANCE", "COMPLIANCE"), "RetainUntilDate": value(*DATE)}))
def test_retention(data: bytes) -> None:
    outcome(versioning_xml.parse_retention, data)


@given(operation_body("LegalHold", {"Status": value("ON", "OFF")}))
def test_legal_hold(data: bytes) -> None:
    status = outcome(versioning_xml.parse_legal_hold, data)
    if not isinstance(status, Refused):
        assert versioning_xml.parse_legal_hold(versioning_xml.legal_hold_document(status)) == (
            status)


@given(operation_body("Tagging", {"TagSet": {"Tag": TAG}}), st.sampled_from([10, 50]))
def test_tagging(data: bytes, max_tags: int) -> None:
    tags = outcome(versioning_xml.parse_tagging, data, max_tags, "Object tags")
    if not isinstance(tags, Refused):
        rendered = versioning_xml.tagging_document(tags.items())
        assert versioning_xml.parse_tagging(rendered, max_tags, "Object tags") == tags


SIZE = ("0", "1", "1024", "-1")
LIFECYCLE: Spec = {"Rule": {
    "ID": value("rule-1", ""), "Status": value("Enabled", "Disabled"),
    "Filter": {"selector": OneOf(
        Prefix=value("logs/", ""), Tag=TAG, ObjectSizeGreaterThan=value(*SIZE),
        And={"Prefix": value("a/"), "Tag": TAG, "ObjectSizeLessThan": value(*SIZE)})},
    "action": OneOf(
        Expiration={"when": OneOf(Days=value(*DAYS), Date=value(*DATE),
                                  ExpiredObjectDeleteMarker=value("true", "false"))},
        NoncurrentVersionExpiration={"NoncurrentDays": value(*DAYS),
                                     "NewerNoncurrentVersions": value("1", "100", "101")},
        AbortIncompleteMultipartUpload={"DaysAfterInitiation": value(*DAYS)},
        Transition={"Days": value(*DAYS), "StorageClass": value("GLACIER")}),
}}


def valid_lifecycle(data: bytes) -> LifecycleConfiguration:
    """What PutBucketLifecycleConfiguration stores: the parsed document, validated."""
    config = lifecycle_xml.parse_lifecycle(data)
    lifecycle_rules.validate(config)
    return config


@given(operation_body("LifecycleConfiguration", LIFECYCLE))
def test_lifecycle_configuration(data: bytes) -> None:
    config = outcome(valid_lifecycle, data)
    if not isinstance(config, Refused):
        rendered = lifecycle_xml.lifecycle_document(config)
        assert lifecycle_xml.parse_lifecycle(rendered) == config
