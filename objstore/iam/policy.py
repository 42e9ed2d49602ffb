"""Policy documents: validation and evaluation (pure; no I/O, no Twisted).

A document is IAM-shaped: Version "2012-10-17" and a list of statements with Effect
(Allow/Deny), Action (list of names; `*`, `s3:*`, `svc:*`, or a name with `*`/`?`
wildcards that matches at least one known action) and Resource (list: `*`, or
`arn:aws:s3:::<bucket pattern>` / `arn:aws:s3:::<bucket pattern>/<key pattern>` with `*`
and `?` wildcards). Evaluation: an explicit Deny in any document wins over any Allow;
nothing allowed means denied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from objstore.iam.actions import KNOWN_ACTIONS, names_for

POLICY_VERSION = "2012-10-17"
ARN_PREFIX = "arn:aws:s3:::"
_STATEMENT_KEYS = frozenset({"Sid", "Effect", "Action", "Resource"})
_BUCKET_PATTERN = re.compile(r"^[a-z0-9.*?-]{1,63}$")


class PolicyError(ValueError):
    """A document that fails validation; the message names the culprit."""


@lru_cache(maxsize=4096)
def _glob(pattern: str) -> tuple[re.Pattern[str], ...]:
    """The pieces of `pattern` between its `*`s, each a regex of fixed width (`?`: one
    character). One regex with a `.*` per star backtracks exponentially on patterns such
    as `*?*?*?...` (ten pairs took 13 s against a 40-character ARN, on the request path of
    every call its holder makes)."""
    return tuple(re.compile("".join("." if c == "?" else re.escape(c) for c in piece),
                            re.DOTALL) for piece in pattern.split("*"))


def glob_match(pattern: str, value: str) -> bool:
    """`value` matches `pattern` (`*`: any run of characters, `?`: one character). Each
    piece between stars has a fixed width (its length), so matching each middle piece at
    its leftmost place is never wrong: linear time, no backtracking. The two shapes every
    request meets (an exact name, one trailing star: `s3:*`, `arn:aws:s3:::bucket/*`) are
    string comparisons."""
    if pattern == value:
        return True
    if pattern and pattern.find("*") == len(pattern) - 1 and "?" not in pattern:
        return value.startswith(pattern[:-1])
    pieces = _glob(pattern)
    if len(pieces) == 1:
        return pieces[0].fullmatch(value) is not None
    first, *middle, last = pieces
    head = first.match(value)
    end = len(value) - len(pattern) + pattern.rfind("*") + 1  # where the last piece starts
    if head is None or end < head.end() or last.fullmatch(value, end) is None:
        return False
    position = head.end()
    for piece in middle:
        found = piece.search(value, position, end)
        if found is None:
            return False
        position = found.end()
    return True


def _string_list(statement: Mapping[str, Any], field: str, index: int) -> list[str]:
    value = statement.get(field)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise PolicyError(f"Statement[{index}].{field} must be a non-empty array of strings")
    if not all(isinstance(item, str) and item for item in value):
        raise PolicyError(f"Statement[{index}].{field} must contain only non-empty strings")
    return value


def _check_action(action: str, index: int) -> None:
    if action in ("*", "s3:*", "svc:*") or action in KNOWN_ACTIONS:
        return
    if ("*" in action or "?" in action) and any(glob_match(action, a) for a in KNOWN_ACTIONS):
        return
    raise PolicyError(f"Statement[{index}].Action: unknown action {action!r}")


def _check_resource(resource: str, index: int) -> None:
    if resource == "*":
        return
    if not resource.startswith(ARN_PREFIX):
        raise PolicyError(f"Statement[{index}].Resource: invalid ARN {resource!r} "
                          f"(expected '*' or {ARN_PREFIX}<bucket>[/<key>])")
    bucket, _, _key = resource[len(ARN_PREFIX):].partition("/")
    if not _BUCKET_PATTERN.match(bucket):
        raise PolicyError(f"Statement[{index}].Resource: invalid bucket in ARN {resource!r}")


def validate(document: Any) -> None:
    """Raise PolicyError unless `document` is a valid policy document."""
    if not isinstance(document, dict):
        raise PolicyError("the policy document must be a JSON object")
    _check_text(document)
    unknown = set(document) - {"Version", "Statement", "Id"}
    if unknown:
        raise PolicyError(f"unknown policy field {sorted(unknown)[0]!r}")
    if document.get("Version") != POLICY_VERSION:
        raise PolicyError(f"Version must be {POLICY_VERSION!r}")
    statements = document.get("Statement")
    if not isinstance(statements, list) or not statements:
        raise PolicyError("Statement must be a non-empty array")
    for index, statement in enumerate(statements):
        if not isinstance(statement, dict):
            raise PolicyError(f"Statement[{index}] must be an object")
        extra = set(statement) - _STATEMENT_KEYS
        if extra:
            raise PolicyError(f"Statement[{index}]: unsupported field {sorted(extra)[0]!r}")
        if "Sid" in statement and not isinstance(statement["Sid"], str):
            raise PolicyError(f"Statement[{index}].Sid must be a string")
        if statement.get("Effect") not in ("Allow", "Deny"):
            raise PolicyError(f"Statement[{index}].Effect must be 'Allow' or 'Deny'")
        for action in _string_list(statement, "Action", index):
            _check_action(action, index)
        for resource in _string_list(statement, "Resource", index):
            _check_resource(resource, index)


def _check_text(value: Any) -> None:
    """Every string is Unicode text the store can encode: JSON's "\\udcff" escapes decode
    to lone surrogates, which no database takes."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise PolicyError(f"{value!r} is not valid Unicode text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


@dataclass(frozen=True)
class Statement:
    allow: bool
    actions: tuple[str, ...]
    resources: tuple[str, ...]

    def matches(self, action_names: frozenset[str], resource: str) -> bool:
        action_hit = any(
            glob_match(pattern, name) for pattern in self.actions for name in action_names
        )
        if not action_hit:
            return False
        return any(pattern == "*" or glob_match(pattern, resource)
                   for pattern in self.resources)


@dataclass(frozen=True)
class Policy:
    statements: tuple[Statement, ...]


def compile_policy(document: Mapping[str, Any]) -> Policy:
    """A validated document in the form evaluation uses."""
    statements = []
    for statement in document["Statement"]:
        actions = statement["Action"]
        resources = statement["Resource"]
        statements.append(Statement(
            allow=statement["Effect"] == "Allow",
            actions=tuple([actions] if isinstance(actions, str) else actions),
            resources=tuple([resources] if isinstance(resources, str) else resources),
        ))
    return Policy(tuple(statements))


def is_allowed(policies: Iterable[Policy], action: str, resource: str) -> bool:
    """Explicit Deny anywhere wins; otherwise allowed iff some statement allows."""
    names = names_for(action)
    allowed = False
    for policy in policies:
        for statement in policy.statements:
            if statement.matches(names, resource):
                if not statement.allow:
                    return False
                allowed = True
    return allowed


def allowed_actions(policies: Sequence[Policy]) -> list[str]:
    """The union of Allow action patterns, as /admin/me reports effective_actions."""
    found: dict[str, None] = {}
    for policy in policies:
        for statement in policy.statements:
            if statement.allow:
                for action in statement.actions:
                    found.setdefault(action, None)
    return sorted(found)


BUILTIN_GRANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "AdministratorAccess": (
        "Every action on every resource, S3 and administration.",
        {"Version": POLICY_VERSION,
         "Statement": [{"Effect": "Allow", "Action": ["*"], "Resource": ["*"]}]},
    ),
    "S3FullAccess": (
        "Every S3 action on every bucket and object.",
        {"Version": POLICY_VERSION,
         "Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["*"]}]},
    ),
    "S3ReadOnlyAccess": (
        "Read and list every bucket and object.",
        {"Version": POLICY_VERSION,
         "Statement": [{"Effect": "Allow", "Action": ["s3:Get*", "s3:List*"],
                        "Resource": ["*"]}]},
    ),
}
