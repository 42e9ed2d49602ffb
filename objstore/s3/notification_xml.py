"""XML of the bucket notification configuration (lxml): the NotificationConfiguration body
of PutBucketNotificationConfiguration and the document GetBucketNotificationConfiguration
answers (the empty configuration when none is set, as AWS).

Pure functions of plain data; no Twisted, no I/O. The parser refuses DTDs and entities
(through `parse_document`) and raises MalformedXML for what the schema does not allow (an
unknown or repeated element, a configuration without its ARN) and InvalidArgument for
filter rules AWS refuses (a name other than prefix/suffix, one given twice). The value
rules (event names, overlaps, destinations) are `notify/rules.validate`'s, run after.
"""

from __future__ import annotations

import uuid

from lxml import etree

from objstore.errors import S3Error
from objstore.http.error_xml import serialize, sub_element
from objstore.notify.rules import ARN_ELEMENT, KINDS, NotificationConfiguration, NotificationRule
from objstore.s3.xml import parse_document, s3_root

ROOT = "NotificationConfiguration"
MAX_NOTIFICATION_XML_BYTES = 1024 * 1024


def _name(element: etree._Element) -> str:
    return etree.QName(element).localname


def _children(element: etree._Element) -> list[etree._Element]:
    return [child for child in element if isinstance(child.tag, str)]


def _text(element: etree._Element) -> str:
    return (element.text or "").strip()


def parse_notification(body: bytes) -> NotificationConfiguration:
    if not body.strip():
        raise S3Error("MalformedXML")
    root = parse_document(body, ROOT, max_bytes=MAX_NOTIFICATION_XML_BYTES)
    rules = []
    for child in _children(root):
        name = _name(child)
        if name == "EventBridgeConfiguration":
            raise S3Error("NotImplemented", "EventBridge destinations are not supported.")
        kind = name.removesuffix("Configuration")
        if kind not in KINDS:
            raise S3Error("MalformedXML", f"Unexpected element {name}.")
        rules.append(_parse_rule(kind, child))
    return NotificationConfiguration(tuple(rules))


def _parse_rule(kind: str, element: etree._Element) -> NotificationRule:
    rule_id, arn, events = "", None, []
    prefix: str | None = None
    suffix: str | None = None
    seen: set[str] = set()
    for child in _children(element):
        name = _name(child)
        if name in seen and name != "Event":
            raise S3Error("MalformedXML", f"{name} is given twice.")
        seen.add(name)
        if name == "Id":
            rule_id = _text(child)
        elif name == ARN_ELEMENT[kind]:
            arn = _text(child)
        elif name == "Event":
            events.append(_text(child))
        elif name == "Filter":
            prefix, suffix = _parse_filter(child)
        else:
            raise S3Error("MalformedXML", f"Unexpected element {name} in a {kind}Configuration.")
    if not arn:
        raise S3Error("MalformedXML", f"A {kind}Configuration needs its {ARN_ELEMENT[kind]}.")
    return NotificationRule(id=rule_id or new_rule_id(), kind=kind, arn=arn,
                            events=tuple(events), prefix=prefix or "", suffix=suffix or "")


def _parse_filter(element: etree._Element) -> tuple[str | None, str | None]:
    values: dict[str, str] = {}
    for key in _children(element):
        if _name(key) != "S3Key":
            raise S3Error("MalformedXML", f"Unexpected element {_name(key)} in a Filter.")
        for rule in _children(key):
            if _name(rule) != "FilterRule":
                raise S3Error("MalformedXML", f"Unexpected element {_name(rule)} in S3Key.")
            fields = {_name(c): (c.text or "") for c in _children(rule)}
            if set(fields) - {"Name", "Value"} or "Name" not in fields:
                raise S3Error("MalformedXML", "A FilterRule has a Name and a Value.")
            name = fields["Name"].strip().lower()
            if name not in ("prefix", "suffix"):
                raise S3Error("InvalidArgument", "filter rule name must be either prefix or "
                              "suffix", ArgumentName="FilterRule", ArgumentValue=fields["Name"])
            if name in values:
                raise S3Error("InvalidArgument", f"Cannot specify more than one {name} rule "
                              "in a filter.", ArgumentName="FilterRule", ArgumentValue=name)
            values[name] = fields.get("Value", "")
    return values.get("prefix"), values.get("suffix")


def new_rule_id() -> str:
    """The Id given to a configuration sent without one (AWS generates one too)."""
    return uuid.uuid4().hex


def notification_document(config: NotificationConfiguration) -> bytes:
    root = s3_root(ROOT)
    for kind in KINDS:  # AWS lists Topic, then Queue, then CloudFunction configurations
        for rule in config.rules:
            if rule.kind != kind:
                continue
            element = sub_element(root, f"{kind}Configuration")
            sub_element(element, "Id", rule.id)
            sub_element(element, ARN_ELEMENT[kind], rule.arn)
            for event in rule.events:
                sub_element(element, "Event", event)
            if rule.prefix or rule.suffix:
                key = sub_element(sub_element(element, "Filter"), "S3Key")
                for name, value in (("prefix", rule.prefix), ("suffix", rule.suffix)):
                    if value:
                        filter_rule = sub_element(key, "FilterRule")
                        sub_element(filter_rule, "Name", name)
                        sub_element(filter_rule, "Value", value)
    return serialize(root)


__all__ = ["notification_document", "parse_notification"]
