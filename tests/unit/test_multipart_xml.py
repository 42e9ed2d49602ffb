"""The CompleteMultipartUpload parser (refusals before anything is looked up) and the
multipart response documents."""

from __future__ import annotations

import pytest
from lxml import etree

from objstore.engine.multipart import RequestedPart
from objstore.errors import S3Error
from objstore.meta.records import PartRecord, UploadRecord
from objstore.s3.multipart_xml import (
    MAX_COMPLETE_XML_BYTES,
    PartsPage,
    UploadsPage,
    complete_result,
    copy_part_result,
    initiate_result,
    list_parts_result,
    list_uploads_result,
    parse_complete,
)
from objstore.s3.xml import S3_NS

NS = {"s": S3_NS}


def doc(parts: str, root: str = "CompleteMultipartUpload") -> bytes:
    return f'<{root} xmlns="{S3_NS}">{parts}</{root}>'.encode()


def test_parse_complete() -> None:
    body = doc(
        '<Part><PartNumber>1</PartNumber><ETag>"aa"</ETag>'
        "<ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>\n"
        "<Part><ETag>bb</ETag><PartNumber> 2 </PartNumber>"
        "<ChecksumSHA256>cw==</ChecksumSHA256><ChecksumCRC64NVME>x</ChecksumCRC64NVME></Part>"
    )
    assert parse_complete(body) == [
        RequestedPart(1, '"aa"', {"crc32": "AAAAAA=="}),
        RequestedPart(2, "bb", {"sha256": "cw==", "crc64nvme": "x"}),
    ]


def test_parse_complete_without_namespace() -> None:
    body = b"<CompleteMultipartUpload><Part><PartNumber>3</PartNumber><ETag>e</ETag></Part>" \
           b"</CompleteMultipartUpload>"
    assert parse_complete(body) == [RequestedPart(3, "e")]


@pytest.mark.parametrize("body", [
    b"",
    b"   ",
    b"<CompleteMultipartUpload",
    doc(""),
    doc("<Part><PartNumber>1</PartNumber><ETag>e</ETag></Part>", root="Other"),
    doc("<Part><ETag>e</ETag></Part>"),
    doc("<Part><PartNumber>1</PartNumber></Part>"),
    doc("<Part><PartNumber>one</PartNumber><ETag>e</ETag></Part>"),
    doc("<Part><PartNumber>-1</PartNumber><ETag>e</ETag></Part>"),
    doc("<Part><PartNumber>²</PartNumber><ETag>e</ETag></Part>"),  # isdigit(), int() fails
    doc("<Part><PartNumber>٣</PartNumber><ETag>e</ETag></Part>"),
    b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "boom">]><CompleteMultipartUpload/>',
    b"<CompleteMultipartUpload>" + b" " * MAX_COMPLETE_XML_BYTES + b"</CompleteMultipartUpload>",
    doc("<Part><PartNumber>1</PartNumber><ETag>e</ETag></Part>" * 10001),
])
def test_malformed_complete_bodies(body: bytes) -> None:
    with pytest.raises(S3Error) as caught:
        parse_complete(body)
    assert caught.value.code == "MalformedXML"


@pytest.mark.parametrize("number", ["0", "10001", "9" * 5000])
def test_part_numbers_out_of_range(number: str) -> None:
    with pytest.raises(S3Error) as caught:
        parse_complete(doc(f"<Part><PartNumber>{number}</PartNumber><ETag>e</ETag></Part>"))
    assert caught.value.code == "InvalidArgument"


def test_ten_thousand_parts_with_checksums_fit() -> None:
    entry = ('<Part><ETag>"0123456789abcdef0123456789abcdef"</ETag><PartNumber>{}</PartNumber>'
             "<ChecksumSHA256>47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=</ChecksumSHA256>"
             "</Part>")
    body = doc("".join(entry.format(n) for n in range(1, 10001)))
    assert len(parse_complete(body)) == 10000


def parsed(body: bytes) -> etree._Element:
    return etree.fromstring(body)


def text(root: etree._Element, path: str) -> list[str]:
    return [e.text or "" for e in root.findall(path, NS)]


def test_initiate_and_copy_and_complete_results() -> None:
    root = parsed(initiate_result("b", "k/ü", "up-1"))
    assert (text(root, "s:Bucket"), text(root, "s:Key"), text(root, "s:UploadId")) == (
        ["b"], ["k/ü"], ["up-1"])
    part = PartRecord("up-1", 1, "blob", 10, "ab" * 16, 0.5, {"crc32c": "AAAAAA=="})
    root = parsed(copy_part_result(part))
    assert text(root, "s:ETag") == [f'"{"ab" * 16}"']
    assert text(root, "s:LastModified") == ["1970-01-01T00:00:00.500Z"]
    assert text(root, "s:ChecksumCRC32C") == ["AAAAAA=="]
    root = parsed(complete_result("http://h/b/k", "b", "k", "ff-2", {"sha1": "x-2"}, "COMPOSITE"))
    assert [etree.QName(e).localname for e in root] == [
        "Location", "Bucket", "Key", "ETag", "ChecksumSHA1", "ChecksumType"]
    root = parsed(complete_result("http://h/b/k", "b", "k", "ff-2", {}, None))
    assert text(root, "s:ChecksumType") == []


def test_list_parts_result() -> None:
    upload = UploadRecord("up-1", "b", "k", 1.0, owner_id="u1", owner_name="alice",
                          checksum_algorithm="crc32", extra={"checksum_type": "COMPOSITE"})
    parts = [PartRecord("up-1", n, f"blob{n}", n, "cd" * 16, 2.0, {"crc32": "AAAAAA=="})
             for n in (3, 4)]
    root = parsed(list_parts_result(PartsPage(upload, parts, 2, 2, True)))
    assert text(root, "s:PartNumberMarker") == ["2"]
    assert text(root, "s:NextPartNumberMarker") == ["4"]
    assert text(root, "s:MaxParts") == ["2"] and text(root, "s:IsTruncated") == ["true"]
    assert text(root, "s:Part/s:PartNumber") == ["3", "4"]
    assert text(root, "s:Part/s:Size") == ["3", "4"]
    assert text(root, "s:Part/s:ChecksumCRC32") == ["AAAAAA==", "AAAAAA=="]
    assert text(root, "s:Initiator/s:DisplayName") == ["alice"]
    assert text(root, "s:Owner/s:ID") == ["u1"]
    assert text(root, "s:StorageClass") == ["STANDARD"]
    assert text(root, "s:ChecksumAlgorithm") == ["CRC32"]
    assert text(root, "s:ChecksumType") == ["COMPOSITE"]


def uploads_page(**overrides: object) -> UploadsPage:
    values: dict[str, object] = dict(
        bucket="b", prefix="", delimiter="", key_marker="", upload_id_marker="",
        max_uploads=1000, encoding_type=None, uploads=[], common_prefixes=[],
        is_truncated=False, next_key_marker="", next_upload_id_marker="",
    )
    values.update(overrides)
    return UploadsPage(**values)  # type: ignore[arg-type]


def test_list_uploads_result() -> None:
    uploads = [UploadRecord("up-1", "b", "a b+c", 3.0, owner_name="bob")]
    root = parsed(list_uploads_result(uploads_page(
        uploads=uploads, common_prefixes=["dir/"], prefix="", delimiter="/",
        is_truncated=True, next_key_marker="dir/")))
    assert text(root, "s:Upload/s:Key") == ["a b+c"]
    assert text(root, "s:Upload/s:Initiator/s:DisplayName") == ["bob"]
    assert text(root, "s:Upload/s:Initiated") == ["1970-01-01T00:00:03.000Z"]
    assert text(root, "s:CommonPrefixes/s:Prefix") == ["dir/"]
    assert text(root, "s:Delimiter") == ["/"] and text(root, "s:IsTruncated") == ["true"]
    assert text(root, "s:EncodingType") == []


def test_list_uploads_result_url_encoding_and_no_empty_delimiter() -> None:
    uploads = [UploadRecord("up-1", "b", "a b+ü", 3.0)]
    root = parsed(list_uploads_result(uploads_page(
        uploads=uploads, encoding_type="url", prefix="a b", key_marker="a a",
        common_prefixes=[])))
    assert text(root, "s:Upload/s:Key") == ["a%20b%2B%C3%BC"]
    assert text(root, "s:Prefix") == ["a%20b"] and text(root, "s:KeyMarker") == ["a%20a"]
    assert text(root, "s:EncodingType") == ["url"]
    assert root.find("s:Delimiter", NS) is None
