"""Public links as bucket policy statements (pure): what `objstore anonymous set
download|upload|public|none BUCKET[/PREFIX]` writes, what `list` shows, and which prefixes
of a bucket anyone may read (the console's question).

The statements are the ones `mc anonymous set` writes, one pair per prefix, recognised by
their Sid (`ObjstoreAnonymous<Read|Write><Bucket|Objects><hash of the prefix>`), so the
operator's other statements of the same policy are never touched:

- download: s3:GetBucketLocation and s3:ListBucket on the bucket (with a prefix, only
  listings under it: `s3:prefix` StringLike `PREFIX*`), s3:GetObject on `PREFIX*`;
- upload: s3:GetBucketLocation and s3:ListBucketMultipartUploads on the bucket,
  s3:PutObject, s3:AbortMultipartUpload, s3:ListMultipartUploadParts and
  s3:DeleteObject on `PREFIX*`;
- public: both; none: neither (the policy is deleted when nothing else remains).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from objstore.iam.bucket_policy import parse_bucket_policy
from objstore.iam.policy import glob_match

ACCESS_LEVELS = ("none", "download", "upload", "public")
SID_PREFIX = "ObjstoreAnonymous"
_READ_BUCKET = ["s3:GetBucketLocation", "s3:ListBucket"]
_READ_OBJECTS = ["s3:GetObject"]
_WRITE_BUCKET = ["s3:GetBucketLocation", "s3:ListBucketMultipartUploads"]
_WRITE_OBJECTS = ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
                  "s3:DeleteObject"]
POLICY_VERSION = "2012-10-17"


class AnonymousAccessError(ValueError):
    """An access level or prefix that can not be written."""


def prefix_tag(prefix: str) -> str:
    return hashlib.sha256(prefix.encode("utf-8")).hexdigest()[:16]


def _ours(statement: Any) -> bool:
    return isinstance(statement, dict) and str(statement.get("Sid", "")).startswith(
        SID_PREFIX)


def _statements(bucket: str, prefix: str, access: str) -> list[dict[str, Any]]:
    tag = prefix_tag(prefix)
    arn = f"arn:aws:s3:::{bucket}"
    found: list[dict[str, Any]] = []

    def add(kind: str, actions: list[str], resource: str,
            condition: dict[str, Any] | None = None) -> None:
        statement: dict[str, Any] = {"Sid": f"{SID_PREFIX}{kind}{tag}", "Effect": "Allow",
                                     "Principal": {"AWS": ["*"]}, "Action": actions,
                                     "Resource": [resource]}
        if condition:
            statement["Condition"] = condition
        found.append(statement)

    if access in ("download", "public"):
        condition = {"StringLike": {"s3:prefix": [f"{prefix}*"]}} if prefix else None
        add("ReadBucket", _READ_BUCKET, arn, condition)
        add("ReadObjects", _READ_OBJECTS, f"{arn}/{prefix}*")
    if access in ("upload", "public"):
        add("WriteBucket", _WRITE_BUCKET, arn)
        add("WriteObjects", _WRITE_OBJECTS, f"{arn}/{prefix}*")
    return found


def set_anonymous(text: str | None, bucket: str, prefix: str, access: str) -> str | None:
    """The policy text after setting `access` on `prefix` (None: no policy remains). The
    other statements of `text` stay as they are."""
    if access not in ACCESS_LEVELS:
        raise AnonymousAccessError(f"access must be one of {', '.join(ACCESS_LEVELS)}")
    if "*" in prefix or "?" in prefix:
        raise AnonymousAccessError("a prefix may not contain * or ?")
    document: dict[str, Any] = {"Version": POLICY_VERSION, "Statement": []}
    if text:
        document = json.loads(text)
        statements = document.get("Statement")
        if isinstance(statements, dict):
            statements = [statements]
        document["Statement"] = list(statements or [])
    tag = prefix_tag(prefix)
    kept = [s for s in document["Statement"]
            if not (_ours(s) and str(s["Sid"]).endswith(tag))]
    kept += _statements(bucket, prefix, access)
    if not kept:
        return None
    document["Statement"] = kept
    result = json.dumps(document, separators=(",", ":"))
    parse_bucket_policy(result, bucket)  # PolicyDocumentError if the operator's is bad
    return result


def anonymous_rules(text: str | None) -> list[dict[str, str]]:
    """The prefixes this command set, with their level: [{prefix, access}] by prefix."""
    if not text:
        return []
    try:
        statements = json.loads(text).get("Statement", [])
    except (ValueError, AttributeError):
        return []
    if isinstance(statements, dict):
        statements = [statements]
    levels: dict[str, set[str]] = {}
    for statement in statements:
        if not _ours(statement) or "Objects" not in str(statement["Sid"]):
            continue
        resources = statement.get("Resource")
        resource = resources[0] if isinstance(resources, list) else resources
        if not isinstance(resource, str) or "/" not in resource:
            continue
        prefix = resource.split("/", 1)[1].removesuffix("*")
        kind = "download" if "Read" in str(statement["Sid"]) else "upload"
        levels.setdefault(prefix, set()).add(kind)
    return [{"prefix": prefix,
             "access": "public" if len(kinds) == 2 else next(iter(kinds))}
            for prefix, kinds in sorted(levels.items())]


def public_prefixes(text: str | None, bucket: str) -> list[str]:
    """The key prefixes anyone may read (s3:GetObject allowed to `*` without a pinning
    condition) under any statement of the policy, the operator's included. `""` is the
    whole bucket."""
    if not text:
        return []
    try:
        policy = parse_bucket_policy(text, bucket)
    except ValueError:
        return []
    found: set[str] = set()
    for statement in policy.statements:
        if not statement.public or statement.not_action or statement.not_resource:
            continue
        if not any(glob_match(pattern, "s3:GetObject") for pattern in statement.actions):
            continue
        for resource in statement.resources:
            if resource == "*":
                found.add("")
                continue
            _, slash, key = resource.partition("/")
            if slash and key.endswith("*") and "*" not in key[:-1] and "?" not in key:
                found.add(key[:-1])
    return sorted(found)
