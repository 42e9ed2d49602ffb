"""XML of the bucket replication configuration (lxml): the ReplicationConfiguration body of
PutBucketReplication and the document GetBucketReplication answers.

Pure functions; the parser refuses DTDs and entities and anything the schema does not
allow (an unknown or repeated element, a missing Status or Destination, a Filter with more
than one condition, a Priority that is not a number) with MalformedXML. Value rules (unique
IDs and priorities, the credential known, ...) are `replication.rules.validate`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from lxml import etree

from objstore.errors import S3Error
from objstore.http.client_bytes import signed_decimal
from objstore.replication.rules import (
    ARN_PREFIX,
    DEFAULT_REGION,
    DISABLED,
    ENABLED,
    Destination,
    ReplicationConfiguration,
    ReplicationRule,
    check_endpoint,
    destination_bucket,
)
from objstore.s3.xml import parse_document, s3_root, serialize, sub_element

MAX_REPLICATION_XML_BYTES = 2 * 1024 * 1024
INT32_MAX = 2**31 - 1

Elements = dict[str, list[etree._Element]]

_RULE = frozenset({"ID", "Priority", "Status", "Filter", "Prefix", "Destination",
                   "DeleteMarkerReplication", "ExistingObjectReplication",
                   "DeleteReplication", "SourceSelectionCriteria"})
_FILTER = frozenset({"Prefix", "Tag", "And"})
_AND = frozenset({"Prefix", "Tag"})
_DESTINATION = frozenset({"Bucket", "StorageClass", "Endpoint", "CredentialRef", "Region",
                          "Account", "AccessControlTranslation", "EncryptionConfiguration",
                          "Metrics", "ReplicationTime"})


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname


def _elements(parent: etree._Element, allowed: frozenset[str],
              repeatable: frozenset[str] = frozenset()) -> Elements:
    found: Elements = {}
    for child in parent:
        if not isinstance(child.tag, str):
            continue
        name = _local(child)
        if name not in allowed:
            raise S3Error("MalformedXML", f"Unexpected element {name} in {_local(parent)}.")
        if name in found and name not in repeatable:
            raise S3Error("MalformedXML", f"{name} may appear once in {_local(parent)}.")
        found.setdefault(name, []).append(child)
    return found


def _text(fields: Elements, name: str) -> str | None:
    found = fields.get(name)
    return None if not found else (found[0].text or "").strip()


def _status(element: etree._Element | None, where: str) -> bool | None:
    """Enabled/Disabled of a <X><Status>..</Status></X> element; None when absent."""
    if element is None:
        return None
    value = _text(_elements(element, frozenset({"Status"})), "Status")
    if value not in (ENABLED, DISABLED):
        raise S3Error("MalformedXML", f"{where} Status must be Enabled or Disabled.")
    return value == ENABLED


def _tag(element: etree._Element) -> tuple[str, str]:
    fields = _elements(element, frozenset({"Key", "Value"}))
    key, value = _text(fields, "Key"), _text(fields, "Value")
    if not key or value is None:
        raise S3Error("MalformedXML", "A Tag needs a Key and a Value.")
    return key, value


def _filter(element: etree._Element) -> tuple[str, tuple[tuple[str, str], ...]]:
    fields = _elements(element, _FILTER)
    if len(fields) > 1:
        raise S3Error("MalformedXML", "A Filter holds one of Prefix, Tag or And.")
    if "Tag" in fields:
        return "", (_tag(fields["Tag"][0]),)
    if "And" in fields:
        inner = _elements(fields["And"][0], _AND, frozenset({"Tag"}))
        tags = tuple(_tag(el) for el in inner.get("Tag", []))
        if len({name for name, _ in tags}) != len(tags):
            raise S3Error("InvalidRequest", "Duplicate Tag Keys are not allowed.")
        return _text(inner, "Prefix") or "", tags
    return _text(fields, "Prefix") or "", ()


def _destination(element: etree._Element) -> Destination:
    fields = _elements(element, _DESTINATION)
    bucket = _text(fields, "Bucket")
    if not bucket:
        raise S3Error("MalformedXML", "A Destination needs a Bucket.")
    endpoint = _text(fields, "Endpoint") or ""
    return Destination(
        bucket=destination_bucket(bucket),
        endpoint=check_endpoint(endpoint) if endpoint else "",
        credential_ref=_text(fields, "CredentialRef") or "",
        region=_text(fields, "Region") or DEFAULT_REGION,
        storage_class=_text(fields, "StorageClass") or None,
    )


def _rule(element: etree._Element, new_id: Callable[[], str]) -> ReplicationRule:
    fields = _elements(element, _RULE)
    status = _text(fields, "Status")
    if status not in (ENABLED, DISABLED):
        raise S3Error("MalformedXML", "Each Rule needs a Status of Enabled or Disabled.")
    if "Destination" not in fields:
        raise S3Error("MalformedXML", "Each Rule needs a Destination.")
    if "Filter" in fields and "Prefix" in fields:
        raise S3Error("MalformedXML", "A Rule holds either Filter or Prefix.")
    priority_text = _text(fields, "Priority")
    priority = None
    if priority_text is not None:
        priority = signed_decimal(priority_text)
        if priority is None or abs(priority) > INT32_MAX:
            raise S3Error("MalformedXML", "Priority must be an integer.")
    has_filter = "Filter" in fields
    prefix, tags = _filter(fields["Filter"][0]) if has_filter else (
        _text(fields, "Prefix") or "", ())
    markers = _status(fields.get("DeleteMarkerReplication", [None])[0],
                      "DeleteMarkerReplication")
    if has_filter and markers is None:
        raise S3Error("InvalidRequest", "DeleteMarkerReplication must be specified for this "
                      "version of Cross Region Replication configuration schema.")
    return ReplicationRule(
        rule_id=_text(fields, "ID") or new_id(),
        status=status,
        destination=_destination(fields["Destination"][0]),
        priority=priority,
        prefix=prefix,
        tags=tags,
        has_filter=has_filter,
        delete_markers=bool(markers),
        existing_objects=bool(_status(fields.get("ExistingObjectReplication", [None])[0],
                                      "ExistingObjectReplication")),
        version_deletes=bool(_status(fields.get("DeleteReplication", [None])[0],
                                     "DeleteReplication")),
    )


def parse_replication(body: bytes, new_id: Callable[[], str] = lambda: uuid.uuid4().hex
                      ) -> ReplicationConfiguration:
    """The configuration of a PutBucketReplication body, not yet validated."""
    root = parse_document(body, "ReplicationConfiguration",
                          max_bytes=MAX_REPLICATION_XML_BYTES)
    fields = _elements(root, frozenset({"Role", "Rule"}), frozenset({"Rule"}))
    rules = tuple(_rule(el, new_id) for el in fields.get("Rule", []))
    return ReplicationConfiguration(rules, role=_text(fields, "Role") or "")


def replication_document(config: ReplicationConfiguration) -> bytes:
    root = s3_root("ReplicationConfiguration")
    sub_element(root, "Role", config.role)
    for rule in config.rules:
        element = sub_element(root, "Rule")
        sub_element(element, "ID", rule.rule_id)
        if rule.priority is not None:
            sub_element(element, "Priority", str(rule.priority))
        if rule.has_filter:
            filter_el = sub_element(element, "Filter")
            if rule.tags and (rule.prefix or len(rule.tags) > 1):
                filter_el = sub_element(filter_el, "And")
                sub_element(filter_el, "Prefix", rule.prefix)
            elif not rule.tags:
                sub_element(filter_el, "Prefix", rule.prefix)
            for name, value in rule.tags:
                tag = sub_element(filter_el, "Tag")
                sub_element(tag, "Key", name)
                sub_element(tag, "Value", value)
        else:
            sub_element(element, "Prefix", rule.prefix)
        sub_element(element, "Status", rule.status)
        dest = sub_element(element, "Destination")
        sub_element(dest, "Bucket", ARN_PREFIX + rule.destination.bucket)
        if rule.destination.storage_class:
            sub_element(dest, "StorageClass", rule.destination.storage_class)
        sub_element(dest, "Endpoint", rule.destination.endpoint)
        sub_element(dest, "CredentialRef", rule.destination.credential_ref)
        sub_element(dest, "Region", rule.destination.region)
        for name, on in (("DeleteMarkerReplication", rule.delete_markers),
                         ("ExistingObjectReplication", rule.existing_objects),
                         ("DeleteReplication", rule.version_deletes)):
            sub_element(sub_element(element, name), "Status", ENABLED if on else DISABLED)
    return serialize(root)


__all__ = ["parse_replication", "replication_document"]
