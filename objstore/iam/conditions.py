"""Condition blocks of bucket policies: validation and evaluation (pure; no I/O, no Twisted).

A Condition block maps an operator to {condition key: value or list of values}. Every
operator of the block must hold, every key of an operator must hold, and a key holds when
any of its listed values matches (AWS's rule). Operators: String(Not)Equals(IgnoreCase),
String(Not)Like, Numeric*, Date*, Bool, BinaryEquals, IpAddress/NotIpAddress,
Arn(Not)Equals/Arn(Not)Like, Null, each (but Null) with the `...IfExists` suffix, and the
set prefixes `ForAnyValue:` / `ForAllValues:` for multi-valued keys.

Condition keys are case-insensitive; the request's values come from a `ConditionValues`
(the S3 layer reads them lazily from the request: only a statement that has a Condition
asks). As on AWS, a key the request does not carry makes every operator false except
`Null: true`, `...IfExists` and `ForAllValues:` (true, vacuously).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from objstore.iam.policy import glob_match

MAX_VALUES = 1000


class ConditionError(ValueError):
    """A condition block that can not be evaluated; the message names the culprit."""


class ConditionValues(Protocol):
    """The values of the request's condition keys: None when the request has none."""

    def get(self, key: str) -> tuple[str, ...] | None: ...


@dataclass(frozen=True)
class FixedValues:
    """Condition values from a mapping (lower-case keys): tests and precomputed values."""

    values: Mapping[str, tuple[str, ...]]

    def get(self, key: str) -> tuple[str, ...] | None:
        return self.values.get(key.lower())


NO_VALUES = FixedValues({})

# Keys the S3 layer knows how to read (lower case); tag keys take a suffix.
KNOWN_KEYS = frozenset({
    "aws:sourceip", "aws:securetransport", "aws:referer", "aws:useragent",
    "aws:currenttime", "aws:epochtime", "aws:username", "aws:userid", "aws:principaltype",
    "aws:principalarn", "aws:sourcevpce", "aws:sourcevpc", "aws:requestedregion",
    "s3:prefix", "s3:delimiter", "s3:max-keys", "s3:x-amz-acl",
    "s3:x-amz-server-side-encryption", "s3:signatureversion", "s3:versionid",
    "s3:x-amz-content-sha256", "s3:x-amz-copy-source", "s3:x-amz-metadata-directive",
    "s3:x-amz-storage-class", "s3:authtype", "s3:tlsversion", "s3:object-lock-mode",
    "s3:object-lock-retain-until-date", "s3:object-lock-legal-hold",
    "s3:x-amz-grant-read", "s3:x-amz-grant-write", "s3:x-amz-grant-read-acp",
    "s3:x-amz-grant-write-acp", "s3:x-amz-grant-full-control", "s3:locationconstraint",
    "s3:requestobjecttagkeys", "s3:resourceaccount",
    "s3:x-amz-server-side-encryption-aws-kms-key-id",
})
TAG_KEY_PREFIXES = ("s3:existingobjecttag/", "s3:requestobjecttag/")


def known_key(key: str) -> bool:
    lowered = key.lower()
    if lowered in KNOWN_KEYS:
        return True
    return any(lowered.startswith(p) and len(lowered) > len(p) for p in TAG_KEY_PREFIXES)


# -- value matchers: (request value, policy value) -> bool ---------------------------------

def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _date(text: str) -> float | None:
    """ISO 8601 (a trailing Z allowed) or epoch seconds."""
    number = _number(text)
    if number is not None:
        return number
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None


def _in_network(value: str, pattern: str) -> bool:
    network = _network(pattern)
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        return False
    if network is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None \
            and network.version == 4:
        address = address.ipv4_mapped
    return address.version == network.version and address in network


def _compare(parse: Callable[[str], float | None], test: Callable[[float, float], bool]
             ) -> Callable[[str, str], bool]:
    def match(value: str, pattern: str) -> bool:
        left, right = parse(value), parse(pattern)
        return left is not None and right is not None and test(left, right)
    return match


def _arn_like(value: str, pattern: str) -> bool:
    """ARNs compare field by field (six colon-separated parts), each with wildcards."""
    values, patterns = value.split(":", 5), pattern.split(":", 5)
    if len(values) != len(patterns):
        return False
    return all(glob_match(p, v) for p, v in zip(patterns, values, strict=True))


# base name -> (matcher, negated, validator of the policy's values)
_Matcher = Callable[[str, str], bool]


def _valid_number(text: str) -> bool:
    return _number(text) is not None


def _valid_date(text: str) -> bool:
    return _date(text) is not None


def _valid_bool(text: str) -> bool:
    return text.lower() in ("true", "false")


def _valid_network(text: str) -> bool:
    return _network(text) is not None


def _any_text(text: str) -> bool:
    return True


_OPERATORS: dict[str, tuple[_Matcher, bool, Callable[[str], bool]]] = {
    "StringEquals": (lambda v, p: v == p, False, _any_text),
    "StringNotEquals": (lambda v, p: v == p, True, _any_text),
    "StringEqualsIgnoreCase": (lambda v, p: v.lower() == p.lower(), False, _any_text),
    "StringNotEqualsIgnoreCase": (lambda v, p: v.lower() == p.lower(), True, _any_text),
    "StringLike": (lambda v, p: glob_match(p, v), False, _any_text),
    "StringNotLike": (lambda v, p: glob_match(p, v), True, _any_text),
    "NumericEquals": (_compare(_number, lambda a, b: a == b), False, _valid_number),
    "NumericNotEquals": (_compare(_number, lambda a, b: a == b), True, _valid_number),
    "NumericLessThan": (_compare(_number, lambda a, b: a < b), False, _valid_number),
    "NumericLessThanEquals": (_compare(_number, lambda a, b: a <= b), False, _valid_number),
    "NumericGreaterThan": (_compare(_number, lambda a, b: a > b), False, _valid_number),
    "NumericGreaterThanEquals": (_compare(_number, lambda a, b: a >= b), False,
                                 _valid_number),
    "DateEquals": (_compare(_date, lambda a, b: a == b), False, _valid_date),
    "DateNotEquals": (_compare(_date, lambda a, b: a == b), True, _valid_date),
    "DateLessThan": (_compare(_date, lambda a, b: a < b), False, _valid_date),
    "DateLessThanEquals": (_compare(_date, lambda a, b: a <= b), False, _valid_date),
    "DateGreaterThan": (_compare(_date, lambda a, b: a > b), False, _valid_date),
    "DateGreaterThanEquals": (_compare(_date, lambda a, b: a >= b), False, _valid_date),
    "Bool": (lambda v, p: v.lower() == p.lower(), False, _valid_bool),
    "BinaryEquals": (lambda v, p: v == p, False, _any_text),
    "IpAddress": (_in_network, False, _valid_network),
    "NotIpAddress": (_in_network, True, _valid_network),
    "ArnEquals": (lambda v, p: v == p, False, _any_text),
    "ArnNotEquals": (lambda v, p: v == p, True, _any_text),
    "ArnLike": (_arn_like, False, _any_text),
    "ArnNotLike": (_arn_like, True, _any_text),
}


@dataclass(frozen=True)
class Clause:
    """One (operator, key, values) of a Condition block, compiled."""

    key: str  # lower case
    values: tuple[str, ...]
    matcher: _Matcher | None  # None: the Null operator
    negated: bool
    if_exists: bool
    set_mode: str | None  # "any" | "all" | None

    def holds(self, request: ConditionValues) -> bool:
        found = request.get(self.key)
        if self.matcher is None:  # Null: true means "the key is absent"
            wants_absent = self.values[0].lower() == "true"
            return (not found) is wants_absent
        if not found:
            return self.set_mode == "all" or self.if_exists
        if self.set_mode == "all":
            return all(self._one(value) for value in found)
        return any(self._one(value) for value in found)

    def _one(self, value: str) -> bool:
        assert self.matcher is not None
        hit = any(self.matcher(value, pattern) for pattern in self.values)
        return not hit if self.negated else hit


def _text_values(raw: Any, where: str) -> tuple[str, ...]:
    if isinstance(raw, (str, bool, int, float)) and not isinstance(raw, list):
        raw = [raw]
    if not isinstance(raw, list) or not raw or len(raw) > MAX_VALUES:
        raise ConditionError(f"{where}: values must be a string or a non-empty list")
    texts = []
    for item in raw:
        if isinstance(item, bool):
            texts.append("true" if item else "false")
        elif isinstance(item, (str, int, float)):
            texts.append(str(item))
        else:
            raise ConditionError(f"{where}: values must be strings")
    return tuple(texts)


def compile_conditions(block: Any) -> tuple[Clause, ...]:
    """The clauses of a Condition block; ConditionError when it is not valid."""
    if not isinstance(block, dict) or not block:
        raise ConditionError("Condition must be a non-empty object")
    clauses: list[Clause] = []
    for operator, keys in block.items():
        if not isinstance(operator, str):
            raise ConditionError("Condition operator must be a string")
        set_mode = None
        name = operator
        for prefix, mode in (("ForAnyValue:", "any"), ("ForAllValues:", "all")):
            if name.startswith(prefix):
                set_mode, name = mode, name[len(prefix):]
        if_exists = name.endswith("IfExists") and name != "IfExists"
        if if_exists:
            name = name[: -len("IfExists")]
        matcher: _Matcher | None
        valid: Callable[[str], bool]
        if name == "Null" and not if_exists and set_mode is None:
            matcher, negated, valid = None, False, _valid_bool
        elif name in _OPERATORS:
            matcher, negated, valid = _OPERATORS[name]
        else:
            raise ConditionError(f"Invalid Condition operator {operator!r}")
        if not isinstance(keys, dict) or not keys:
            raise ConditionError(f"Condition {operator!r} must map keys to values")
        for key, raw in keys.items():
            if not isinstance(key, str) or not known_key(key):
                raise ConditionError(f"Policy has an invalid condition key {key!r}")
            values = _text_values(raw, f"Condition {operator} {key}")
            if not all(valid(value) for value in values):
                raise ConditionError(f"Condition {operator} {key}: invalid value")
            if matcher is None and len(values) != 1:
                raise ConditionError(f"Condition Null {key}: one value, true or false")
            clauses.append(Clause(key.lower(), values, matcher, negated, if_exists,
                                  set_mode))
    return tuple(clauses)


def all_hold(clauses: Sequence[Clause], request: ConditionValues) -> bool:
    return all(clause.holds(request) for clause in clauses)


def referenced_keys(clauses: Sequence[Clause]) -> frozenset[str]:
    return frozenset(clause.key for clause in clauses)
