"""S3 XML documents: rendering responses and parsing request bodies (lxml).

Any text can be rendered. An S3 key may hold characters that XML 1.0 cannot carry (U+0001
to U+001F but tab, newline and carriage return; U+FFFE, U+FFFF): AWS stores such keys and
writes each of those characters as a numeric character reference (`&#x1;`), which strict
XML parsers refuse; clients that list such keys ask for `encoding-type=url` (the AWS SDKs
do for object listings). `sub_element` does the same, so no key, prefix or echoed value
can fail a response.

Pure functions of plain data; no Twisted. Request parsers enforce a size limit and refuse
DTDs and entities (no XXE), raising S3Error("MalformedXML") on anything unexpected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from urllib.parse import quote

from lxml import etree

from objstore.errors import S3Error
from objstore.http.error_xml import serialize, sub_element
from objstore.meta.listing_queries import ListingEntry, listed_checksum_algorithm
from objstore.meta.records import ObjectRecord
from objstore.utc_dates import utc_moment

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_XML_BYTES = 1024 * 1024
# No entities, no network, no DTD. Documents are read as UTF-8 whatever they declare (every
# SDK sends UTF-8; anything else is MalformedXML): the parsers' refusal of "<!DOCTYPE" and
# "<!ENTITY" in the raw bytes is then complete, where a UTF-16 document would hide them.
SAFE_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
    remove_blank_text=True, encoding="utf-8",
)


def iso8601(timestamp: float) -> str:
    """S3's timestamp format in XML: 2006-02-03T16:45:09.000Z."""
    moment = utc_moment(timestamp)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@lru_cache(maxsize=4096)  # Last-Modified of the objects read most: formatted once each
def http_date(timestamp: float) -> str:
    moment = utc_moment(timestamp)
    return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")


def s3_root(tag: str) -> etree._Element:
    """The root element of a response document, in the S3 namespace."""
    return etree.Element(tag, nsmap={None: S3_NS})


def list_buckets_document(
    owner_id: str, owner_name: str, buckets: Iterable[tuple[str, float, str]],
    continuation_token: str | None = None, prefix: str | None = None,
) -> bytes:
    root = s3_root("ListAllMyBucketsResult")
    owner = sub_element(root, "Owner")
    sub_element(owner, "ID", owner_id)
    sub_element(owner, "DisplayName", owner_name)
    container = sub_element(root, "Buckets")
    for name, created_at, region in buckets:
        bucket = sub_element(container, "Bucket")
        sub_element(bucket, "Name", name)
        sub_element(bucket, "CreationDate", iso8601(created_at))
        sub_element(bucket, "BucketRegion", region)
    if continuation_token:
        sub_element(root, "ContinuationToken", continuation_token)
    if prefix is not None:
        sub_element(root, "Prefix", prefix)
    return serialize(root)


def location_document(region: str) -> bytes:
    root = s3_root("LocationConstraint")
    if region != "us-east-1":
        root.text = region
    return serialize(root)


def parse_document(
    body: bytes, expected_root: str, *, max_bytes: int = MAX_XML_BYTES
) -> etree._Element:
    """Parse a request body whose root element must be `expected_root` (namespace ignored)."""
    if len(body) > max_bytes:
        raise S3Error("MalformedXML", "The XML document is too large.")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise S3Error("MalformedXML", "DTDs and entities are not accepted.")
    try:
        root = etree.fromstring(body, SAFE_PARSER)
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
    item = sub_element(parent, "Contents")
    sub_element(item, "Key", encode(record.key))
    sub_element(item, "LastModified", iso8601(record.last_modified))
    sub_element(item, "ETag", f'"{record.etag}"')
    sub_element(item, "Size", str(record.size))
    sub_element(item, "StorageClass", record.storage_class)
    algorithm = listed_checksum_algorithm(record)
    if algorithm:
        sub_element(item, "ChecksumAlgorithm", algorithm)
        if record.checksum_type:
            sub_element(item, "ChecksumType", record.checksum_type)
    if fetch_owner:
        owner = sub_element(item, "Owner")
        sub_element(owner, "ID", record.owner_id)
        sub_element(owner, "DisplayName", record.owner_name)


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
    root = s3_root("ListBucketResult")
    sub_element(root, "Name", bucket)
    sub_element(root, "Prefix", encode(prefix))
    if version == 1:
        sub_element(root, "Marker", encode(fields.get("Marker", "")))
        if "NextMarker" in fields:
            sub_element(root, "NextMarker", encode(fields["NextMarker"]))
    else:
        for name in ("ContinuationToken", "NextContinuationToken", "StartAfter"):
            if name in fields:
                value = fields[name]
                sub_element(root, name, encode(value) if name == "StartAfter" else value)
        sub_element(root, "KeyCount", fields["KeyCount"])
    sub_element(root, "MaxKeys", str(max_keys))
    if delimiter:
        sub_element(root, "Delimiter", encode(delimiter))
    if encoding_type:
        sub_element(root, "EncodingType", encoding_type)
    sub_element(root, "IsTruncated", "true" if is_truncated else "false")
    for record in contents:
        _contents(root, record, fetch_owner, encode)
    for common in common_prefixes:
        sub_element(sub_element(root, "CommonPrefixes"), "Prefix", encode(common))
    return serialize(root)
