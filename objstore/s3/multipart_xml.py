"""XML of the multipart operations (lxml): the CompleteMultipartUpload request body, and
the InitiateMultipartUploadResult, CopyPartResult, CompleteMultipartUploadResult,
ListPartsResult and ListMultipartUploadsResult documents, in AWS's element order.

Pure functions of plain data; no Twisted, no I/O. The request parser enforces a size limit,
refuses DTDs and entities (no XXE), and raises S3Error("MalformedXML") on anything
malformed, before anything is looked up or changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from lxml import etree

from objstore.engine.multipart import MAX_PART_NUMBER, RequestedPart
from objstore.errors import S3Error
from objstore.meta.records import PartRecord, UploadRecord
from objstore.s3.params import part_number
from objstore.s3.xml import iso8601, parse_document, s3_root, serialize, sub_element

# 10,000 parts with an ETag and a SHA-256 each take about 1.7 MB.
MAX_COMPLETE_XML_BYTES = 4 * 1024 * 1024
CHECKSUM_ELEMENTS = {
    "ChecksumCRC32": "crc32",
    "ChecksumCRC32C": "crc32c",
    "ChecksumCRC64NVME": "crc64nvme",
    "ChecksumSHA1": "sha1",
    "ChecksumSHA256": "sha256",
}
_ELEMENT_OF = {algorithm: name for name, algorithm in CHECKSUM_ELEMENTS.items()}


# -- the request body -----------------------------------------------------------------


def parse_complete(body: bytes) -> list[RequestedPart]:
    """The Part entries of a CompleteMultipartUpload body, in document order."""
    if not body.strip():
        raise S3Error("MalformedXML", "The request body is empty.")
    root = parse_document(body, "CompleteMultipartUpload", max_bytes=MAX_COMPLETE_XML_BYTES)
    parts = [_parse_part(child) for child in root if _local(child) == "Part"]
    if not parts:
        raise S3Error("MalformedXML", "The list of parts is empty.")
    if len(parts) > MAX_PART_NUMBER:
        raise S3Error("MalformedXML", f"More than {MAX_PART_NUMBER} parts.")
    return parts


def _parse_part(element: etree._Element) -> RequestedPart:
    fields = {_local(child): (child.text or "").strip() for child in element
              if isinstance(child.tag, str)}
    number_text, etag = fields.get("PartNumber"), fields.get("ETag")
    if not number_text or etag is None or not (number_text.isascii() and number_text.isdigit()):
        raise S3Error("MalformedXML", "Each Part needs a PartNumber and an ETag.")
    number = part_number(number_text)  # digits, but maybe out of range: InvalidArgument
    checksums = {alg: fields[name] for name, alg in CHECKSUM_ELEMENTS.items() if name in fields}
    return RequestedPart(number, etag, checksums)


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname if isinstance(element.tag, str) else ""


# -- response documents ---------------------------------------------------------------


def _checksums(parent: etree._Element, checksums: Mapping[str, str]) -> None:
    for algorithm, value in sorted(checksums.items()):
        name = _ELEMENT_OF.get(algorithm)
        if name is not None:
            sub_element(parent, name, value)


def _identity(parent: etree._Element, tag: str, user_id: str, name: str) -> None:
    element = sub_element(parent, tag)
    sub_element(element, "ID", user_id)
    sub_element(element, "DisplayName", name)


def initiate_result(bucket: str, key: str, upload_id: str) -> bytes:
    root = s3_root("InitiateMultipartUploadResult")
    sub_element(root, "Bucket", bucket)
    sub_element(root, "Key", key)
    sub_element(root, "UploadId", upload_id)
    return serialize(root)


def copy_part_result(part: PartRecord) -> bytes:
    root = s3_root("CopyPartResult")
    sub_element(root, "ETag", f'"{part.etag}"')
    sub_element(root, "LastModified", iso8601(part.last_modified))
    _checksums(root, part.checksums)
    return serialize(root)


def complete_result(
    location: str, bucket: str, key: str, etag: str, checksums: Mapping[str, str],
    checksum_type: str | None,
) -> bytes:
    root = s3_root("CompleteMultipartUploadResult")
    sub_element(root, "Location", location)
    sub_element(root, "Bucket", bucket)
    sub_element(root, "Key", key)
    sub_element(root, "ETag", f'"{etag}"')
    _checksums(root, checksums)
    if checksum_type and checksums:
        sub_element(root, "ChecksumType", checksum_type)
    return serialize(root)


@dataclass(frozen=True)
class PartsPage:
    upload: UploadRecord
    parts: Sequence[PartRecord]
    marker: int
    max_parts: int
    is_truncated: bool


def list_parts_result(page: PartsPage) -> bytes:
    upload = page.upload
    root = s3_root("ListPartsResult")
    sub_element(root, "Bucket", upload.bucket)
    sub_element(root, "Key", upload.key)
    sub_element(root, "UploadId", upload.upload_id)
    sub_element(root, "PartNumberMarker", str(page.marker))
    last = page.parts[-1].part_number if page.parts else page.marker
    sub_element(root, "NextPartNumberMarker", str(last))
    sub_element(root, "MaxParts", str(page.max_parts))
    sub_element(root, "IsTruncated", "true" if page.is_truncated else "false")
    for part in page.parts:
        item = sub_element(root, "Part")
        sub_element(item, "PartNumber", str(part.part_number))
        sub_element(item, "LastModified", iso8601(part.last_modified))
        sub_element(item, "ETag", f'"{part.etag}"')
        sub_element(item, "Size", str(part.size))
        _checksums(item, part.checksums)
    _identity(root, "Initiator", upload.owner_id, upload.owner_name)
    _identity(root, "Owner", upload.owner_id, upload.owner_name)
    sub_element(root, "StorageClass", upload.storage_class)
    _upload_checksum_mode(root, upload)
    return serialize(root)


def _upload_checksum_mode(parent: etree._Element, upload: UploadRecord) -> None:
    if upload.checksum_algorithm:
        sub_element(parent, "ChecksumAlgorithm", upload.checksum_algorithm.upper())
        checksum_type = upload.extra.get("checksum_type")
        if checksum_type:
            sub_element(parent, "ChecksumType", str(checksum_type))


@dataclass(frozen=True)
class UploadsPage:
    bucket: str
    prefix: str
    delimiter: str
    key_marker: str
    upload_id_marker: str
    max_uploads: int
    encoding_type: str | None
    uploads: Sequence[UploadRecord]
    common_prefixes: Sequence[str]
    is_truncated: bool
    next_key_marker: str
    next_upload_id_marker: str


def list_uploads_result(page: UploadsPage) -> bytes:
    encode: Callable[[str], str] = (
        (lambda s: quote(s, safe="/")) if page.encoding_type == "url" else (lambda s: s)
    )
    root = s3_root("ListMultipartUploadsResult")
    sub_element(root, "Bucket", page.bucket)
    sub_element(root, "KeyMarker", encode(page.key_marker))
    sub_element(root, "UploadIdMarker", page.upload_id_marker)
    sub_element(root, "NextKeyMarker", encode(page.next_key_marker))
    sub_element(root, "Prefix", encode(page.prefix))
    if page.delimiter:
        sub_element(root, "Delimiter", encode(page.delimiter))
    sub_element(root, "NextUploadIdMarker", page.next_upload_id_marker)
    sub_element(root, "MaxUploads", str(page.max_uploads))
    sub_element(root, "IsTruncated", "true" if page.is_truncated else "false")
    for upload in page.uploads:
        item = sub_element(root, "Upload")
        sub_element(item, "Key", encode(upload.key))
        sub_element(item, "UploadId", upload.upload_id)
        _identity(item, "Initiator", upload.owner_id, upload.owner_name)
        _identity(item, "Owner", upload.owner_id, upload.owner_name)
        sub_element(item, "StorageClass", upload.storage_class)
        sub_element(item, "Initiated", iso8601(upload.initiated_at))
        _upload_checksum_mode(item, upload)
    for prefix in page.common_prefixes:
        sub_element(sub_element(root, "CommonPrefixes"), "Prefix", encode(prefix))
    if page.encoding_type:
        sub_element(root, "EncodingType", page.encoding_type)
    return serialize(root)
