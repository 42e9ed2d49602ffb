"""S3 XML of versioning, object lock and tagging: VersioningConfiguration,
ObjectLockConfiguration, Retention, LegalHold and Tagging.

Pure functions of plain data; no Twisted, no I/O. Parsing goes through
`objstore.s3.xml.parse_document` (size limit, no DTDs or entities) and raises S3Error on
anything that does not follow AWS's schema (MalformedXML, or the code AWS answers for a
well-formed but invalid value). Timestamps are ISO 8601 (`2030-01-01T00:00:00.000Z`).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from lxml import etree

from objstore.engine import lock_rules
from objstore.errors import S3Error
from objstore.http.client_bytes import signed_decimal
from objstore.meta.records import ObjectRecord
from objstore.s3.tagging_header import validate_tags
from objstore.s3.xml import iso8601, parse_document, s3_root, serialize, sub_element

VERSIONING_STATES = frozenset({"Enabled", "Suspended"})
MAX_TAGGING_XML_BYTES = 64 * 1024
MAX_SMALL_XML_BYTES = 16 * 1024


def _children(element: etree._Element, allowed: frozenset[str]) -> dict[str, etree._Element]:
    """The element children by local name: each at most once, none outside `allowed`."""
    found: dict[str, etree._Element] = {}
    for child in element:
        if not isinstance(child.tag, str):
            continue
        name = etree.QName(child).localname
        if name not in allowed or name in found:
            raise S3Error("MalformedXML", f"Unexpected element {name}.")
        found[name] = child
    return found


def _text(element: etree._Element | None) -> str | None:
    return None if element is None else (element.text or "").strip()


def _document(body: bytes, root: str, max_bytes: int = MAX_SMALL_XML_BYTES) -> etree._Element:
    if not body.strip():
        raise S3Error("MalformedXML")
    return parse_document(body, root, max_bytes=max_bytes)


def parse_timestamp(text: str) -> float | None:
    """An ISO 8601 timestamp (UTC when it names no offset); None when it is not one."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    # Kept to the millisecond that responses show, so a date read back and sent again
    # compares equal (a retention is never "shortened" by a rounding).
    return round(moment.timestamp() * 1000) / 1000


# -- versioning -----------------------------------------------------------------------


def parse_versioning(body: bytes) -> str:
    """The Status of a VersioningConfiguration (Enabled or Suspended). MFA delete is not
    supported: MfaDelete Enabled is refused, Disabled accepted."""
    found = _children(_document(body, "VersioningConfiguration"),
                      frozenset({"Status", "MfaDelete"}))
    mfa = _text(found.get("MfaDelete"))
    if mfa not in (None, "Enabled", "Disabled"):
        raise S3Error("MalformedXML", "MfaDelete must be Enabled or Disabled.")
    if mfa == "Enabled":
        raise S3Error("IllegalVersioningConfigurationException",
                      "MFA delete is not supported by this server.")
    status = _text(found.get("Status"))
    if status is None:
        raise S3Error("IllegalVersioningConfigurationException",
                      "The versioning configuration must name a Status.")
    if status not in VERSIONING_STATES:
        raise S3Error("MalformedXML", "Status must be Enabled or Suspended.")
    return status


def versioning_document(state: str) -> bytes:
    """GetBucketVersioning: no Status at all for a bucket that was never versioned."""
    root = s3_root("VersioningConfiguration")
    if state in VERSIONING_STATES:
        sub_element(root, "Status", state)
    return serialize(root)


# -- object lock configuration --------------------------------------------------------


def parse_lock_configuration(body: bytes) -> lock_rules.LockConfiguration:
    """ObjectLockConfiguration: ObjectLockEnabled must be Enabled; an optional Rule holds a
    DefaultRetention with a Mode and exactly one of Days and Years, positive and at most
    100 years (InvalidRetentionPeriod otherwise, as AWS answers)."""
    found = _children(_document(body, "ObjectLockConfiguration"),
                      frozenset({"ObjectLockEnabled", "Rule"}))
    if _text(found.get("ObjectLockEnabled")) != "Enabled":
        raise S3Error("MalformedXML", "ObjectLockEnabled must be Enabled.")
    rule = found.get("Rule")
    if rule is None:
        return lock_rules.LockConfiguration()
    retention = _children(rule, frozenset({"DefaultRetention"})).get("DefaultRetention")
    if retention is None:
        raise S3Error("MalformedXML", "A Rule needs a DefaultRetention.")
    return lock_rules.LockConfiguration(_default_retention(retention))


def _default_retention(element: etree._Element) -> lock_rules.DefaultRetention:
    found = _children(element, frozenset({"Mode", "Days", "Years"}))
    mode = _text(found.get("Mode"))
    if mode not in lock_rules.MODES:
        raise S3Error("MalformedXML", "Mode must be GOVERNANCE or COMPLIANCE.")
    days, years = _period(found.get("Days")), _period(found.get("Years"))
    if (days is None) == (years is None):
        raise S3Error("MalformedXML", "A DefaultRetention needs either Days or Years.")
    period, limit = (days, lock_rules.MAX_RETENTION_DAYS) if days is not None else (
        years, lock_rules.MAX_RETENTION_YEARS)
    assert period is not None
    if period <= 0:
        raise S3Error("InvalidRetentionPeriod",
                      "Default retention period must be a positive integer value.")
    if period > limit:
        raise S3Error("InvalidRetentionPeriod", "Default retention period is too large.")
    return lock_rules.DefaultRetention(mode, days, years)


def _period(element: etree._Element | None) -> int | None:
    text = _text(element)
    if text is None:
        return None
    value = signed_decimal(text)
    if value is None:
        raise S3Error("MalformedXML", "Days and Years must be integers.")
    return value


def lock_configuration_document(config: lock_rules.LockConfiguration) -> bytes:
    root = s3_root("ObjectLockConfiguration")
    sub_element(root, "ObjectLockEnabled", "Enabled")
    if config.default is not None:
        retention = sub_element(sub_element(root, "Rule"), "DefaultRetention")
        sub_element(retention, "Mode", config.default.mode)
        if config.default.days is not None:
            sub_element(retention, "Days", str(config.default.days))
        else:
            sub_element(retention, "Years", str(config.default.years))
    return serialize(root)


# -- retention and legal hold ---------------------------------------------------------


def parse_retention(body: bytes) -> lock_rules.Retention:
    """Retention: Mode and RetainUntilDate together; neither removes the retention."""
    found = _children(_document(body, "Retention"), frozenset({"Mode", "RetainUntilDate"}))
    mode, date = _text(found.get("Mode")), _text(found.get("RetainUntilDate"))
    if mode is None and date is None:
        return lock_rules.Retention()
    if mode not in lock_rules.MODES:
        raise S3Error("MalformedXML", "Mode must be GOVERNANCE or COMPLIANCE.")
    until = parse_timestamp(date) if date is not None else None
    if until is None:
        raise S3Error("MalformedXML", "RetainUntilDate must be an ISO 8601 timestamp.")
    return lock_rules.Retention(mode, until)


def retention_document(record: ObjectRecord) -> bytes:
    root = s3_root("Retention")
    if record.retention_mode is not None:
        sub_element(root, "Mode", record.retention_mode)
    if record.retain_until_date is not None:
        sub_element(root, "RetainUntilDate", iso8601(record.retain_until_date))
    return serialize(root)


def parse_legal_hold(body: bytes) -> str:
    found = _children(_document(body, "LegalHold"), frozenset({"Status"}))
    status = _text(found.get("Status"))
    if status not in lock_rules.HOLD_STATUSES:
        raise S3Error("MalformedXML", "Status must be ON or OFF.")
    return status


def legal_hold_document(status: str) -> bytes:
    root = s3_root("LegalHold")
    sub_element(root, "Status", status)
    return serialize(root)


# -- tagging --------------------------------------------------------------------------


def parse_tagging(body: bytes, max_tags: int, what: str) -> dict[str, str]:
    """Tagging/TagSet/Tag(Key, Value); the rules of `tagging_header.validate_tags`."""
    root = _document(body, "Tagging", MAX_TAGGING_XML_BYTES)
    tag_set = _children(root, frozenset({"TagSet"})).get("TagSet")
    if tag_set is None:
        raise S3Error("MalformedXML", "Tagging needs a TagSet.")
    pairs: list[tuple[str, str]] = []
    for tag in tag_set:
        if not isinstance(tag.tag, str):
            continue
        if etree.QName(tag).localname != "Tag":
            raise S3Error("MalformedXML", "A TagSet holds only Tag elements.")
        found = _children(tag, frozenset({"Key", "Value"}))
        if "Key" not in found or "Value" not in found:
            raise S3Error("MalformedXML", "Every Tag needs a Key and a Value.")
        pairs.append((found["Key"].text or "", found["Value"].text or ""))
    return validate_tags(pairs, max_tags=max_tags, what=what)


def tagging_document(tags: Iterable[tuple[str, str]]) -> bytes:
    root = s3_root("Tagging")
    tag_set = sub_element(root, "TagSet")
    for key, value in tags:
        tag = sub_element(tag_set, "Tag")
        sub_element(tag, "Key", key)
        sub_element(tag, "Value", value)
    return serialize(root)
