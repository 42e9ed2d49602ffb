"""The XML and headers of versioning, object lock and tagging, as pure functions:
documents parsed and refused as AWS refuses them, responses rendered in AWS's shape."""

from __future__ import annotations

import datetime

import pytest
from lxml import etree

from objstore.engine.lock_rules import DefaultRetention, LockConfiguration, LockRequest, Retention
from objstore.errors import S3Error
from objstore.meta.records import ObjectRecord
from objstore.s3 import listing_xml
from objstore.s3 import versioning_xml as vx
from objstore.s3.lock_headers import has_integrity_header, lock_request, retention_headers

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
FAR = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC).timestamp()


def code(fn: object, *args: object) -> str:
    with pytest.raises(S3Error) as caught:
        fn(*args)  # type: ignore[operator]
    return caught.value.code


def test_versioning_documents() -> None:
    body = b'<VersioningConfiguration xmlns="%s"><Status>Suspended</Status>' \
           b"</VersioningConfiguration>" % NS.strip("{}").encode()
    assert vx.parse_versioning(body) == "Suspended"
    assert vx.parse_versioning(b"<VersioningConfiguration><Status>Enabled</Status>"
                               b"<MfaDelete>Disabled</MfaDelete></VersioningConfiguration>") \
        == "Enabled"
    assert code(vx.parse_versioning, b"") == "MalformedXML"
    assert code(vx.parse_versioning, b"<VersioningConfiguration><Status>Enabled</Status>"
                b"<Status>Enabled</Status></VersioningConfiguration>") == "MalformedXML"
    assert code(vx.parse_versioning, b"<VersioningConfiguration><Other/>"
                b"</VersioningConfiguration>") == "MalformedXML"
    assert b"<Status>" not in vx.versioning_document("Disabled")
    assert b"<Status>Enabled</Status>" in vx.versioning_document("Enabled")


def test_lock_configuration_documents() -> None:
    config = LockConfiguration(DefaultRetention("COMPLIANCE", years=3))
    body = vx.lock_configuration_document(config)
    assert vx.parse_lock_configuration(body) == config
    enabled_only = vx.lock_configuration_document(LockConfiguration())
    assert b"<Rule>" not in enabled_only
    assert vx.parse_lock_configuration(enabled_only) == LockConfiguration()
    assert code(vx.parse_lock_configuration, b"<ObjectLockConfiguration><Rule>"
                b"<DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention>"
                b"</Rule></ObjectLockConfiguration>") == "MalformedXML"
    assert code(vx.parse_lock_configuration, b"<ObjectLockConfiguration><ObjectLockEnabled>"
                b"Enabled</ObjectLockEnabled><Rule/></ObjectLockConfiguration>") == "MalformedXML"
    for days in ("\u0663", "9" * 5000, "1_0"):  # int() took the first two and raised on more
        body = ("<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule>"
                f"<DefaultRetention><Mode>GOVERNANCE</Mode><Days>{days}</Days>"
                "</DefaultRetention></Rule></ObjectLockConfiguration>").encode()
        assert code(vx.parse_lock_configuration, body) == "MalformedXML"


def test_retention_and_legal_hold_documents() -> None:
    record = ObjectRecord(bucket="b", key="k", version_id="v", blob_id=None, size=0, etag="",
                          last_modified=0.0, retention_mode="GOVERNANCE",
                          retain_until_date=FAR)
    assert vx.parse_retention(vx.retention_document(record)) == Retention("GOVERNANCE", FAR)
    assert vx.parse_retention(b"<Retention/>") == Retention()
    assert vx.parse_retention(b"<Retention><Mode>COMPLIANCE</Mode><RetainUntilDate>"
                              b"2099-01-01T00:00:00.123456+00:00</RetainUntilDate>"
                              b"</Retention>") == Retention("COMPLIANCE", FAR + 0.123)
    assert code(vx.parse_retention, b"<Retention><RetainUntilDate>2099-01-01T00:00:00Z"
                b"</RetainUntilDate></Retention>") == "MalformedXML"
    assert vx.parse_legal_hold(vx.legal_hold_document("ON")) == "ON"
    assert code(vx.parse_legal_hold, b"<LegalHold><Status>on</Status></LegalHold>") == \
        "MalformedXML"
    assert code(vx.parse_legal_hold, b"<LegalHold/>") == "MalformedXML"


def test_tagging_documents() -> None:
    tags = [("a", "1"), ("b c", "")]
    body = vx.tagging_document(tags)
    assert vx.parse_tagging(body, 10, "Object tags") == dict(tags)
    assert vx.parse_tagging(b"<Tagging><TagSet/></Tagging>", 10, "Object tags") == {}
    many = vx.tagging_document([(f"k{i}", "v") for i in range(11)])
    assert vx.parse_tagging(many, 50, "Bucket tag count") == {f"k{i}": "v" for i in range(11)}
    assert code(vx.parse_tagging, many, 10, "Object tags") == "InvalidTag"
    assert code(vx.parse_tagging, b"<Tagging><TagSet><Other/></TagSet></Tagging>", 10,
                "x") == "MalformedXML"
    assert code(vx.parse_tagging, b"<!DOCTYPE x><Tagging/>", 10, "x") == "MalformedXML"


def entry(key: str, version_id: str, *, marker: bool = False,
          latest: bool = False) -> ObjectRecord:
    return ObjectRecord(bucket="b", key=key, version_id=version_id, blob_id=None, size=3,
                        etag="abc", last_modified=1_700_000_000.5, is_latest=latest,
                        is_delete_marker=marker, owner_id="u1", owner_name="alice")


def test_list_versions_document_interleaves_in_listing_order() -> None:
    listing = listing_xml.VersionsListing(
        bucket="b", prefix="p q", delimiter="/", key_marker="", version_id_marker="",
        max_keys=3, encoding_type="url",
        entries=[entry("p q1", "m", marker=True, latest=True), entry("p q1", "v1")],
        common_prefixes=["p q/"], is_truncated=True, next_key_marker="p q/",
    )
    root = etree.fromstring(listing_xml.list_versions_document(listing))
    names = [etree.QName(child).localname for child in root]
    assert names == ["Name", "Prefix", "KeyMarker", "VersionIdMarker", "NextKeyMarker",
                     "MaxKeys", "Delimiter", "EncodingType", "IsTruncated", "DeleteMarker",
                     "Version", "CommonPrefixes"]
    assert root.findtext(f"{NS}Prefix") == "p%20q"
    marker = root.find(f"{NS}DeleteMarker")
    assert marker is not None and marker.find(f"{NS}ETag") is None
    assert marker.findtext(f"{NS}IsLatest") == "true"
    assert marker.findtext(f"{NS}Owner/{NS}DisplayName") == "alice"
    version = root.find(f"{NS}Version")
    assert version is not None and version.findtext(f"{NS}ETag") == '"abc"'
    assert version.findtext(f"{NS}LastModified") == "2023-11-14T22:13:20.500Z"


def test_lock_request_headers() -> None:
    assert lock_request({}) == LockRequest()
    request = lock_request({"x-amz-object-lock-mode": "COMPLIANCE",
                            "x-amz-object-lock-retain-until-date": "2099-01-01T00:00:00Z",
                            "x-amz-object-lock-legal-hold": "OFF"})
    assert request == LockRequest("COMPLIANCE", FAR, "OFF")
    for headers in ({"x-amz-object-lock-mode": "GOVERNANCE"},
                    {"x-amz-object-lock-mode": "GOVERNANCE",
                     "x-amz-object-lock-retain-until-date": "tomorrow"},
                    {"x-amz-object-lock-legal-hold": "on"}):
        assert code(lock_request, headers) == "InvalidArgument"
    record = ObjectRecord(bucket="b", key="k", version_id="v", blob_id=None, size=0, etag="",
                          last_modified=0.0, retention_mode="COMPLIANCE",
                          retain_until_date=FAR)
    assert retention_headers(record) == {
        "x-amz-object-lock-mode": "COMPLIANCE",
        "x-amz-object-lock-retain-until-date": "2099-01-01T00:00:00.000Z"}


@pytest.mark.parametrize(("headers", "ok"), [
    ({}, False), ({"content-md5": "x"}, True), ({"x-amz-checksum-crc32": "x"}, True),
    ({"x-amz-checksum-algorithm": "CRC32"}, False),
    ({"x-amz-trailer": "x-amz-checksum-crc32c"}, True),
])
def test_integrity_headers(headers: dict[str, str], ok: bool) -> None:
    assert has_integrity_header(headers) is ok
