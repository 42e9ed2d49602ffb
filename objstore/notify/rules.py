"""A bucket's notification configuration as plain data, and its rules: which event names
there are, which configuration rules an event matches (event selections with wildcards,
prefix/suffix filters), the destinations ARNs name, AWS's validation, and the stored JSON
form (bucket config `notification`).

Pure: no Twisted, no I/O, no XML (the S3 XML is `s3/notification_xml.py`).

A destination ARN is either `arn:objstore:sqs:<region>:<target-name>:<kind>`, naming a
target of `[notifications.targets.<target-name>]`, or an http(s) URL: an ad-hoc webhook
(the spec treats every configuration kind as a webhook destination). The region of an ARN
is not checked against the server's (clients copy ARNs between deployments).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from objstore.errors import S3Error

NOTIFICATION_CONFIG_KEY = "notification"

# The configuration kinds, as their XML elements are named (Topic/Queue/CloudFunction).
KINDS = ("Topic", "Queue", "CloudFunction")
# The ARN element of each kind.
ARN_ELEMENT = {"Topic": "Topic", "Queue": "Queue", "CloudFunction": "CloudFunction"}

EVENT_NAMES = (
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
    "s3:ObjectTagging:Put",
    "s3:ObjectTagging:Delete",
    "s3:ObjectAcl:Put",
    "s3:LifecycleExpiration:Delete",
    "s3:LifecycleExpiration:DeleteMarkerCreated",
)
# What a configuration may select: every name, and each family's wildcard.
SELECTABLE = frozenset(EVENT_NAMES) | frozenset(
    name.rsplit(":", 1)[0] + ":*" for name in EVENT_NAMES)

ARN_PREFIX = "arn:objstore:sqs:"
MAX_RULES = 100
MAX_ID_LENGTH = 255
MAX_FILTER_VALUE = 1024


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a rule's events go: a configured target (`target`, its `kind` as the ARN
    says) or an ad-hoc webhook (`url`)."""

    target: str = ""
    kind: str = ""
    url: str = ""

    @property
    def name(self) -> str:
        """The name deliveries are recorded under: the target's, or the URL."""
        return self.target or self.url


@dataclass(frozen=True, slots=True)
class NotificationRule:
    id: str
    kind: str  # Topic | Queue | CloudFunction
    arn: str
    events: tuple[str, ...]
    prefix: str = ""
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class NotificationConfiguration:
    rules: tuple[NotificationRule, ...] = ()


@functools.lru_cache(maxsize=1024)
def parse_arn(arn: str) -> Destination | None:
    """The destination an ARN names; None for one of neither form. Kept per ARN (the
    consumer asks for every rule of every event; Destination is immutable)."""
    if arn.startswith(("http://", "https://")):
        try:
            parts = urlsplit(arn)
            parts.port  # noqa: B018 -- raises ValueError on a bad port
        except ValueError:
            return None
        return Destination(url=arn) if parts.hostname else None
    if not arn.startswith(ARN_PREFIX):
        return None
    fields = arn[len(ARN_PREFIX):].split(":")
    if len(fields) != 3 or not fields[1] or not fields[2]:
        return None
    _region, target, kind = fields
    return Destination(target=target, kind=kind)


def event_selected(selection: str, name: str) -> bool:
    """Whether the selection (a name or `family:*`) covers the event `name`."""
    if selection.endswith(":*"):
        return name.startswith(selection[:-1])
    return selection == name


def rule_matches(rule: NotificationRule, event_name: str, key: str) -> bool:
    return (any(event_selected(s, event_name) for s in rule.events)
            and key.startswith(rule.prefix) and key.endswith(rule.suffix))


def matching_destinations(config: NotificationConfiguration, event_name: str,
                          key: str) -> list[tuple[NotificationRule, Destination]]:
    """The rules an event matches with their destinations, one per destination (two rules
    sending the same event to the same target deliver it once), in configuration order."""
    found: list[tuple[NotificationRule, Destination]] = []
    seen: set[str] = set()
    for rule in config.rules:
        destination = parse_arn(rule.arn)
        if destination is None or not rule_matches(rule, event_name, key):
            continue
        if destination.name not in seen:
            seen.add(destination.name)
            found.append((rule, destination))
    return found


def validate(config: NotificationConfiguration,
             known_target: Callable[[Destination], bool]) -> None:
    """AWS's checks of a configuration, raising its errors: event names
    (InvalidArgument), filter rules (InvalidArgument), overlapping rules of one destination
    kind (InvalidArgument "Configurations overlap"), unique ids, and destinations
    (InvalidArgument "Unable to validate the following destination configurations")."""
    if len(config.rules) > MAX_RULES:
        raise S3Error("InvalidArgument", f"At most {MAX_RULES} configurations are allowed.")
    ids = [rule.id for rule in config.rules]
    if len(set(ids)) != len(ids):
        raise S3Error("InvalidArgument", "Configuration IDs must be unique.")
    for rule in config.rules:
        if len(rule.id) > MAX_ID_LENGTH:
            raise S3Error("InvalidArgument", "The configuration ID is too long.")
        if not rule.events:
            raise S3Error("InvalidArgument", "A configuration needs at least one Event.")
        for event in rule.events:
            if event not in SELECTABLE:
                raise S3Error("InvalidArgument", "The event is not supported for "
                              "notifications", ArgumentName="Event", ArgumentValue=event)
        if len(rule.prefix) > MAX_FILTER_VALUE or len(rule.suffix) > MAX_FILTER_VALUE:
            raise S3Error("InvalidArgument", "A filter rule value is too long.")
    _check_overlaps(config.rules)
    unknown = [rule.arn for rule in config.rules
               if (destination := parse_arn(rule.arn)) is None
               or not known_target(destination)]
    if unknown:
        raise S3Error("InvalidArgument", "Unable to validate the following destination "
                      "configurations", ArgumentName=unknown[0], ArgumentValue="")


def _check_overlaps(rules: Sequence[NotificationRule]) -> None:
    """AWS refuses two rules that could both match one event of the same name and key:
    events that intersect and filters whose prefixes and suffixes overlap. (Each rule's
    selections are known names by now, so `covered` is small whatever the body held.)"""
    covered = [_covered(rule.events) for rule in rules]
    for i, first in enumerate(rules):
        for j in range(i + 1, len(rules)):
            second = rules[j]
            if covered[i] & covered[j] and \
                    _overlap(first.prefix, second.prefix, str.startswith) and \
                    _overlap(first.suffix, second.suffix, str.endswith):
                raise S3Error("InvalidArgument", "Configurations overlap. Configurations on "
                              "the same bucket cannot share a common event type.",
                              ArgumentName="Event", ArgumentValue=first.events[0])


def _covered(selections: Iterable[str]) -> frozenset[str]:
    """The event names a rule's selections cover."""
    wanted = set(selections)
    return frozenset(name for name in EVENT_NAMES
                     if any(event_selected(s, name) for s in wanted))


def _overlap(a: str, b: str, extends: Callable[[str, str], bool]) -> bool:
    """Two prefixes (or suffixes) overlap when one extends the other ("" overlaps all)."""
    return extends(a, b) or extends(b, a)


def to_json(config: NotificationConfiguration) -> str:
    return json.dumps({"rules": [
        {"id": r.id, "kind": r.kind, "arn": r.arn, "events": list(r.events),
         "prefix": r.prefix, "suffix": r.suffix} for r in config.rules]},
        separators=(",", ":"), sort_keys=True)


def from_json(text: str) -> NotificationConfiguration:
    """The stored form back; ValueError/KeyError/TypeError when it is not one."""
    document = json.loads(text)
    rules = []
    for item in document["rules"]:
        if item["kind"] not in KINDS:
            raise ValueError(f"unknown configuration kind {item['kind']!r}")
        rules.append(NotificationRule(
            id=str(item["id"]), kind=item["kind"], arn=str(item["arn"]),
            events=tuple(str(e) for e in item["events"]),
            prefix=str(item.get("prefix", "")), suffix=str(item.get("suffix", ""))))
    return NotificationConfiguration(tuple(rules))


__all__ = ["ARN_PREFIX", "EVENT_NAMES", "KINDS", "NOTIFICATION_CONFIG_KEY", "SELECTABLE",
           "Destination", "NotificationConfiguration", "NotificationRule", "event_selected",
           "from_json", "matching_destinations", "parse_arn", "rule_matches", "to_json",
           "validate"]
