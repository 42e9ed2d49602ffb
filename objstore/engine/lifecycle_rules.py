"""Lifecycle rules: the model of a bucket's lifecycle configuration, its validation as AWS
validates it, what a rule matches, and when each lifecycle action falls due.

Pure: no I/O, no Twisted, no clock of its own (callers pass `now` and the length of a
lifecycle "day", `[lifecycle] day_seconds`, which is 86400 except in tests). It never
decides *how* an action is carried out; the lifecycle worker does that through the engine.

Times follow AWS: an action that falls due N days after an event happens at the first
day boundary (midnight UTC) at or after event + N days. With a testing-aid day length the
boundaries are the multiples of that length since the epoch, so the same rounding holds.

Transitions are parsed so that they can be validated, then refused: this store has one
storage class, so every transition target is one it cannot honour (InvalidStorageClass,
as AWS answers a class a bucket cannot use). Nothing with a transition is ever stored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from objstore.errors import S3Error

MAX_RULES = 1000
MAX_RULE_ID_LENGTH = 255
MAX_NEWER_NONCURRENT_VERSIONS = 100
MAX_TAG_KEY_LENGTH = 128
MAX_TAG_VALUE_LENGTH = 256
DAY_SECONDS = 86400.0
ENABLED = "Enabled"
DISABLED = "Disabled"

# How a rule's filter was written, so GET answers it the way PUT said it.
FORM_LEGACY = "legacy"  # <Rule><Prefix>
FORM_EMPTY = "empty"  # <Filter/>
FORM_PREFIX = "prefix"  # <Filter><Prefix>
FORM_TAG = "tag"  # <Filter><Tag>
FORM_SIZE_GT = "size_gt"  # <Filter><ObjectSizeGreaterThan>
FORM_SIZE_LT = "size_lt"  # <Filter><ObjectSizeLessThan>
FORM_AND = "and"  # <Filter><And>
FILTER_FORMS = frozenset({FORM_LEGACY, FORM_EMPTY, FORM_PREFIX, FORM_TAG, FORM_SIZE_GT,
                          FORM_SIZE_LT, FORM_AND})


# -- the model ------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleFilter:
    form: str = FORM_EMPTY
    prefix: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    size_greater_than: int | None = None
    size_less_than: int | None = None

    def matches(self, key: str, size: int, tags: Mapping[str, str]) -> bool:
        if not key.startswith(self.prefix):
            return False
        if any(tags.get(name) != value for name, value in self.tags):
            return False
        if self.size_greater_than is not None and not size > self.size_greater_than:
            return False
        return self.size_less_than is None or size < self.size_less_than

    @property
    def uses_tags(self) -> bool:
        return bool(self.tags)

    @property
    def uses_size(self) -> bool:
        return self.size_greater_than is not None or self.size_less_than is not None


@dataclass(frozen=True)
class Expiration:
    """Exactly one of the three is set (checked by `validate`)."""

    days: int | None = None
    date: float | None = None  # epoch seconds of a midnight UTC
    expired_object_delete_marker: bool | None = None


@dataclass(frozen=True)
class NoncurrentExpiration:
    noncurrent_days: int
    newer_noncurrent_versions: int | None = None


@dataclass(frozen=True)
class Transition:
    """Parsed only to be validated and refused (see the module docstring)."""

    storage_class: str
    days: int | None = None
    date: float | None = None
    noncurrent: bool = False


@dataclass(frozen=True)
class LifecycleRule:
    rule_id: str
    status: str
    filter: RuleFilter = field(default_factory=RuleFilter)
    expiration: Expiration | None = None
    noncurrent_expiration: NoncurrentExpiration | None = None
    abort_days: int | None = None  # AbortIncompleteMultipartUpload/DaysAfterInitiation
    transitions: tuple[Transition, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.status == ENABLED

    @property
    def has_action(self) -> bool:
        return bool(self.expiration or self.noncurrent_expiration
                    or self.abort_days is not None or self.transitions)


@dataclass(frozen=True)
class LifecycleConfiguration:
    rules: tuple[LifecycleRule, ...]

    def enabled_rules(self) -> tuple[LifecycleRule, ...]:
        return tuple(rule for rule in self.rules if rule.enabled)


# -- validation -----------------------------------------------------------------------


def validate(config: LifecycleConfiguration) -> None:
    """Raise the S3Error AWS answers for the first problem found; None when valid."""
    if not config.rules:
        raise S3Error("MalformedXML", "A lifecycle configuration needs at least one Rule.")
    if len(config.rules) > MAX_RULES:
        raise S3Error("MalformedXML", f"A lifecycle configuration holds at most {MAX_RULES} "
                      "rules.")
    seen: set[str] = set()
    for rule in config.rules:
        if rule.rule_id in seen:
            raise S3Error("InvalidArgument", "Rule ID must be unique. Found same ID for more "
                          "than one rule", ArgumentName="ID", ArgumentValue=rule.rule_id)
        seen.add(rule.rule_id)
        validate_rule(rule)
    for rule in config.rules:
        _refuse_transitions(rule)


def validate_rule(rule: LifecycleRule) -> None:
    for check in _RULE_CHECKS:
        check(rule)


def _check_id(rule: LifecycleRule) -> None:
    if len(rule.rule_id) > MAX_RULE_ID_LENGTH:
        raise S3Error("InvalidArgument", "ID length should not exceed allowed limit of "
                      f"{MAX_RULE_ID_LENGTH}", ArgumentName="ID", ArgumentValue=rule.rule_id)


def _check_status(rule: LifecycleRule) -> None:
    if rule.status not in (ENABLED, DISABLED):
        raise S3Error("MalformedXML", "Status must be Enabled or Disabled.")


def _check_filter(rule: LifecycleRule) -> None:
    selector = rule.filter
    if selector.form not in FILTER_FORMS:
        raise S3Error("MalformedXML", "Unknown filter form.")
    names = [name for name, _ in selector.tags]
    if len(set(names)) != len(names):
        raise S3Error("InvalidRequest", "Duplicate Tag Keys are not allowed.")
    for name, value in selector.tags:
        if not 1 <= len(name) <= MAX_TAG_KEY_LENGTH:
            raise S3Error("InvalidTag", "The TagKey you have provided is invalid")
        if len(value) > MAX_TAG_VALUE_LENGTH:
            raise S3Error("InvalidTag", "The TagValue you have provided is invalid")
    _check_sizes(selector)


def _check_sizes(selector: RuleFilter) -> None:
    for name, value in (("ObjectSizeGreaterThan", selector.size_greater_than),
                        ("ObjectSizeLessThan", selector.size_less_than)):
        if value is not None and value < 0:
            raise S3Error("InvalidArgument", f"{name} must be a non-negative integer",
                          ArgumentName=name, ArgumentValue=str(value))
    low, high = selector.size_greater_than, selector.size_less_than
    if low is not None and high is not None and low >= high:
        raise S3Error("InvalidArgument", "ObjectSizeGreaterThan must be less than "
                      "ObjectSizeLessThan", ArgumentName="ObjectSizeGreaterThan",
                      ArgumentValue=str(low))


def _check_action_present(rule: LifecycleRule) -> None:
    if not rule.has_action:
        raise S3Error("InvalidRequest", "At least one action needs to be specified in a rule")


def _check_expiration(rule: LifecycleRule) -> None:
    expiration = rule.expiration
    if expiration is None:
        return
    given = [v for v in (expiration.days, expiration.date,
                         expiration.expired_object_delete_marker) if v is not None]
    if len(given) != 1:
        raise S3Error("MalformedXML", "Expiration takes exactly one of Days, Date and "
                      "ExpiredObjectDeleteMarker.")
    if expiration.days is not None and expiration.days <= 0:
        raise S3Error("InvalidArgument", "'Days' for Expiration action must be a positive "
                      "integer", ArgumentName="Days", ArgumentValue=str(expiration.days))
    if expiration.date is not None and expiration.date % DAY_SECONDS != 0:
        raise S3Error("InvalidArgument", "'Date' must be at midnight GMT",
                      ArgumentName="Date")
    if expiration.expired_object_delete_marker and rule.filter.uses_tags:
        raise S3Error("InvalidRequest", "ExpiredObjectDeleteMarker cannot be specified with "
                      "a tag-based filter.")


def _check_noncurrent(rule: LifecycleRule) -> None:
    action = rule.noncurrent_expiration
    if action is None:
        return
    if action.noncurrent_days <= 0:
        raise S3Error("InvalidArgument", "'NoncurrentDays' for NoncurrentVersionExpiration "
                      "action must be a positive integer", ArgumentName="NoncurrentDays",
                      ArgumentValue=str(action.noncurrent_days))
    newer = action.newer_noncurrent_versions
    if newer is not None and not 1 <= newer <= MAX_NEWER_NONCURRENT_VERSIONS:
        raise S3Error("InvalidArgument", "NewerNoncurrentVersions must be between 1 and "
                      f"{MAX_NEWER_NONCURRENT_VERSIONS}", ArgumentName="NewerNoncurrentVersions",
                      ArgumentValue=str(newer))


def _check_abort(rule: LifecycleRule) -> None:
    if rule.abort_days is None:
        return
    if rule.abort_days <= 0:
        raise S3Error("InvalidArgument", "'DaysAfterInitiation' for "
                      "AbortIncompleteMultipartUpload action must be a positive integer",
                      ArgumentName="DaysAfterInitiation", ArgumentValue=str(rule.abort_days))
    if rule.filter.uses_tags:
        raise S3Error("InvalidRequest", "AbortIncompleteMultipartUpload cannot be specified "
                      "with Tags.")
    if rule.filter.uses_size:
        raise S3Error("InvalidRequest", "AbortIncompleteMultipartUpload cannot be specified "
                      "with an object size filter.")


def _check_transitions(rule: LifecycleRule) -> None:
    for transition in rule.transitions:
        if transition.days is not None and transition.date is not None:
            raise S3Error("MalformedXML", "A Transition takes Days or Date, not both.")
        if transition.days is not None and transition.days < 0:
            raise S3Error("InvalidArgument", "'Days' for Transition action must be a "
                          "non-negative integer", ArgumentName="Days",
                          ArgumentValue=str(transition.days))
        if transition.date is not None and transition.date % DAY_SECONDS != 0:
            raise S3Error("InvalidArgument", "'Date' must be at midnight GMT",
                          ArgumentName="Date")


def _refuse_transitions(rule: LifecycleRule) -> None:
    for transition in rule.transitions:
        raise S3Error("InvalidStorageClass", "This server has a single storage class "
                      f"(STANDARD): a transition to {transition.storage_class} cannot be "
                      "honoured.", StorageClassRequested=transition.storage_class)


_RULE_CHECKS = (_check_id, _check_status, _check_filter, _check_action_present,
                _check_expiration, _check_noncurrent, _check_abort, _check_transitions)


# -- when actions fall due --------------------------------------------------------------


def due_after(start: float, days: int, day_seconds: float) -> float:
    """The first day boundary at or after `start` + `days` days."""
    return math.ceil((start + days * day_seconds) / day_seconds) * day_seconds


def current_expiry(rule: LifecycleRule, last_modified: float, day_seconds: float
                   ) -> float | None:
    """When Expiration (Days or Date) expires a current version written at
    `last_modified`; None when the rule has no such action."""
    expiration = rule.expiration
    if expiration is None:
        return None
    if expiration.days is not None:
        return due_after(last_modified, expiration.days, day_seconds)
    return expiration.date


def object_expiration(
    config: LifecycleConfiguration, key: str, size: int, tags: Mapping[str, str],
    last_modified: float, day_seconds: float,
) -> tuple[float, str] | None:
    """(expiry time, rule id) of the earliest-expiring enabled rule that matches a current
    version: what x-amz-expiration reports. None when no rule expires it."""
    found: tuple[float, str] | None = None
    for rule in config.enabled_rules():
        expiry = current_expiry(rule, last_modified, day_seconds)
        if expiry is None or not rule.filter.matches(key, size, tags):
            continue
        if found is None or expiry < found[0]:
            found = (expiry, rule.rule_id)
    return found


def noncurrent_due(rule: LifecycleRule, noncurrent_since: float, newer_noncurrent: int,
                   day_seconds: float) -> float | None:
    """When a noncurrent version may be deleted: it became noncurrent at
    `noncurrent_since` and `newer_noncurrent` noncurrent versions of its key are newer.
    None when the rule keeps it (no action, or within NewerNoncurrentVersions)."""
    action = rule.noncurrent_expiration
    if action is None:
        return None
    if newer_noncurrent < (action.newer_noncurrent_versions or 0):
        return None
    return due_after(noncurrent_since, action.noncurrent_days, day_seconds)


def marker_due(rule: LifecycleRule, marker_time: float, day_seconds: float) -> float | None:
    """When an expired object delete marker (a current marker that is its key's only
    version) may be removed: at once with ExpiredObjectDeleteMarker, and, as on AWS, once
    it is older than the Days of a current-version Expiration."""
    expiration = rule.expiration
    if expiration is None:
        return None
    if expiration.expired_object_delete_marker:
        return marker_time
    if expiration.days is not None:
        return due_after(marker_time, expiration.days, day_seconds)
    return None


def upload_due(rule: LifecycleRule, initiated_at: float, day_seconds: float) -> float | None:
    if rule.abort_days is None:
        return None
    return due_after(initiated_at, rule.abort_days, day_seconds)


def cleans_markers(rule: LifecycleRule) -> bool:
    expiration = rule.expiration
    return expiration is not None and bool(expiration.expired_object_delete_marker
                                           or expiration.days is not None)


# -- stored form ------------------------------------------------------------------------


def to_json(config: LifecycleConfiguration) -> str:
    """The stored form (bucket config value). Transitions are never stored."""
    return json.dumps({"rules": [_rule_to_dict(rule) for rule in config.rules]},
                      sort_keys=True, separators=(",", ":"))


def _rule_to_dict(rule: LifecycleRule) -> dict[str, Any]:
    selector = rule.filter
    expiration = rule.expiration
    noncurrent = rule.noncurrent_expiration
    return {
        "id": rule.rule_id,
        "status": rule.status,
        "filter": {
            "form": selector.form, "prefix": selector.prefix,
            "tags": [list(tag) for tag in selector.tags],
            "size_gt": selector.size_greater_than, "size_lt": selector.size_less_than,
        },
        "expiration": None if expiration is None else {
            "days": expiration.days, "date": expiration.date,
            "eodm": expiration.expired_object_delete_marker,
        },
        "noncurrent": None if noncurrent is None else {
            "days": noncurrent.noncurrent_days, "newer": noncurrent.newer_noncurrent_versions,
        },
        "abort_days": rule.abort_days,
    }


def from_json(text: str) -> LifecycleConfiguration:
    data = json.loads(text)
    return LifecycleConfiguration(tuple(_rule_from_dict(item) for item in data["rules"]))


def _rule_from_dict(data: Mapping[str, Any]) -> LifecycleRule:
    selector = data["filter"]
    expiration = data.get("expiration")
    noncurrent = data.get("noncurrent")
    return LifecycleRule(
        rule_id=data["id"],
        status=data["status"],
        filter=RuleFilter(
            form=selector["form"], prefix=selector["prefix"],
            tags=tuple((str(k), str(v)) for k, v in selector["tags"]),
            size_greater_than=selector["size_gt"], size_less_than=selector["size_lt"],
        ),
        expiration=None if expiration is None else Expiration(
            days=expiration["days"], date=expiration["date"],
            expired_object_delete_marker=expiration["eodm"],
        ),
        noncurrent_expiration=None if noncurrent is None else NoncurrentExpiration(
            noncurrent_days=noncurrent["days"], newer_noncurrent_versions=noncurrent["newer"],
        ),
        abort_days=data.get("abort_days"),
    )


__all__ = [
    "DISABLED",
    "ENABLED",
    "MAX_RULES",
    "Expiration",
    "LifecycleConfiguration",
    "LifecycleRule",
    "NoncurrentExpiration",
    "RuleFilter",
    "Transition",
    "cleans_markers",
    "current_expiry",
    "due_after",
    "from_json",
    "marker_due",
    "noncurrent_due",
    "object_expiration",
    "to_json",
    "upload_due",
    "validate",
]
