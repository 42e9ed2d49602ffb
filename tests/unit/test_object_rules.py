"""The pure rules of the object operations: conditional-write headers, copy directives and
the self-copy rule, partNumber spans, DeleteObjects integrity headers, attribute names and
ACL headers. No reactor, no sockets."""

from typing import Any

import pytest

from objstore.engine.objects import ObjectAttrs
from objstore.errors import S3Error
from objstore.meta.records import ObjectRecord, PartRef, WritePrecondition
from objstore.s3.acl_headers import check_acl_headers
from objstore.s3.attributes import parse_object_attributes, parts_page
from objstore.s3.copy import (
    CopyDirectives,
    copied_attrs,
    parse_directives,
    self_copy_refused,
)
from objstore.s3.copy_source import CopySource
from objstore.s3.delete_objects import has_integrity_header
from objstore.s3.objects import (
    part_range,
    system_headers,
    write_precondition,
)
from objstore.s3.objects_xml import PartsPage
from objstore.s3.route_needs import attributes_needs, delete_key_need, route_needs


def record(**changes: Any) -> ObjectRecord:
    values: dict[str, Any] = dict(bucket="b", key="k", version_id="null", blob_id="x",
                                  size=10, etag="e", last_modified=1.0)
    values.update(changes)
    return ObjectRecord(**values)


def code_of(fn: Any, *args: Any) -> str:
    with pytest.raises(S3Error) as caught:
        fn(*args)
    return caught.value.code


# -- conditional writes ------------------------------------------------------------------


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, None),
    ({"if-none-match": "*"}, WritePrecondition(if_absent=True)),
    ({"if-none-match": " * "}, WritePrecondition(if_absent=True)),
    ({"if-match": '"abc"'}, WritePrecondition(if_match_etag="abc")),
    ({"if-match": "abc-3"}, WritePrecondition(if_match_etag="abc-3")),
    ({"if-match": '"abc"', "if-none-match": "*"},
     WritePrecondition(if_absent=True, if_match_etag="abc")),
    ({"if-none-match": '"abc"'}, WritePrecondition(if_none_match_etag="abc")),
    ({"if-none-match": 'W/"abc-2"'}, WritePrecondition(if_none_match_etag="abc-2")),
])
def test_write_preconditions(headers: dict[str, str], expected: WritePrecondition) -> None:
    assert write_precondition(headers) == expected


@pytest.mark.parametrize("headers", [{"if-match": "*"}, {"if-match": '""'}])
def test_unsupported_write_conditions(headers: dict[str, str]) -> None:
    assert code_of(write_precondition, headers) == "NotImplemented"


@pytest.mark.parametrize("headers", [{"if-none-match": ""}, {"if-none-match": '""'}])
def test_empty_if_none_match_is_invalid(headers: dict[str, str]) -> None:
    assert code_of(write_precondition, headers) == "InvalidArgument"


# -- partNumber --------------------------------------------------------------------------


def test_part_ranges() -> None:
    assert part_range(record(), 1) == (0, 9)
    assert part_range(record(size=0), 1) is None
    assert code_of(part_range, record(), 2) == "InvalidPartNumber"
    parts = tuple(PartRef(n, f"b{n}", size, "e") for n, size in ((1, 5), (2, 7), (3, 1)))
    multi = record(parts=parts, size=13, blob_id=None)
    assert [part_range(multi, n) for n in (1, 2, 3)] == [(0, 4), (5, 11), (12, 12)]
    assert code_of(part_range, multi, 4) == "InvalidPartNumber"


# -- CopyObject --------------------------------------------------------------------------


def test_directives() -> None:
    assert parse_directives({}) == CopyDirectives("COPY", "COPY")
    assert parse_directives({"x-amz-metadata-directive": "REPLACE",
                             "x-amz-tagging-directive": "REPLACE"}) == \
        CopyDirectives("REPLACE", "REPLACE")
    assert code_of(parse_directives, {"x-amz-metadata-directive": "replace"}) == \
        "InvalidArgument"
    assert code_of(parse_directives, {"x-amz-tagging-directive": "MERGE"}) == "InvalidArgument"


SOURCE = record(content_type="text/plain", user_metadata={"a": "1"},
                system_headers={"cache-control": "no-cache"}, tags={"t": "1"},
                storage_class="STANDARD_IA", checksums={"crc32": "x"})
REQUESTED = ObjectAttrs(content_type="application/json", user_metadata={"b": "2"},
                        system_headers={}, storage_class="STANDARD", tags={"n": "2"},
                        checksums={"sha256": "claimed"})


def test_copy_directive_keeps_the_source_description() -> None:
    attrs = copied_attrs(SOURCE, CopyDirectives(), REQUESTED)
    assert attrs == ObjectAttrs(content_type="text/plain", user_metadata={"a": "1"},
                                system_headers={"cache-control": "no-cache"},
                                storage_class="STANDARD", tags={"t": "1"}, checksums={})


def test_replace_directives_take_the_request() -> None:
    attrs = copied_attrs(SOURCE, CopyDirectives("REPLACE", "REPLACE"), REQUESTED)
    assert attrs == ObjectAttrs(content_type="application/json", user_metadata={"b": "2"},
                                system_headers={}, storage_class="STANDARD", tags={"n": "2"},
                                checksums={})
    mixed = copied_attrs(SOURCE, CopyDirectives("REPLACE", "COPY"), REQUESTED)
    assert mixed.tags == {"t": "1"} and mixed.user_metadata == {"b": "2"}


SELF = CopySource("b", "k", None)


@pytest.mark.parametrize(("source", "rec", "directives", "headers", "refused"), [
    (SELF, record(), CopyDirectives(), {}, True),
    (SELF, record(), CopyDirectives(tagging="REPLACE"), {}, True),
    (SELF, record(), CopyDirectives(), {"x-amz-storage-class": "STANDARD"}, True),
    (SELF, record(), CopyDirectives("REPLACE"), {}, False),
    (SELF, record(), CopyDirectives(), {"x-amz-storage-class": "GLACIER"}, False),
    (SELF, record(), CopyDirectives(), {"x-amz-server-side-encryption": "AES256"}, False),
    (SELF, record(), CopyDirectives(), {"x-amz-website-redirect-location": "/x"}, False),
    (CopySource("b", "other", None), record(), CopyDirectives(), {}, False),
    (CopySource("c", "k", None), record(), CopyDirectives(), {}, False),
    (CopySource("b", "k", "v1"), record(version_id="v1", is_latest=False), CopyDirectives(),
     {}, False),
    (CopySource("b", "k", "v2"), record(version_id="v2"), CopyDirectives(), {}, True),
])
def test_self_copy_rule(source: CopySource, rec: ObjectRecord, directives: CopyDirectives,
                        headers: dict[str, str], refused: bool) -> None:
    assert self_copy_refused(source, rec, "b", "k", directives, headers) is refused


# -- DeleteObjects -----------------------------------------------------------------------


@pytest.mark.parametrize(("headers", "ok"), [
    ({}, False),
    ({"content-type": "application/xml"}, False),
    ({"x-amz-checksum-algorithm": "CRC32"}, False),
    ({"content-md5": "x"}, True),
    ({"x-amz-checksum-crc32": "x"}, True),
    ({"x-amz-checksum-crc64nvme": "x"}, True),
    ({"x-amz-trailer": "x-amz-checksum-crc32c"}, True),
    ({"x-amz-trailer": "x-amz-meta-foo"}, False),
])
def test_integrity_header_rule(headers: dict[str, str], ok: bool) -> None:
    assert has_integrity_header(headers) is ok


def test_delete_actions() -> None:
    assert delete_key_need("b", "k", None).action == "s3:DeleteObject"
    assert delete_key_need("b", "k", "null").action == "s3:DeleteObjectVersion"
    assert delete_key_need("b", "k", None).resource == "arn:aws:s3:::b/k"


# -- GetObjectAttributes -----------------------------------------------------------------


def test_attribute_names() -> None:
    assert parse_object_attributes("ETag, ObjectSize") == {"ETag", "ObjectSize"}
    assert parse_object_attributes("ETag,Checksum,ObjectParts,StorageClass,ObjectSize") == {
        "ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"}
    for bad in (None, "", " , ", "ETag,Colour", "etag"):
        assert code_of(parse_object_attributes, bad) == "InvalidArgument"


def test_parts_paging_headers() -> None:
    assert parts_page({}) == PartsPage(1000, 0)
    assert parts_page({"x-amz-max-parts": "5", "x-amz-part-number-marker": "7"}) == \
        PartsPage(5, 7)
    assert parts_page({"x-amz-max-parts": "5000"}) == PartsPage(1000, 0)
    assert code_of(parts_page, {"x-amz-max-parts": "-1"}) == "InvalidArgument"
    assert code_of(parts_page, {"x-amz-part-number-marker": "x"}) == "InvalidArgument"


def test_attribute_actions() -> None:
    def actions(query: dict[str, str]) -> tuple[str, ...]:
        needs = route_needs("s3:GetObjectAttributes", "b", "k", query, lambda _: None,
                            attributes_needs)
        return tuple(need.action for need in needs)
    assert actions({}) == ("s3:GetObjectAttributes", "s3:GetObject")
    assert actions({"versionId": "v"}) == ("s3:GetObjectVersionAttributes",
                                           "s3:GetObjectVersion")


# -- ACL headers -------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {}, {"x-amz-acl": "private"}, {"x-amz-acl": "bucket-owner-full-control"},
])
def test_owner_only_acl_headers_pass(headers: dict[str, str]) -> None:
    check_acl_headers(headers)


@pytest.mark.parametrize("headers", [
    {"x-amz-acl": "public-read"}, {"x-amz-acl": "authenticated-read"},
    {"x-amz-grant-read": "uri=x"}, {"x-amz-grant-full-control": "id=u-1"},
])
def test_other_acl_headers_are_refused(headers: dict[str, str]) -> None:
    assert code_of(check_acl_headers, headers) == "AccessControlListNotSupported"


@pytest.mark.parametrize(("sent", "stored"), [
    ("aws-chunked", None),
    ("AWS-Chunked", None),
    ("gzip,aws-chunked", "gzip"),
    ("aws-chunked, gzip", "gzip"),
    ("gzip, br", "gzip,br"),
    ("identity", "identity"),
])
def test_aws_chunked_is_not_stored_as_content_encoding(sent: str, stored: str | None) -> None:
    found = system_headers({"content-encoding": sent, "cache-control": "no-cache"})
    assert found.get("content-encoding") == stored
    assert found["cache-control"] == "no-cache"
