"""S3 XML documents: rendering responses and parsing request bodies (lxml).

Pure functions of plain data; no Twisted. Request parsers enforce a size limit and refuse
DTDs and entities (no XXE), raising S3Error("MalformedXML") on anything unexpected.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import quote

from lxml import etree

from objstore.errors import S3Error
from objstore.meta.listing_queries import ListingEntry, listed_checksum_algorithm
from objstore.meta.records import ObjectRecord

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_XML_BYTES = 1024 * 1024
_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
    remove_blank_text=True,
)


def iso8601(timestamp: float) -> str:
    """S3's timestamp format in XML: 2006-02-03T16:45:09.000Z."""
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def http_date(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")


def _serialize(root: etree._Element) -> bytes:
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def _sub(parent: etree._Element, tag: str, text: str | None = None) -> etree._Element:
    child = etree.SubElement(parent, tag)
    if text is not None:
        child.text = text
    return child


def error_document(
    code: str, message: str, request_id: str, host_id: str, fields: Mapping[str, str]
) -> bytes:
    root = etree.Element("Error")
    _sub(root, "Code", code)
    _sub(root, "Message", message)
    for name, value in fields.items():
        _sub(root, name, value)
    _sub(root, "RequestId", request_id)
    _sub(root, "HostId", host_id)
    return _serialize(root)


def list_buckets_document(
    owner_id: str, owner_name: str, buckets: Iterable[tuple[str, float, str]],
    continuation_token: str | None = None, prefix: str | None = None,
) -> bytes:
    root = etree.Element("ListAllMyBucketsResult", nsmap={None: S3_NS})
    owner = _sub(root, "Owner")
    _sub(owner, "ID", owner_id)
    _sub(owner, "DisplayName", owner_name)
    container = _sub(root, "Buckets")
    for name, created_at, region in buckets:
        bucket = _sub(container, "Bucket")
        _sub(bucket, "Name", name)
        _sub(bucket, "CreationDate", iso8601(created_at))
        _sub(bucket, "BucketRegion", region)
    if continuation_token:
        _sub(root, "ContinuationToken", continuation_token)
    if prefix is not None:
        _sub(root, "Prefix", prefix)
    return _serialize(root)


def location_document(region: str) -> bytes:
    root = etree.Element("LocationConstraint", nsmap={None: S3_NS})
    if region != "us-east-1":
        root.text = region
    return _serialize(root)


def parse_document(
    body: bytes, expected_root: str, *, max_bytes: int = MAX_XML_BYTES
) -> etree._Element:
    """Parse a request body whose root element must be `expected_root` (namespace ignored)."""
    if len(body) > max_bytes:
        raise S3Error("MalformedXML", "The XML document is too large.")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise S3Error("MalformedXML", "DTDs and entities are not accepted.")
    try:
        root = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as exc:
        raise S3Error("MalformedXML") from exc
    if etree.QName(root).localname != expected_root:
        raise S3Error("MalformedXML", f"Expected a {expected_root} document.")
    return root


def child_text(element: etree._Element, name: str) -> str | None:
    for child in element:
        if isinstance(child.tag, str) and etree.QName(child).localname == name:
            return child.text or ""
    return None


def parse_create_bucket(body: bytes) -> str | None:
    """The LocationConstraint of a CreateBucketConfiguration body (None when absent)."""
    if not body.strip():
        return None
    root = parse_document(body, "CreateBucketConfiguration")
    return child_text(root, "LocationConstraint")


def _contents(parent: etree._Element, record: ObjectRecord | ListingEntry, fetch_owner: bool,
              encode: Callable[[str], str]) -> None:
    item = _sub(parent, "Contents")
    _sub(item, "Key", encode(record.key))
    _sub(item, "LastModified", iso8601(record.last_modified))
    _sub(item, "ETag", f'"{record.etag}"')
    _sub(item, "Size", str(record.size))
    _sub(item, "StorageClass", record.storage_class)
    algorithm = listed_checksum_algorithm(record)
    if algorithm:
        _sub(item, "ChecksumAlgorithm", algorithm)
        if record.checksum_type:
            _sub(item, "ChecksumType", record.checksum_type)
    if fetch_owner:
        owner = _sub(item, "Owner")
        _sub(owner, "ID", record.owner_id)
        _sub(owner, "DisplayName", record.owner_name)


def list_objects_document(
    *,
    bucket: str,
    version: int,
    prefix: str,
    delimiter: str,
    max_keys: int,
    encoding_type: str | None,
    contents: Iterable[ObjectRecord | ListingEntry],
    common_prefixes: Iterable[str],
    is_truncated: bool,
    fields: Mapping[str, str],
    fetch_owner: bool,
) -> bytes:
    """ListBucketResult for V1 (fields: Marker, NextMarker) and V2 (fields: KeyCount,
    ContinuationToken, NextContinuationToken, StartAfter), in AWS's element order."""
    encode: Callable[[str], str] = (
        (lambda s: quote(s, safe="/")) if encoding_type == "url" else (lambda s: s)
    )
    root = etree.Element("ListBucketResult", nsmap={None: S3_NS})
    _sub(root, "Name", bucket)
    _sub(root, "Prefix", encode(prefix))
    if version == 1:
        _sub(root, "Marker", encode(fields.get("Marker", "")))
        if "NextMarker" in fields:
            _sub(root, "NextMarker", encode(fields["NextMarker"]))
    else:
        for name in ("ContinuationToken", "NextContinuationToken", "StartAfter"):
            if name in fields:
                value = fields[name]
                _sub(root, name, encode(value) if name == "StartAfter" else value)
        _sub(root, "KeyCount", fields["KeyCount"])
    _sub(root, "MaxKeys", str(max_keys))
    if delimiter:
        _sub(root, "Delimiter", encode(delimiter))
    if encoding_type:
        _sub(root, "EncodingType", encoding_type)
    _sub(root, "IsTruncated", "true" if is_truncated else "false")
    for record in contents:
        _contents(root, record, fetch_owner, encode)
    for common in common_prefixes:
        _sub(_sub(root, "CommonPrefixes"), "Prefix", encode(common))
    return _serialize(root)
