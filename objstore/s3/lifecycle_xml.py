"""XML of the bucket lifecycle configuration (lxml): the LifecycleConfiguration request
body of PutBucketLifecycleConfiguration and the document GetBucketLifecycleConfiguration
answers, in AWS's element order.

Pure functions of plain data; no Twisted, no I/O. The parser enforces a size limit and
refuses DTDs and entities (through `parse_document`), and raises S3Error("MalformedXML")
for anything the schema does not allow: an unknown or repeated element, a missing Status,
a Filter holding more than one condition, a number that is not one. Rules about values
(Days > 0, unique IDs, ...) are `lifecycle_rules.validate`'s, run after parsing.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable

from lxml import etree

from objstore.engine.lifecycle_rules import (
    FORM_AND,
    FORM_EMPTY,
    FORM_LEGACY,
    FORM_PREFIX,
    FORM_SIZE_GT,
    FORM_SIZE_LT,
    FORM_TAG,
    Expiration,
    LifecycleConfiguration,
    LifecycleRule,
    NoncurrentExpiration,
    RuleFilter,
    Transition,
)
from objstore.errors import S3Error
from objstore.http.client_bytes import signed_decimal
from objstore.s3.xml import iso8601, parse_document, s3_root, serialize, sub_element

# 1000 rules, each with an And of several tags, stay well below this.
MAX_LIFECYCLE_XML_BYTES = 4 * 1024 * 1024
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

Elements = dict[str, list[etree._Element]]

_RULE_ELEMENTS = frozenset({
    "ID", "Prefix", "Filter", "Status", "Expiration", "Transition",
    "NoncurrentVersionTransition", "NoncurrentVersionExpiration",
    "AbortIncompleteMultipartUpload",
})
_REPEATABLE_IN_RULE = frozenset({"Transition", "NoncurrentVersionTransition"})
_FILTER_ELEMENTS = frozenset({"Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan",
                              "And"})
_AND_ELEMENTS = frozenset({"Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan"})
_SINGLE_FORMS = {"Prefix": FORM_PREFIX, "Tag": FORM_TAG, "ObjectSizeGreaterThan": FORM_SIZE_GT,
                 "ObjectSizeLessThan": FORM_SIZE_LT}


def new_rule_id() -> str:
    """The ID given to a rule sent without one (AWS generates one too)."""
    return uuid.uuid4().hex


# -- parsing ------------------------------------------------------------------------------


def parse_lifecycle(body: bytes, new_id: Callable[[], str] = new_rule_id
                    ) -> LifecycleConfiguration:
    """The configuration of a PutBucketLifecycleConfiguration body, not yet validated."""
    root = parse_document(body, "LifecycleConfiguration", max_bytes=MAX_LIFECYCLE_XML_BYTES)
    fields = _elements(root, frozenset({"Rule"}), frozenset({"Rule"}))
    return LifecycleConfiguration(tuple(_rule(el, new_id) for el in fields.get("Rule", [])))


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname


def _elements(parent: etree._Element, allowed: frozenset[str],
              repeatable: frozenset[str] = frozenset()) -> Elements:
    """The child elements by name; unknown names and repeats of single ones are refused."""
    found: Elements = {}
    for child in parent:
        if not isinstance(child.tag, str):
            continue  # comments, processing instructions
        name = _local(child)
        if name not in allowed:
            raise S3Error("MalformedXML", f"Unexpected element {name} in {_local(parent)}.")
        if name in found and name not in repeatable:
            raise S3Error("MalformedXML", f"{name} may appear once in {_local(parent)}.")
        found.setdefault(name, []).append(child)
    return found


def _text(element: etree._Element) -> str:
    return (element.text or "").strip()


def _one_text(fields: Elements, name: str) -> str | None:
    found = fields.get(name)
    return None if not found else _text(found[0])


def _integer(text: str | None, name: str, maximum: int = INT32_MAX) -> int | None:
    if text is None:
        return None
    value = signed_decimal(text)
    if value is None or abs(value) > maximum:
        raise S3Error("MalformedXML", f"{name} must be an integer.")
    return value


def _boolean(text: str | None, name: str) -> bool | None:
    if text is None:
        return None
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise S3Error("MalformedXML", f"{name} must be true or false.")
    return lowered == "true"


def _date(text: str | None) -> float | None:
    """An ISO 8601 date or date-time; naive values are UTC."""
    if text is None:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise S3Error("InvalidArgument", "'Date' must be in ISO 8601 format",
                      ArgumentName="Date", ArgumentValue=text) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _rule(element: etree._Element, new_id: Callable[[], str]) -> LifecycleRule:
    fields = _elements(element, _RULE_ELEMENTS, _REPEATABLE_IN_RULE)
    status = _one_text(fields, "Status")
    if status is None:
        raise S3Error("MalformedXML", "Each Rule needs a Status.")
    return LifecycleRule(
        rule_id=_one_text(fields, "ID") or new_id(),
        status=status,
        filter=_rule_filter(fields),
        expiration=_expiration(fields),
        noncurrent_expiration=_noncurrent(fields),
        abort_days=_abort_days(fields),
        transitions=_transitions(fields),
    )


def _rule_filter(fields: Elements) -> RuleFilter:
    legacy = _one_text(fields, "Prefix")
    selectors = fields.get("Filter")
    if legacy is not None and selectors:
        raise S3Error("MalformedXML", "A Rule takes a Filter or a Prefix, not both.")
    if legacy is not None:
        return RuleFilter(form=FORM_LEGACY, prefix=legacy)
    if not selectors:
        raise S3Error("MalformedXML", "Each Rule needs a Filter (or a Prefix).")
    return _filter(selectors[0])


def _filter(element: etree._Element) -> RuleFilter:
    fields = _elements(element, _FILTER_ELEMENTS)
    if not fields:
        return RuleFilter(form=FORM_EMPTY)
    if len(fields) > 1:
        raise S3Error("MalformedXML", "A Filter holds one condition; combine them with And.")
    name, found = next(iter(fields.items()))
    if name == "And":
        return _and(found[0])
    return _conditions(fields, _SINGLE_FORMS[name])


def _and(element: etree._Element) -> RuleFilter:
    fields = _elements(element, _AND_ELEMENTS, frozenset({"Tag"}))
    if not fields:
        raise S3Error("MalformedXML", "An And filter needs at least one condition.")
    return _conditions(fields, FORM_AND)


def _conditions(fields: Elements, form: str) -> RuleFilter:
    return RuleFilter(
        form=form,
        prefix=_one_text(fields, "Prefix") or "",
        tags=tuple(_tag(el) for el in fields.get("Tag", [])),
        size_greater_than=_integer(_one_text(fields, "ObjectSizeGreaterThan"),
                                   "ObjectSizeGreaterThan", INT64_MAX),
        size_less_than=_integer(_one_text(fields, "ObjectSizeLessThan"),
                                "ObjectSizeLessThan", INT64_MAX),
    )


def _tag(element: etree._Element) -> tuple[str, str]:
    fields = _elements(element, frozenset({"Key", "Value"}))
    key, value = _one_text(fields, "Key"), _one_text(fields, "Value")
    if key is None or value is None:
        raise S3Error("MalformedXML", "Each Tag needs a Key and a Value.")
    # Tag keys and values are compared verbatim (no stripping beyond the XML's own).
    return (fields["Key"][0].text or "", fields["Value"][0].text or "")


def _expiration(fields: Elements) -> Expiration | None:
    found = fields.get("Expiration")
    if not found:
        return None
    inner = _elements(found[0], frozenset({"Days", "Date", "ExpiredObjectDeleteMarker"}))
    return Expiration(
        days=_integer(_one_text(inner, "Days"), "Days"),
        date=_date(_one_text(inner, "Date")),
        expired_object_delete_marker=_boolean(_one_text(inner, "ExpiredObjectDeleteMarker"),
                                              "ExpiredObjectDeleteMarker"),
    )


def _noncurrent(fields: Elements) -> NoncurrentExpiration | None:
    found = fields.get("NoncurrentVersionExpiration")
    if not found:
        return None
    inner = _elements(found[0], frozenset({"NoncurrentDays", "NewerNoncurrentVersions"}))
    days = _integer(_one_text(inner, "NoncurrentDays"), "NoncurrentDays")
    if days is None:
        raise S3Error("MalformedXML", "NoncurrentVersionExpiration needs NoncurrentDays.")
    newer = _integer(_one_text(inner, "NewerNoncurrentVersions"), "NewerNoncurrentVersions")
    return NoncurrentExpiration(days, newer)


def _abort_days(fields: Elements) -> int | None:
    found = fields.get("AbortIncompleteMultipartUpload")
    if not found:
        return None
    inner = _elements(found[0], frozenset({"DaysAfterInitiation"}))
    days = _integer(_one_text(inner, "DaysAfterInitiation"), "DaysAfterInitiation")
    if days is None:
        raise S3Error("MalformedXML", "AbortIncompleteMultipartUpload needs "
                      "DaysAfterInitiation.")
    return days


def _transitions(fields: Elements) -> tuple[Transition, ...]:
    current = [_transition(el, noncurrent=False) for el in fields.get("Transition", [])]
    older = [_transition(el, noncurrent=True)
             for el in fields.get("NoncurrentVersionTransition", [])]
    return tuple(current + older)


def _transition(element: etree._Element, *, noncurrent: bool) -> Transition:
    names = ({"NoncurrentDays", "NewerNoncurrentVersions", "StorageClass"} if noncurrent
             else {"Days", "Date", "StorageClass"})
    inner = _elements(element, frozenset(names))
    storage_class = _one_text(inner, "StorageClass")
    if not storage_class:
        raise S3Error("MalformedXML", "A transition needs a StorageClass.")
    days_name = "NoncurrentDays" if noncurrent else "Days"
    return Transition(
        storage_class=storage_class,
        days=_integer(_one_text(inner, days_name), days_name),
        date=None if noncurrent else _date(_one_text(inner, "Date")),
        noncurrent=noncurrent,
    )


# -- rendering ----------------------------------------------------------------------------


def lifecycle_document(config: LifecycleConfiguration) -> bytes:
    root = s3_root("LifecycleConfiguration")
    for rule in config.rules:
        _render_rule(sub_element(root, "Rule"), rule)
    return serialize(root)


def _render_rule(element: etree._Element, rule: LifecycleRule) -> None:
    if rule.expiration is not None:
        _render_expiration(sub_element(element, "Expiration"), rule.expiration)
    sub_element(element, "ID", rule.rule_id)
    if rule.filter.form == FORM_LEGACY:
        sub_element(element, "Prefix", rule.filter.prefix)
    else:
        _render_filter(sub_element(element, "Filter"), rule.filter)
    sub_element(element, "Status", rule.status)
    noncurrent = rule.noncurrent_expiration
    if noncurrent is not None:
        action = sub_element(element, "NoncurrentVersionExpiration")
        sub_element(action, "NoncurrentDays", str(noncurrent.noncurrent_days))
        if noncurrent.newer_noncurrent_versions is not None:
            sub_element(action, "NewerNoncurrentVersions",
                        str(noncurrent.newer_noncurrent_versions))
    if rule.abort_days is not None:
        abort = sub_element(element, "AbortIncompleteMultipartUpload")
        sub_element(abort, "DaysAfterInitiation", str(rule.abort_days))


def _render_expiration(element: etree._Element, expiration: Expiration) -> None:
    if expiration.date is not None:
        sub_element(element, "Date", iso8601(expiration.date))
    if expiration.days is not None:
        sub_element(element, "Days", str(expiration.days))
    if expiration.expired_object_delete_marker is not None:
        sub_element(element, "ExpiredObjectDeleteMarker",
             "true" if expiration.expired_object_delete_marker else "false")


def _render_filter(element: etree._Element, selector: RuleFilter) -> None:
    if selector.form == FORM_EMPTY:
        return
    target = sub_element(element, "And") if selector.form == FORM_AND else element
    _render_conditions(target, selector)


def _render_conditions(element: etree._Element, selector: RuleFilter) -> None:
    if selector.form in (FORM_PREFIX, FORM_AND) and (selector.prefix
                                                     or selector.form == FORM_PREFIX):
        sub_element(element, "Prefix", selector.prefix)
    _render_tags(element, selector.tags)
    if selector.size_greater_than is not None:
        sub_element(element, "ObjectSizeGreaterThan", str(selector.size_greater_than))
    if selector.size_less_than is not None:
        sub_element(element, "ObjectSizeLessThan", str(selector.size_less_than))


def _render_tags(element: etree._Element, tags: Iterable[tuple[str, str]]) -> None:
    for key, value in tags:
        tag = sub_element(element, "Tag")
        sub_element(tag, "Key", key)
        sub_element(tag, "Value", value)


__all__ = ["MAX_LIFECYCLE_XML_BYTES", "lifecycle_document", "new_rule_id", "parse_lifecycle"]
