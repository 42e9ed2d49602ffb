"""The XML of DeleteObjects, CopyObject, GetObjectAttributes and ACLs, read back with the
parser botocore itself uses, so what the SDKs see is what is tested."""

from typing import Any

import botocore.session
import pytest
from botocore.parsers import create_parser

from objstore.errors import S3Error
from objstore.iam.acl_rules import owner_only
from objstore.meta.records import ObjectRecord, PartRef
from objstore.s3.acl import acl_document
from objstore.s3.objects_xml import (
    MAX_DELETE_KEYS,
    AclGrant,
    AclPolicy,
    DeleteEntry,
    DeleteEntryResult,
    PartsPage,
    copy_object_result_document,
    delete_result_document,
    object_attributes_document,
    owner_only_full_control,
    parse_access_control_policy,
    parse_delete_request,
)

MODEL = botocore.session.get_session().get_service_model("s3")
PARSER = create_parser("rest-xml")


def sdk_view(operation: str, body: bytes) -> dict[str, Any]:
    shape = MODEL.operation_model(operation).output_shape
    parsed: dict[str, Any] = PARSER.parse(
        {"body": body, "headers": {}, "status_code": 200}, shape
    )
    parsed.pop("ResponseMetadata", None)
    return parsed


def record(**changes: Any) -> ObjectRecord:
    values: dict[str, Any] = dict(bucket="b", key="k", version_id="null", blob_id="x",
                                  size=11, etag="0123456789abcdef0123456789abcdef",
                                  last_modified=1_700_000_000.25)
    values.update(changes)
    return ObjectRecord(**values)


def malformed(body: bytes) -> str:
    with pytest.raises(S3Error) as caught:
        parse_delete_request(body)
    return caught.value.code


# -- Delete request ----------------------------------------------------------------------


def test_delete_request_entries_in_order() -> None:
    body = (b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>'
            b"<Object><Key>a b</Key></Object>"
            b"<Object><Key>&lt;&amp;&gt;</Key><VersionId>null</VersionId></Object>"
            b"<Object><Key> padded </Key><ETag>\"e\"</ETag></Object>"
            b"<Object><Key>\xc3\xbc/</Key></Object></Delete>")
    request = parse_delete_request(body)
    assert request.quiet is True
    assert request.entries == (
        DeleteEntry("a b"), DeleteEntry("<&>", "null"), DeleteEntry(" padded ", None, True),
        DeleteEntry("ü/"),
    )


@pytest.mark.parametrize(("fields", "expected"), [
    ("<Key>k</Key>", DeleteEntry("k")),
    ("<Key>k</Key><VersionId>v</VersionId>", DeleteEntry("k", "v")),
    ("<VersionId>v</VersionId><!-- c --><Key>k</Key>", DeleteEntry("k", "v")),
    ("<Key>k</Key><VersionId>v</VersionId><Size>3</Size>", DeleteEntry("k", "v", True)),
    ("<Key>k</Key><LastModifiedTime>x</LastModifiedTime>", DeleteEntry("k", None, True)),
    ("<Key>k</Key><ETag>e</ETag><Size>3</Size>", DeleteEntry("k", None, True)),
    ("<Key></Key>", DeleteEntry("")),
])
def test_delete_entry_fields(fields: str, expected: DeleteEntry) -> None:
    """VersionId names a version; any other field but Key asks for a conditional delete."""
    body = f"<Delete><Object>{fields}</Object></Delete>".encode()
    assert parse_delete_request(body).entries == (expected,)


@pytest.mark.parametrize(("quiet", "expected"), [
    ("false", False), ("FALSE", False), ("0", False), ("True", True), (" 1 ", True),
])
def test_quiet_values(quiet: str, expected: bool) -> None:
    body = f"<Delete><Quiet>{quiet}</Quiet><Object><Key>k</Key></Object></Delete>"
    assert parse_delete_request(body.encode()).quiet is expected


def test_the_key_limit() -> None:
    objects = "".join(f"<Object><Key>k{i}</Key></Object>" for i in range(MAX_DELETE_KEYS))
    assert len(parse_delete_request(f"<Delete>{objects}</Delete>".encode()).entries) == 1000
    one_more = objects + "<Object><Key>last</Key></Object>"
    assert malformed(f"<Delete>{one_more}</Delete>".encode()) == "MalformedXML"


def test_the_largest_legal_request_fits() -> None:
    key = "&" * 1024  # escaped to five bytes each
    objects = "".join(f"<Object><Key>{key.replace('&', '&amp;')}</Key></Object>"
                      for _ in range(MAX_DELETE_KEYS))
    body = f"<Delete><Quiet>true</Quiet>{objects}</Delete>".encode()
    assert len(body) > 5_000_000
    entries = parse_delete_request(body).entries
    assert len(entries) == 1000 and entries[0].key == key


@pytest.mark.parametrize("body", [
    b"",
    b"   ",
    b"not xml",
    b"<Delete><Object><Key>k</Key></Object>",
    b"<Delete></Delete>",
    b"<Delete><Quiet>true</Quiet></Delete>",
    b"<Remove><Object><Key>k</Key></Object></Remove>",
    b"<Delete><Object><VersionId>v</VersionId></Object></Delete>",
    b"<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>",
    b"<Delete><Object><Key>k</Key><Colour>red</Colour></Object></Delete>",
    b"<Delete><Object><Key>k</Key></Object><Extra/></Delete>",
    b"<Delete><Quiet>maybe</Quiet><Object><Key>k</Key></Object></Delete>",
    b'<!DOCTYPE x [<!ENTITY e "boom">]><Delete><Object><Key>&e;</Key></Object></Delete>',
])
def test_malformed_delete_requests(body: bytes) -> None:
    assert malformed(body) == "MalformedXML"


# -- DeleteResult ------------------------------------------------------------------------


OUTCOMES = [
    DeleteEntryResult("a&b<c>\"'"),
    DeleteEntryResult("v", "null"),
    DeleteEntryResult("denied", None, "AccessDenied", "Access Denied"),
    DeleteEntryResult("gone", "123", "NoSuchVersion", "The specified version does not exist."),
    DeleteEntryResult("m", None, delete_marker=True, delete_marker_version_id="dm1"),
]


def test_delete_result_lists_everything_in_order() -> None:
    parsed = sdk_view("DeleteObjects", delete_result_document(OUTCOMES, quiet=False))
    assert parsed["Deleted"] == [
        {"Key": "a&b<c>\"'"}, {"Key": "v", "VersionId": "null"},
        {"Key": "m", "DeleteMarker": True, "DeleteMarkerVersionId": "dm1"},
    ]
    assert parsed["Errors"] == [
        {"Key": "denied", "Code": "AccessDenied", "Message": "Access Denied"},
        {"Key": "gone", "VersionId": "123", "Code": "NoSuchVersion",
         "Message": "The specified version does not exist."},
    ]


def test_quiet_delete_result_lists_only_errors() -> None:
    parsed = sdk_view("DeleteObjects", delete_result_document(OUTCOMES, quiet=True))
    assert "Deleted" not in parsed
    assert [e["Key"] for e in parsed["Errors"]] == ["denied", "gone"]
    empty = sdk_view("DeleteObjects", delete_result_document(OUTCOMES[:2], quiet=True))
    assert empty == {}


# -- CopyObjectResult --------------------------------------------------------------------


def test_copy_object_result() -> None:
    body = copy_object_result_document(record(checksums={"crc32": "AAAAAA=="},
                                              checksum_type="FULL_OBJECT"))
    result = sdk_view("CopyObject", body)["CopyObjectResult"]
    assert result["ETag"] == '"0123456789abcdef0123456789abcdef"'
    assert result["LastModified"].timestamp() == 1_700_000_000.25
    assert result["ChecksumCRC32"] == "AAAAAA=="
    assert result["ChecksumType"] == "FULL_OBJECT"
    plain = sdk_view("CopyObject", copy_object_result_document(record()))["CopyObjectResult"]
    assert set(plain) == {"ETag", "LastModified"}


# -- GetObjectAttributes -----------------------------------------------------------------


ALL = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")


def attributes(rec: ObjectRecord, wanted: tuple[str, ...] = ALL,
               page: PartsPage = PartsPage()) -> dict[str, Any]:
    return sdk_view("GetObjectAttributes", object_attributes_document(rec, wanted, page))


def test_attributes_of_a_plain_object() -> None:
    rec = record(checksums={"sha256": "c2hh"}, checksum_type="FULL_OBJECT",
                 storage_class="STANDARD_IA")
    assert attributes(rec) == {
        "ETag": "0123456789abcdef0123456789abcdef",
        "Checksum": {"ChecksumSHA256": "c2hh", "ChecksumType": "FULL_OBJECT"},
        "StorageClass": "STANDARD_IA",
        "ObjectSize": 11,
    }
    assert attributes(rec, ("ObjectSize",)) == {"ObjectSize": 11}
    assert "Checksum" not in attributes(record())


def composite(part_checksums: bool, count: int = 5) -> ObjectRecord:
    parts = tuple(
        PartRef(n, f"blob{n}", 100, f"etag{n}",
                {"crc32": f"c{n}=="} if part_checksums else {})
        for n in range(1, count + 1)
    )
    checksums = {"crc32": "whole==-5"} if part_checksums else {}
    return record(parts=parts, size=100 * count, etag="abc-5", checksums=checksums,
                  checksum_type="COMPOSITE" if part_checksums else None)


def test_composite_without_part_checksums_reports_only_the_count() -> None:
    parsed = attributes(composite(False))
    assert parsed["ObjectParts"] == {"TotalPartsCount": 5}
    assert parsed["ETag"] == "abc-5"


def test_composite_parts_are_paged() -> None:
    parsed = attributes(composite(True), page=PartsPage(max_parts=2, part_number_marker=1))
    assert parsed["Checksum"] == {"ChecksumCRC32": "whole==", "ChecksumType": "COMPOSITE"}
    assert parsed["ObjectParts"] == {
        "TotalPartsCount": 5, "PartNumberMarker": 1, "NextPartNumberMarker": 3,
        "MaxParts": 2, "IsTruncated": True,
        "Parts": [{"PartNumber": 2, "Size": 100, "ChecksumCRC32": "c2=="},
                  {"PartNumber": 3, "Size": 100, "ChecksumCRC32": "c3=="}],
    }
    last = attributes(composite(True), page=PartsPage(max_parts=10, part_number_marker=3))
    assert last["ObjectParts"]["IsTruncated"] is False
    assert [p["PartNumber"] for p in last["ObjectParts"]["Parts"]] == [4, 5]
    beyond = attributes(composite(True), page=PartsPage(part_number_marker=9))
    assert beyond["ObjectParts"]["NextPartNumberMarker"] == 9
    assert "Parts" not in beyond["ObjectParts"]


# -- ACLs --------------------------------------------------------------------------------


def test_access_control_policy() -> None:
    parsed = sdk_view("GetBucketAcl", acl_document(owner_only("u-1"), "alice"))
    assert parsed == {
        "Owner": {"ID": "u-1", "DisplayName": "alice"},
        "Grants": [{"Grantee": {"ID": "u-1", "DisplayName": "alice", "Type": "CanonicalUser"},
                    "Permission": "FULL_CONTROL"}],
    }


def policy_body(grants: str, owner: str = "<Owner><ID>u-1</ID></Owner>") -> bytes:
    return (
        '<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"{owner}<AccessControlList>{grants}</AccessControlList></AccessControlPolicy>"
    ).encode()


def grant(grantee: str, permission: str = "FULL_CONTROL", kind: str = "CanonicalUser") -> str:
    return (
        '<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        f'xsi:type="{kind}">{grantee}</Grantee><Permission>{permission}</Permission></Grant>'
    )


def test_parse_and_judge_policies() -> None:
    own = grant("<ID>u-1</ID><DisplayName>alice</DisplayName>")
    parsed = parse_access_control_policy(policy_body(own))
    assert parsed == AclPolicy("u-1", (AclGrant("CanonicalUser", "u-1", "FULL_CONTROL"),))
    assert owner_only_full_control(parsed, "u-1")
    assert owner_only_full_control(parse_access_control_policy(policy_body(own, "")), "u-1")
    refused = [
        policy_body(own, "<Owner><ID>u-2</ID></Owner>"),
        policy_body(grant("<ID>u-1</ID>", "READ")),
        policy_body(grant("<ID>u-2</ID>")),
        policy_body(own + grant("<URI>http://acs.amazonaws.com/groups/global/AllUsers</URI>",
                                "READ", "Group")),
        policy_body(""),
    ]
    for body in refused:
        assert not owner_only_full_control(parse_access_control_policy(body), "u-1"), body


@pytest.mark.parametrize("body", [
    b"<AccessControlPolicy>",
    b"<Policy/>",
    policy_body("<Grant><Permission>READ</Permission></Grant>"),
])
def test_malformed_policies(body: bytes) -> None:
    with pytest.raises(S3Error) as caught:
        parse_access_control_policy(body)
    assert caught.value.code == "MalformedACLError"
