"""Whether one set of policies grants nothing beyond another (pure; no I/O, no Twisted).

The admin API must never let a caller give anyone, itself included, more than the caller
holds: `excess(holder, other)` answers whether every request that `other`'s policies allow
is also allowed by `holder`'s, and names the first thing that may not be. The answer is
sound, not complete: "covered" is only ever said when it is true; when the rule cannot tell
it says "not covered", and the admin action is refused.

The rule, over the policy language of `policy.py` (Allow and Deny statements of action and
resource patterns with `*` and `?` wildcards; no conditions):

1. Each statement stands for its (action pattern, resource pattern) pairs.
2. Every Allow pair of `other` lies inside one Allow pair of `holder`: the holder's action
   pattern matches every name the other's does, and so does its resource pattern
   (`glob_covers`).
3. Every Deny pair of `holder` that may meet an Allow pair of `other` (`glob_overlaps` on
   actions, counting the aliases of `actions.ALIASES`, and on resources) lies inside a Deny
   pair of `other`: what the holder may not do, the other may not do either.

Why that suffices: a request `other` allows matches one of its Allow pairs and none of its
Deny pairs; by (2) some Allow of `holder` matches it; a Deny of `holder` matching it would
meet that Allow pair, so by (3) a Deny of `other` would match it too, which it does not.

S3 actions are only ever evaluated on `arn:aws:s3:::` resources (the authorizer turns the
resource `*` of ListBuckets into `arn:aws:s3:::`), so the resource `*` of a pair whose
action pattern starts with `s3:` is read as `arn:aws:s3:::*`: S3FullAccess (`s3:*` on `*`)
is covered by `s3:*` on `arn:aws:s3:::*`.

Pattern inclusion (`glob_covers`) aligns the outer pattern over the inner pattern's symbols:
an outer `*` takes any run of them, an outer `?` one literal or `?`, a literal itself. Runs
of wildcards are first put in a canonical order (`?` before `*`, one `*`). It may miss an
inclusion of unusual shapes; it never finds a false one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache

from objstore.iam.actions import ALIASES, COVERED_BY, names_for
from objstore.iam.policy import (
    ARN_PREFIX,
    BUILTIN_GRANTS,
    Policy,
    compile_policy,
    glob_match,
)

S3_ACTION_PREFIX = "s3:"
S3_RESOURCES = ARN_PREFIX + "*"

Pair = tuple[str, str]  # (action pattern, resource pattern)

ADMINISTRATOR_POLICIES = (compile_policy(BUILTIN_GRANTS["AdministratorAccess"][1]),)


def _canonical(pattern: str) -> str:
    """Each run of wildcards as its `?`s then at most one `*` (the same language)."""
    out: list[str] = []
    run: list[str] = []
    for char in pattern + "\0":  # a sentinel flushes the last run
        if char in "*?":
            run.append(char)
            continue
        if run:
            out.append("?" * run.count("?") + ("*" if "*" in run else ""))
            run = []
        out.append(char)
    return "".join(out[:-1])


def _search(start: tuple[int, int], goal: tuple[int, int],
            steps: Callable[[int, int], Iterable[tuple[int, int]]]) -> bool:
    """Whether `goal` is reachable from `start` (iterative: patterns may be long)."""
    seen = {start}
    stack = [start]
    while stack:
        state = stack.pop()
        if state == goal:
            return True
        for following in steps(*state):
            if following not in seen:
                seen.add(following)
                stack.append(following)
    return False


@lru_cache(maxsize=8192)
def glob_covers(outer: str, inner: str) -> bool:
    """True only if every string `inner` matches is matched by `outer`."""
    o, n = _canonical(outer), _canonical(inner)

    def steps(i: int, j: int) -> Iterator[tuple[int, int]]:
        if i == len(o):
            return
        if o[i] == "*":  # takes nothing more, or one more symbol of the inner pattern
            yield i + 1, j
            if j < len(n):
                yield i, j + 1
        elif j < len(n) and n[j] != "*" and (o[i] == "?" or o[i] == n[j]):
            # an inner `*` needs an outer `*`; an inner `?` an outer `?`
            yield i + 1, j + 1

    return _search((0, 0), (len(o), len(n)), steps)


@lru_cache(maxsize=8192)
def glob_overlaps(first: str, second: str) -> bool:
    """True if some string matches both patterns."""

    def steps(i: int, j: int) -> Iterator[tuple[int, int]]:
        a = first[i] if i < len(first) else None
        b = second[j] if j < len(second) else None
        if a == "*":  # matches nothing more, or one more symbol of the other pattern
            yield i + 1, j
            if b is not None:
                yield i, j + 1
        if b == "*":
            yield i, j + 1
            if a is not None:
                yield i + 1, j
        if a is not None and b is not None and "*" not in (a, b) and (
                a == "?" or b == "?" or a == b):
            yield i + 1, j + 1

    return _search((0, 0), (len(first), len(second)), steps)


def _alias_groups() -> tuple[frozenset[str], ...]:
    """Names that grant (or deny) the same request: aliases, and an AWS action with the
    spec action that covers it (a Deny of s3:Put* refuses s3:ListMultipartUploadParts)."""
    return tuple(names_for(action) for action in (*ALIASES, *COVERED_BY))


_ALIAS_GROUPS = _alias_groups()


def actions_overlap(first: str, second: str) -> bool:
    """True if some request action is matched by both patterns, directly or through one of
    its alias names (a Deny of s3:PutEncryptionConfiguration refuses
    s3:PutBucketEncryption)."""
    if glob_overlaps(first, second):
        return True
    return any(
        any(glob_match(first, name) for name in group)
        and any(glob_match(second, name) for name in group)
        for group in _ALIAS_GROUPS
    )


def _pair(action: str, resource: str) -> Pair:
    if resource == "*" and action.startswith(S3_ACTION_PREFIX):
        return action, S3_RESOURCES
    return action, resource


def statement_pairs(policies: Iterable[Policy], *, allow: bool) -> list[Pair]:
    """The (action, resource) pairs of every Allow (or every Deny) statement."""
    return [
        _pair(action, resource)
        for policy in policies
        for statement in policy.statements
        if statement.allow is allow
        for action in statement.actions
        for resource in statement.resources
    ]


def pair_covers(outer: Pair, inner: Pair) -> bool:
    return glob_covers(outer[0], inner[0]) and glob_covers(outer[1], inner[1])


def pairs_overlap(first: Pair, second: Pair) -> bool:
    return actions_overlap(first[0], second[0]) and glob_overlaps(first[1], second[1])


def excess(holder: Sequence[Policy], other: Sequence[Policy]) -> str | None:
    """None when `other` allows nothing that `holder` does not; else what it may allow
    beyond, in words ("s3:GetObject on arn:aws:s3:::b/*")."""
    allowed = statement_pairs(holder, allow=True)
    wanted = statement_pairs(other, allow=True)
    for pair in wanted:
        if not any(pair_covers(mine, pair) for mine in allowed):
            return f"{pair[0]} on {pair[1]}"
    denied_too = statement_pairs(other, allow=False)
    for deny in statement_pairs(holder, allow=False):
        if any(pairs_overlap(deny, pair) for pair in wanted) and not any(
            pair_covers(theirs, deny) for theirs in denied_too
        ):
            return f"{deny[0]} on {deny[1]} (denied to you)"
    return None


def covers(holder: Sequence[Policy], other: Sequence[Policy]) -> bool:
    """True only if every request `other` allows, `holder` allows too."""
    return excess(holder, other) is None


def administrator_equivalent(policies: Sequence[Policy]) -> bool:
    """True if these policies allow everything AdministratorAccess allows (every action on
    every resource, the administrator-only endpoints included)."""
    return covers(policies, ADMINISTRATOR_POLICIES)
