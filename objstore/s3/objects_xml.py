"""S3 XML of the object operations beyond the basic ones: the DeleteObjects request and its
DeleteResult, CopyObjectResult, GetObjectAttributesResponse and the AccessControlPolicy of
GetBucketAcl/GetObjectAcl (and its parsing for the Put variants).

Pure functions of plain data; no Twisted, no I/O. Parsing goes through
`objstore.s3.xml.parse_document` (size limit, no DTDs or entities) and raises S3Error on
anything that does not follow AWS's schema.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from lxml import etree

from objstore.errors import S3Error
from objstore.meta.records import ObjectRecord, PartRef
from objstore.s3.xml import child_text, iso8601, parse_document, s3_root, serialize, sub_element

MAX_DELETE_KEYS = 1000
# 1000 keys of 1024 bytes, each character possibly escaped (&amp; is 5 bytes), plus markup.
MAX_DELETE_XML_BYTES = 6 * 1024 * 1024
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
XSI_TYPE = f"{{{XSI_NS}}}type"
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}
_OBJECT_FIELDS = frozenset({"Key", "VersionId", "ETag", "LastModifiedTime", "Size"})
_COMPOSITE_SUFFIX = re.compile(r"-\d+$")


def _localname(element: etree._Element) -> str | None:
    """The tag's local name (`{namespace}Key` or `Key`: Key); None for a comment or a
    processing instruction."""
    tag = element.tag
    return tag.rpartition("}")[2] if isinstance(tag, str) else None


def checksum_element(algorithm: str) -> str:
    """The XML element (and SDK field) name of a stored checksum: crc32 -> ChecksumCRC32."""
    return "Checksum" + algorithm.upper()


# -- DeleteObjects -----------------------------------------------------------------------


@dataclass(frozen=True)
class DeleteEntry:
    """One <Object> of a Delete request. `conditional` is set when the client asked for a
    conditional delete (ETag, LastModifiedTime or Size), which this server does not do."""

    key: str
    version_id: str | None = None
    conditional: bool = False


@dataclass(frozen=True)
class DeleteRequest:
    quiet: bool
    entries: tuple[DeleteEntry, ...]


def parse_delete_request(body: bytes) -> DeleteRequest:
    """The Delete document of POST /bucket?delete: 1 to 1000 objects, optional Quiet."""
    if not body.strip():
        raise S3Error("MalformedXML")
    root = parse_document(body, "Delete", max_bytes=MAX_DELETE_XML_BYTES)
    quiet = False
    entries: list[DeleteEntry] = []
    for child in root:
        name = _localname(child)
        if name == "Quiet":
            quiet = _boolean(child.text)
        elif name == "Object":
            entries.append(_delete_entry(child))
            if len(entries) > MAX_DELETE_KEYS:
                raise S3Error("MalformedXML", "A Delete request may name at most 1000 keys.")
        elif name is not None:
            raise S3Error("MalformedXML", f"Unexpected element {name} in Delete.")
    if not entries:
        raise S3Error("MalformedXML", "A Delete request must name at least one key.")
    return DeleteRequest(quiet, tuple(entries))


def _boolean(text: str | None) -> bool:
    value = _BOOLEANS.get((text or "").strip().lower())
    if value is None:
        raise S3Error("MalformedXML", "Quiet must be true or false.")
    return value


def _delete_entry(element: etree._Element) -> DeleteEntry:
    fields: dict[str, str] = {}
    for child in element:  # 1,000 of these a request: `_localname` inlined
        tag = child.tag
        if not isinstance(tag, str):
            continue
        name = tag.rpartition("}")[2]
        if name not in _OBJECT_FIELDS or name in fields:
            raise S3Error("MalformedXML", f"Unexpected element {name} in Object.")
        fields[name] = child.text or ""
    key = fields.get("Key")
    if key is None:
        raise S3Error("MalformedXML", "Every Object needs a Key.")
    version_id = fields.get("VersionId")
    # Any field but Key and VersionId (ETag, LastModifiedTime, Size) asks for a condition.
    conditional = len(fields) > (1 if version_id is None else 2)
    return DeleteEntry(key, version_id, conditional)


@dataclass(frozen=True)
class DeleteEntryResult:
    """What happened to one entry: deleted (error_code None) or an error."""

    key: str
    version_id: str | None = None
    error_code: str | None = None
    error_message: str = ""
    delete_marker: bool = False
    delete_marker_version_id: str | None = None


def delete_result_document(outcomes: Iterable[DeleteEntryResult], *, quiet: bool) -> bytes:
    """DeleteResult in request order; Quiet lists only the errors."""
    root = s3_root("DeleteResult")
    for outcome in outcomes:
        if outcome.error_code is None:
            if not quiet:
                _deleted(root, outcome)
            continue
        error = sub_element(root, "Error")
        sub_element(error, "Key", outcome.key)
        if outcome.version_id is not None:
            sub_element(error, "VersionId", outcome.version_id)
        sub_element(error, "Code", outcome.error_code)
        sub_element(error, "Message", outcome.error_message)
    return serialize(root)


def _deleted(root: etree._Element, outcome: DeleteEntryResult) -> None:
    deleted = sub_element(root, "Deleted")
    sub_element(deleted, "Key", outcome.key)
    if outcome.version_id is not None:
        sub_element(deleted, "VersionId", outcome.version_id)
    if outcome.delete_marker:
        sub_element(deleted, "DeleteMarker", "true")
        if outcome.delete_marker_version_id is not None:
            sub_element(deleted, "DeleteMarkerVersionId", outcome.delete_marker_version_id)


# -- CopyObject --------------------------------------------------------------------------


def copy_object_result_document(record: ObjectRecord) -> bytes:
    root = s3_root("CopyObjectResult")
    sub_element(root, "ETag", f'"{record.etag}"')
    sub_element(root, "LastModified", iso8601(record.last_modified))
    if record.checksums and record.checksum_type:
        sub_element(root, "ChecksumType", record.checksum_type)
    for algorithm, value in sorted(record.checksums.items()):
        sub_element(root, checksum_element(algorithm), value)
    return serialize(root)


# -- GetObjectAttributes -----------------------------------------------------------------


@dataclass(frozen=True)
class PartsPage:
    """Paging of the ObjectParts attribute (x-amz-max-parts, x-amz-part-number-marker)."""

    max_parts: int = 1000
    part_number_marker: int = 0


def object_attributes_document(
    record: ObjectRecord, wanted: Collection[str], page: PartsPage
) -> bytes:
    """GetObjectAttributesResponse with the attributes asked for, in AWS's element order.

    As AWS: a plain (single PUT) object has no ObjectParts at all; a multipart object
    always reports its PartsCount, and lists its parts (paged) only when they carry
    checksums. A composite checksum is reported without its `-N` suffix."""
    root = s3_root("GetObjectAttributesResponse")
    if "ETag" in wanted:
        sub_element(root, "ETag", record.etag)
    if "Checksum" in wanted and record.checksums:
        _object_checksum(root, record)
    if "ObjectParts" in wanted and record.parts:
        _object_parts(root, record.parts, page)
    if "StorageClass" in wanted:
        sub_element(root, "StorageClass", record.storage_class)
    if "ObjectSize" in wanted:
        sub_element(root, "ObjectSize", str(record.size))
    return serialize(root)


def _object_checksum(root: etree._Element, record: ObjectRecord) -> None:
    checksum = sub_element(root, "Checksum")
    composite = record.checksum_type == "COMPOSITE"
    for algorithm, value in sorted(record.checksums.items()):
        text = _COMPOSITE_SUFFIX.sub("", value) if composite else value
        sub_element(checksum, checksum_element(algorithm), text)
    if record.checksum_type:
        sub_element(checksum, "ChecksumType", record.checksum_type)


def _object_parts(root: etree._Element, parts: tuple[PartRef, ...], page: PartsPage) -> None:
    container = sub_element(root, "ObjectParts")
    if any(part.checksums for part in parts):
        after = [p for p in parts if p.part_number > page.part_number_marker]
        listed = after[: page.max_parts]
        truncated = len(after) > len(listed)
        sub_element(container, "IsTruncated", "true" if truncated else "false")
        sub_element(container, "MaxParts", str(page.max_parts))
        next_marker = listed[-1].part_number if listed else page.part_number_marker
        sub_element(container, "NextPartNumberMarker", str(next_marker))
        sub_element(container, "PartNumberMarker", str(page.part_number_marker))
        for part in listed:
            _part(container, part)
    sub_element(container, "PartsCount", str(len(parts)))


def _part(container: etree._Element, part: PartRef) -> None:
    element = sub_element(container, "Part")
    sub_element(element, "PartNumber", str(part.part_number))
    sub_element(element, "Size", str(part.size))
    for algorithm, value in sorted(part.checksums.items()):
        sub_element(element, checksum_element(algorithm), value)


# -- ACLs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AclGrant:
    grantee_type: str  # CanonicalUser | Group | AmazonCustomerByEmail
    grantee_id: str | None
    permission: str


@dataclass(frozen=True)
class AclPolicy:
    owner_id: str | None
    grants: tuple[AclGrant, ...]


def _owner(parent: etree._Element, tag: str, owner_id: str, owner_name: str) -> None:
    owner = sub_element(parent, tag)
    sub_element(owner, "ID", owner_id)
    sub_element(owner, "DisplayName", owner_name)


def parse_access_control_policy(body: bytes) -> AclPolicy:
    """The AccessControlPolicy body of PutBucketAcl/PutObjectAcl (MalformedACLError when it
    is not one)."""
    try:
        root = parse_document(body, "AccessControlPolicy")
    except S3Error as error:
        raise S3Error("MalformedACLError") from error
    owner_id = None
    grants: list[AclGrant] = []
    for child in root:
        name = _localname(child)
        if name == "Owner":
            owner_id = child_text(child, "ID")
        elif name == "AccessControlList":
            grants.extend(_grant(g) for g in child if _localname(g) == "Grant")
    return AclPolicy(owner_id, tuple(grants))


def _grant(element: etree._Element) -> AclGrant:
    grantee = next((c for c in element if _localname(c) == "Grantee"), None)
    permission = child_text(element, "Permission")
    if grantee is None or permission is None:
        raise S3Error("MalformedACLError")
    grantee_type = grantee.get(XSI_TYPE) or ""
    grantee_id = child_text(grantee, "ID") if grantee_type != "Group" else \
        child_text(grantee, "URI")
    return AclGrant(grantee_type, grantee_id, permission.strip())


def owner_only_full_control(policy: AclPolicy, owner_id: str) -> bool:
    """True when the policy says exactly what this server's ACLs always say."""
    if policy.owner_id not in (None, owner_id) or len(policy.grants) != 1:
        return False
    grant = policy.grants[0]
    return (grant.grantee_type == "CanonicalUser" and grant.grantee_id == owner_id
            and grant.permission == "FULL_CONTROL")

