"""A bucket's replication configuration as plain data, its validation and stored JSON form,
and the rule matching the journal's consumer asks (`match`).

The XML of Put/GetBucketReplication is `s3/replication_xml.py`; what it parses lands here.
Validation follows AWS: at least one rule (at most 1000), rule IDs unique and at most 255
characters, priorities unique, a Filter rule needs DeleteMarkerReplication; the objstore
extensions (`Endpoint`, `CredentialRef`, `Region` in Destination) name the foreign S3
endpoint, the stored credential (POST /admin/replication/credentials/{name}) and the region
the requests are signed for. Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from objstore.errors import S3Error

REPLICATION_CONFIG_KEY = "replication"
ENABLED, DISABLED = "Enabled", "Disabled"
MAX_RULES = 1000
MAX_ID_LENGTH = 255
ARN_PREFIX = "arn:aws:s3:::"
STORAGE_CLASSES = frozenset({
    "STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
    "GLACIER", "DEEP_ARCHIVE", "OUTPOSTS", "GLACIER_IR",
})
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class Destination:
    bucket: str  # the plain name (an ARN given is reduced to it)
    endpoint: str  # http(s)://host[:port] of the foreign S3
    credential_ref: str
    region: str = DEFAULT_REGION
    storage_class: str | None = None


@dataclass(frozen=True)
class ReplicationRule:
    rule_id: str
    status: str
    destination: Destination
    priority: int | None = None
    prefix: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    has_filter: bool = False  # V2 form (Filter) rather than the legacy Prefix
    delete_markers: bool = False  # DeleteMarkerReplication Enabled
    existing_objects: bool = False  # ExistingObjectReplication Enabled
    version_deletes: bool = False  # DeleteReplication Enabled (MinIO's extension)

    @property
    def enabled(self) -> bool:
        return self.status == ENABLED

    def covers(self, key: str, tags: Mapping[str, str]) -> bool:
        """Whether the rule's filter selects an object with this key and these tags."""
        if not key.startswith(self.prefix):
            return False
        return all(tags.get(name) == value for name, value in self.tags)


@dataclass(frozen=True)
class ReplicationConfiguration:
    rules: tuple[ReplicationRule, ...]
    role: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def destination_bucket(text: str) -> str:
    """The bucket name of a Destination Bucket given as an ARN or as a plain name."""
    name = text[len(ARN_PREFIX):] if text.startswith(ARN_PREFIX) else text
    if not name or "/" in name or len(name) > 255 or not name.isprintable():
        raise S3Error("InvalidArgument", "Invalid Destination Bucket.",
                      ArgumentName="Bucket", ArgumentValue=text[:255])
    return name


def check_endpoint(text: str) -> str:
    """An http(s) URL with a host and nothing after the port (path-style requests go to
    <endpoint>/<bucket>/<key>); returned without a trailing slash."""
    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
        parts = urlsplit("")
    if (parts.scheme not in ("http", "https") or not parts.hostname or not port_ok
            or parts.path not in ("", "/") or parts.query or parts.fragment
            or parts.username or parts.password):
        raise S3Error("InvalidArgument", "Destination Endpoint must be an http(s) URL "
                      "with a host and no path.", ArgumentName="Endpoint",
                      ArgumentValue=text[:255])
    return text.rstrip("/")


def validate(config: ReplicationConfiguration,
             credential_known: Callable[[str], bool] = lambda _name: True) -> None:
    """AWS's checks of a parsed configuration (S3Error on the first problem)."""
    if not config.rules:
        raise S3Error("MalformedXML", "A replication configuration needs at least one Rule.")
    if len(config.rules) > MAX_RULES:
        raise S3Error("InvalidRequest", f"A replication configuration holds at most "
                      f"{MAX_RULES} rules.")
    ids: set[str] = set()
    priorities: set[int] = set()
    for rule in config.rules:
        if len(rule.rule_id) > MAX_ID_LENGTH:
            raise S3Error("InvalidArgument", "ID length should not exceed allowed limit "
                          f"of {MAX_ID_LENGTH}", ArgumentName="ID",
                          ArgumentValue=rule.rule_id[:MAX_ID_LENGTH])
        if rule.rule_id in ids:
            raise S3Error("InvalidRequest", "Rule Id must be unique. Found same ID for more "
                          f"than one rule: {rule.rule_id}")
        ids.add(rule.rule_id)
        if rule.has_filter:
            if rule.priority is None:
                raise S3Error("InvalidRequest", "Priority must be specified for this "
                              "version of Cross Region Replication configuration schema.")
            if rule.priority in priorities:
                raise S3Error("InvalidRequest", "Found duplicate priority "
                              f"{rule.priority} in replication configuration.")
            priorities.add(rule.priority)
        if rule.priority is not None and rule.priority < 0:
            raise S3Error("InvalidArgument", "Priority must not be negative.",
                          ArgumentName="Priority", ArgumentValue=str(rule.priority))
        dest = rule.destination
        if dest.storage_class is not None and dest.storage_class not in STORAGE_CLASSES:
            raise S3Error("InvalidArgument", "Invalid StorageClass.",
                          ArgumentName="StorageClass", ArgumentValue=dest.storage_class)
        if not dest.endpoint:
            raise S3Error("InvalidRequest", "Destination Endpoint is required: objstore "
                          "replicates to another S3 endpoint.")
        if not dest.credential_ref:
            raise S3Error("InvalidRequest", "Destination CredentialRef is required (a "
                          "credential stored with POST /admin/replication/credentials).")
        if not credential_known(dest.credential_ref):
            raise S3Error("InvalidArgument", "Unknown replication credential "
                          f"{dest.credential_ref!r}.", ArgumentName="CredentialRef",
                          ArgumentValue=dest.credential_ref[:255])


def match(config: ReplicationConfiguration, key: str, tags: Mapping[str, str]
          ) -> list[ReplicationRule]:
    """The enabled rules that replicate this object: for each destination (endpoint and
    bucket), the covering rule of highest priority (ties: the first listed)."""
    chosen: dict[tuple[str, str], ReplicationRule] = {}
    for rule in config.rules:
        if not rule.enabled or not rule.covers(key, tags):
            continue
        where = (rule.destination.endpoint, rule.destination.bucket)
        held = chosen.get(where)
        if held is None or (rule.priority or 0) > (held.priority or 0):
            chosen[where] = rule
    return list(chosen.values())


def to_json(config: ReplicationConfiguration) -> str:
    """The stored bucket config document."""
    return json.dumps({"role": config.role,
                       "rules": [asdict(rule) for rule in config.rules]}, sort_keys=True)


def from_json(text: str) -> ReplicationConfiguration:
    """A stored document back (written by `to_json`; ValueError when it is not one)."""
    data = json.loads(text)
    rules = []
    for raw in data["rules"]:
        raw = dict(raw)
        raw["destination"] = Destination(**raw["destination"])
        raw["tags"] = tuple(tuple(pair) for pair in raw.get("tags", ()))
        rules.append(ReplicationRule(**raw))
    return ReplicationConfiguration(tuple(rules), role=str(data.get("role", "")))


def parse_stored(text: str | None) -> ReplicationConfiguration | None:
    """The stored document, None when absent or unreadable (a damaged document replicates
    nothing rather than failing every write)."""
    if not text:
        return None
    try:
        return from_json(text)
    except (ValueError, KeyError, TypeError):
        return None


__all__ = ["DISABLED", "ENABLED", "REPLICATION_CONFIG_KEY", "Destination",
           "ReplicationConfiguration", "ReplicationRule", "check_endpoint",
           "destination_bucket", "from_json", "match", "parse_stored", "to_json", "validate"]
