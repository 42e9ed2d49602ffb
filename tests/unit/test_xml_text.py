"""Any text can be rendered in S3 XML (objstore/s3/xml.py `set_text`): a key holding
characters XML 1.0 cannot carry is written with numeric character references, as AWS
writes it, in every document that names keys; with encoding-type=url it is
percent-encoded and the document is plain XML 1.0 that botocore reads."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import botocore.session
import pytest
from botocore.parsers import create_parser

from objstore.http.error_xml import error_document
from objstore.meta.records import ObjectRecord, UploadRecord
from objstore.s3.listing_xml import (
    VersionsListing,
    list_objects_document,
    list_versions_document,
)
from objstore.s3.multipart_xml import UploadsPage, initiate_result, list_uploads_result

KEYS = ["a\x01b", "c\rd\ne", "tab\tdel\x7f", "x\x1f\x0b\x0cy", "nel\x85", "\ufffe\uffff"]
MODEL = botocore.session.get_session().get_service_model("s3")
PARSER = create_parser("rest-xml")
_REFERENCE = re.compile(rb"&#x[0-9A-F]+;")


def record(key: str) -> ObjectRecord:
    return ObjectRecord(bucket="b", key=key, version_id="null", blob_id="x", size=1,
                        etag="e", last_modified=1.0)


def listing(keys: list[str], encoding: str | None) -> bytes:
    return list_objects_document(
        bucket="b", version=2, prefix="", delimiter="", max_keys=1000,
        encoding_type=encoding, contents=[record(k) for k in keys], common_prefixes=[],
        is_truncated=False, fields={"KeyCount": str(len(keys))}, fetch_owner=False)


def well_formed_but_for_references(body: bytes) -> ElementTree.Element:
    """The document parses once the references XML 1.0 forbids are taken out."""
    return ElementTree.fromstring(_REFERENCE.sub(b"", body))


def sdk_view(operation: str, body: bytes) -> dict[str, object]:
    shape = MODEL.operation_model(operation).output_shape
    return PARSER.parse({"body": body, "headers": {}, "status_code": 200}, shape)


def test_forbidden_characters_become_references_as_aws_writes_them() -> None:
    body = listing(KEYS, None)  # lxml refused these characters: the listing was a 500
    assert b"<Key>a&#x1;b</Key>" in body
    assert b"<Key>c&#13;d\ne</Key>" in body  # allowed, but CR is escaped to survive parsing
    assert b"<Key>tab\tdel\x7f</Key>" in body  # allowed as they are
    assert b"<Key>x&#x1F;&#xB;&#xC;y</Key>" in body
    assert b"<Key>&#xFFFE;&#xFFFF;</Key>" in body
    keys = [k.text for k in well_formed_but_for_references(body).iter()
            if k.tag.endswith("Key")]
    assert keys[1:3] == ["c\rd\ne", "tab\tdel\x7f"]


def test_encoding_type_url_gives_plain_xml_the_sdk_reads() -> None:
    body = listing(KEYS, "url")
    assert not _REFERENCE.search(body)
    parsed = sdk_view("ListObjectsV2", body)
    assert [c["Key"] for c in parsed["Contents"]] == [  # type: ignore[index, union-attr]
        "a%01b", "c%0Dd%0Ae", "tab%09del%7F", "x%1F%0B%0Cy", "nel%C2%85",
        "%EF%BF%BE%EF%BF%BF"]


@pytest.mark.parametrize("key", KEYS)
def test_every_document_that_names_a_key_renders_it(key: str) -> None:
    versions = list_versions_document(VersionsListing(
        bucket="b", prefix=key, delimiter="", key_marker=key, version_id_marker="",
        max_keys=1000, encoding_type=None, entries=[record(key)]))
    upload = UploadRecord(upload_id="u1", bucket="b", key=key, initiated_at=1.0,
                          owner_id="o", owner_name="n")
    uploads = list_uploads_result(UploadsPage(
        bucket="b", prefix=key, delimiter="", key_marker=key, upload_id_marker="",
        max_uploads=1000, encoding_type=None, uploads=[upload], common_prefixes=[key],
        is_truncated=False, next_key_marker="", next_upload_id_marker=""))
    initiated = initiate_result("b", key, "u1")
    missing = error_document("NoSuchKey", "The specified key does not exist.", "r", "h",
                             {"Key": key})
    for body in (versions, uploads, initiated, missing):
        well_formed_but_for_references(body)


def test_surrogates_never_fail_a_document() -> None:
    body = error_document("InvalidArgument", "m", "r", "h", {"ArgumentValue": "a\udcffb"})
    assert b"a&#xDCFF;b" in body
