"""Bucket policies: parsing, validation and evaluation (pure; no I/O, no Twisted).

A bucket policy is a resource policy as AWS writes it: Version (2012-10-17 or 2008-10-17,
optional), Id, and Statements each with Sid, Effect, exactly one of Principal/NotPrincipal,
Action/NotAction, Resource/NotResource, and an optional Condition (`iam/conditions.py`).
Principals: `*` or {"AWS": "*"} (everyone, anonymous callers included), {"AWS": user ids,
user ARNs `arn:aws:iam::<account>:user/<name>` or the account `arn:aws:iam::<account>:root`
(every user of this server)}, {"CanonicalUser": user ids}. Resources must name the policy's
bucket (`arn:aws:s3:::bucket` or `arn:aws:s3:::bucket/<key pattern>`). Any failure is
`PolicyDocumentError`, which the S3 layer answers as MalformedPolicy (400), as AWS does.

`is_public` follows AWS's rule: a policy is public when an Allow statement grants to
everyone (a `*` principal, or NotPrincipal) without a condition that pins the caller to
fixed values (source IP ranges, VPCs, accounts, user ids, principal ARNs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from objstore.iam.actions import KNOWN_ACTIONS
from objstore.iam.conditions import (
    Clause,
    ConditionError,
    ConditionValues,
    all_hold,
    compile_conditions,
)
from objstore.iam.policy import glob_match

EXISTING_TAG_PREFIX = "s3:existingobjecttag/"  # condition keys are compared lower-case

MAX_POLICY_BYTES = 20 * 1024  # AWS's limit for a bucket policy
MAX_STATEMENTS = 1000
VERSIONS = ("2012-10-17", "2008-10-17")
ARN_PREFIX = "arn:aws:s3:::"
_STATEMENT_KEYS = frozenset({"Sid", "Effect", "Principal", "NotPrincipal", "Action",
                             "NotAction", "Resource", "NotResource", "Condition"})
_IAM_ARN = re.compile(r"^arn:aws:iam::([0-9A-Za-z*-]*):(root|user/(.+))$")
# Condition keys that pin a caller to fixed values: such a statement is not public.
_PINNING_KEYS = frozenset({"aws:sourceip", "aws:sourcevpc", "aws:sourcevpce",
                           "aws:sourcearn", "aws:sourceaccount", "aws:principalorgid",
                           "aws:principalaccount", "aws:userid", "aws:principalarn",
                           "aws:username"})
# Object-level actions: they apply to object ARNs (bucket/key), the others to the bucket.
_OBJECT_WORDS = ("Object", "MultipartUploadParts", "AbortMultipartUpload",
                 "BypassGovernanceRetention")


class PolicyDocumentError(ValueError):
    """A bucket policy that is not valid; the message is AWS-like."""


@dataclass(frozen=True)
class Caller:
    """Who asks, as a policy's principals see it: None user id for anonymous."""

    user_id: str | None
    username: str = ""


ANONYMOUS_CALLER = Caller(None)


@dataclass(frozen=True)
class Principals:
    everyone: bool = False
    account: bool = False  # every authenticated user of this server
    names: frozenset[str] = frozenset()  # user ids and usernames

    def match(self, caller: Caller) -> bool:
        if self.everyone:
            return True
        if caller.user_id is None:
            return False
        return self.account or caller.user_id in self.names or caller.username in self.names


@dataclass(frozen=True)
class PolicyStatement:
    allow: bool
    principals: Principals
    not_principal: bool
    actions: tuple[str, ...]
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    conditions: tuple[Clause, ...]
    sid: str = ""

    def applies(self, caller: Caller, names: Iterable[str], resource: str,
                values: ConditionValues) -> bool:
        if self.principals.match(caller) is self.not_principal:
            return False
        action_hit = any(glob_match(p, n) for p in self.actions for n in names)
        if action_hit is self.not_action:
            return False
        resource_hit = any(p == "*" or glob_match(p, resource) for p in self.resources)
        if resource_hit is self.not_resource:
            return False
        return not self.conditions or all_hold(self.conditions, values)

    @property
    def public(self) -> bool:
        if not self.allow:
            return False
        if not (self.not_principal or self.principals.everyone):
            return False
        return not any(clause.key in _PINNING_KEYS and not clause.negated
                       and not clause.if_exists for clause in self.conditions)


@dataclass(frozen=True)
class BucketPolicy:
    text: str  # the document as the client sent it (GetBucketPolicy answers it verbatim)
    statements: tuple[PolicyStatement, ...]

    @property
    def public(self) -> bool:
        return any(statement.public for statement in self.statements)

    def principal_names(self) -> frozenset[str]:
        """The user ids and usernames the policy names (an account number names every
        user: not listed), for PutBucketPolicy to check that they exist, as AWS does."""
        return frozenset(name for s in self.statements for name in s.principals.names
                         if not (name.isdigit() and len(name) == 12))

    def condition_keys(self) -> frozenset[str]:
        return frozenset(c.key for s in self.statements for c in s.conditions)

    @cached_property
    def reads_existing_tags(self) -> bool:
        """A Condition reads s3:ExistingObjectTag/<key> (the object's tags must be read
        before the decision)."""
        return any(key.startswith(EXISTING_TAG_PREFIX) for key in self.condition_keys())

    def verdict(self, caller: Caller, names: Iterable[str], resource: str,
                values: ConditionValues, *, public_allows: bool = True
                ) -> tuple[PolicyStatement | None, PolicyStatement | None]:
        """(the first Deny statement that applies, the first Allow that applies); with
        `public_allows` False, public Allow statements are ignored (RestrictPublicBuckets)."""
        names = tuple(names)
        allowed = None
        for statement in self.statements:
            if statement.allow and (allowed is not None
                                    or (not public_allows and statement.public)):
                continue
            if statement.applies(caller, names, resource, values):
                if not statement.allow:
                    return statement, allowed
                allowed = statement
        return None, allowed


def parse_bucket_policy(text: str | bytes, bucket: str) -> BucketPolicy:
    """The policy of `bucket` from its JSON text; PolicyDocumentError when not valid."""
    if isinstance(text, bytes):
        if len(text) > MAX_POLICY_BYTES:
            raise PolicyDocumentError("Policy exceeds the maximum allowed document size.")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise PolicyDocumentError("Policies must be valid JSON text.") from None
    if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
        raise PolicyDocumentError("Policy exceeds the maximum allowed document size.")
    stripped = text.strip()
    if not stripped.startswith("{"):
        raise PolicyDocumentError("Policies must be valid JSON and the first byte must be '{'")
    try:
        document = json.loads(stripped)
    except (ValueError, RecursionError):
        raise PolicyDocumentError("Policies must be valid JSON and the first byte must be "
                                  "'{'") from None
    return BucketPolicy(text, compile_document(document, bucket))


def compile_document(document: Any, bucket: str) -> tuple[PolicyStatement, ...]:
    if not isinstance(document, dict):
        raise PolicyDocumentError("Policies must be a JSON object")
    unknown = set(document) - {"Version", "Id", "Statement"}
    if unknown:
        raise PolicyDocumentError(f"Unknown field {sorted(map(str, unknown))[0]}")
    if "Version" in document and document["Version"] not in VERSIONS:
        raise PolicyDocumentError("The policy must contain a valid version string")
    if "Id" in document and not isinstance(document["Id"], str):
        raise PolicyDocumentError("Id must be a string")
    statements = document.get("Statement")
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list) or not statements:
        raise PolicyDocumentError("Missing required field Statement")
    if len(statements) > MAX_STATEMENTS:
        raise PolicyDocumentError("Policy has too many statements")
    compiled = tuple(_statement(s, bucket) for s in statements)
    sids = [s.sid for s in compiled if s.sid]
    if len(sids) != len(set(sids)):
        raise PolicyDocumentError("Statement IDs (SID) in a single policy must be unique")
    return compiled


def _one_of(statement: dict[str, Any], name: str, negated: str) -> tuple[Any, bool]:
    has, has_not = name in statement, negated in statement
    if has and has_not:
        raise PolicyDocumentError(f"Statement cannot have both {name} and {negated}")
    if not (has or has_not):
        raise PolicyDocumentError(f"Missing required field {name}")
    return (statement[negated], True) if has_not else (statement[name], False)


def _strings(value: Any, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise PolicyDocumentError(f"{field} must be a string or a non-empty list of strings")
    if not all(isinstance(item, str) and item for item in value):
        raise PolicyDocumentError(f"{field} must contain only non-empty strings")
    return tuple(value)


def _statement(raw: Any, bucket: str) -> PolicyStatement:
    if not isinstance(raw, dict):
        raise PolicyDocumentError("Statement must be an object")
    extra = set(raw) - _STATEMENT_KEYS
    if extra:
        raise PolicyDocumentError(f"Unknown field {sorted(map(str, extra))[0]}")
    sid = raw.get("Sid", "")
    if not isinstance(sid, str):
        raise PolicyDocumentError("Sid must be a string")
    effect = raw.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise PolicyDocumentError("Invalid effect: Effect must be Allow or Deny")
    principal_raw, not_principal = _one_of(raw, "Principal", "NotPrincipal")
    action_raw, not_action = _one_of(raw, "Action", "NotAction")
    resource_raw, not_resource = _one_of(raw, "Resource", "NotResource")
    actions = _strings(action_raw, "Action")
    for action in actions:
        _check_action(action)
    resources = _strings(resource_raw, "Resource")
    for resource in resources:
        _check_resource(resource, bucket)
    if not (not_action or not_resource):
        _check_applies(actions, resources)
    conditions: tuple[Clause, ...] = ()
    if "Condition" in raw:
        try:
            conditions = compile_conditions(raw["Condition"])
        except ConditionError as exc:
            raise PolicyDocumentError(str(exc)) from None
    return PolicyStatement(effect == "Allow", _principals(principal_raw), not_principal,
                           actions, not_action, resources, not_resource, conditions, sid)


def _principals(raw: Any) -> Principals:
    if raw == "*":
        return Principals(everyone=True)
    if not isinstance(raw, dict) or not raw:
        raise PolicyDocumentError("Invalid principal in policy")
    everyone = account = False
    names: set[str] = set()
    for kind, value in raw.items():
        if kind not in ("AWS", "CanonicalUser"):
            raise PolicyDocumentError("Invalid principal in policy")
        for entry in _strings(value, "Principal"):
            entry = entry.strip()
            if entry == "*":
                everyone = True
                continue
            if kind == "CanonicalUser":
                names.add(entry)
                continue
            arn = _IAM_ARN.match(entry)
            if arn is not None:
                if arn.group(2) == "root":
                    account = True
                else:
                    names.add(arn.group(3))
            elif re.fullmatch(r"[0-9A-Za-z._@+=,-]{1,128}", entry):
                names.add(entry)  # a user id (or an account number: this server)
                if entry.isdigit() and len(entry) == 12:
                    account = True
            else:
                raise PolicyDocumentError("Invalid principal in policy")
    return Principals(everyone, account, frozenset(names))


def _check_action(action: str) -> None:
    if action in ("*", "s3:*") or action in KNOWN_ACTIONS:
        if not action.startswith("svc:"):
            return
    elif action.startswith("s3:") and ("*" in action or "?" in action) and any(
            glob_match(action, known) for known in KNOWN_ACTIONS if known.startswith("s3:")):
        return
    raise PolicyDocumentError(f"Policy has invalid action: {action}")


def _check_resource(resource: str, bucket: str) -> None:
    if resource == "*":
        return
    if not resource.startswith(ARN_PREFIX):
        raise PolicyDocumentError("Policy has invalid resource")
    named = resource[len(ARN_PREFIX):]
    name, slash, _ = named.partition("/")
    if not glob_match(name, bucket):
        raise PolicyDocumentError("Policy has invalid resource")


def object_action(action: str) -> bool:
    return any(word in action for word in _OBJECT_WORDS)


def _check_applies(actions: tuple[str, ...], resources: tuple[str, ...]) -> None:
    """AWS refuses a statement none of whose actions apply to any of its resources
    (s3:GetObject on the bucket's ARN alone, s3:ListBucket on objects alone)."""
    if any("*" in a or "?" in a for a in actions) or "*" in resources:
        return
    object_resources = any("/" in r[len(ARN_PREFIX):] or r.endswith("*") for r in resources)
    bucket_resources = any("/" not in r[len(ARN_PREFIX):] for r in resources)
    for action in actions:
        if object_action(action) and object_resources:
            return
        if not object_action(action) and bucket_resources:
            return
    raise PolicyDocumentError("Action does not apply to any resource(s) in statement")
