"""Access control lists as rules (pure): grants, canned ACLs, what a permission allows.

An ACL is the owner's id and a list of grants (grantee, permission). Grantees: a user of
this server by id (AWS's canonical user id: ListBuckets shows it as Owner ID), everyone
(the AllUsers group: anonymous callers included) or every authenticated user (the
AuthenticatedUsers group). Permissions: READ, WRITE, READ_ACP, WRITE_ACP, FULL_CONTROL;
which actions each allows depends on whether the ACL is a bucket's or an object's, as on
AWS (a bucket's WRITE lets the grantee write and delete objects in it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
LOG_DELIVERY = "http://acs.amazonaws.com/groups/s3/LogDelivery"
GROUPS = (ALL_USERS, AUTHENTICATED_USERS, LOG_DELIVERY)
PUBLIC_GROUPS = (ALL_USERS, AUTHENTICATED_USERS)
PERMISSIONS = ("READ", "WRITE", "READ_ACP", "WRITE_ACP", "FULL_CONTROL")
CANNED = ("private", "public-read", "public-read-write", "authenticated-read",
          "aws-exec-read", "bucket-owner-read", "bucket-owner-full-control",
          "log-delivery-write")
GRANT_HEADERS = {
    "x-amz-grant-read": "READ", "x-amz-grant-write": "WRITE",
    "x-amz-grant-read-acp": "READ_ACP", "x-amz-grant-write-acp": "WRITE_ACP",
    "x-amz-grant-full-control": "FULL_CONTROL",
}

_BUCKET_ACTIONS = {
    "READ": ("s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"),
    "WRITE": ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion",
              "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"),
    "READ_ACP": ("s3:GetBucketAcl",),
    "WRITE_ACP": ("s3:PutBucketAcl",),
}
_OBJECT_ACTIONS = {
    "READ": ("s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectAttributes",
             "s3:GetObjectVersionAttributes"),
    "READ_ACP": ("s3:GetObjectAcl", "s3:GetObjectVersionAcl"),
    "WRITE_ACP": ("s3:PutObjectAcl", "s3:PutObjectVersionAcl"),
}


# Every action an object's ACL can grant (none of them a write: WRITE on an object means
# nothing; writing a key is the bucket ACL's WRITE).
OBJECT_ACL_ACTIONS = frozenset(a for actions in _OBJECT_ACTIONS.values() for a in actions)


class AclError(ValueError):
    """An ACL that can not be built (unknown canned name, bad grantee); the S3 layer
    answers InvalidArgument or MalformedACLError."""


@dataclass(frozen=True)
class Grant:
    grantee: str  # a user id, or one of GROUPS
    permission: str
    display_name: str = ""

    @property
    def group(self) -> bool:
        return self.grantee in GROUPS


@dataclass(frozen=True)
class Acl:
    owner_id: str
    grants: tuple[Grant, ...]

    @property
    def public(self) -> bool:
        return any(g.grantee in PUBLIC_GROUPS for g in self.grants)

    def to_json(self) -> str:
        return json.dumps({"owner": self.owner_id,
                           "grants": [[g.grantee, g.permission, g.display_name]
                                      for g in self.grants]}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Acl:
        data = json.loads(text)
        return cls(str(data["owner"]), tuple(Grant(str(g[0]), str(g[1]), str(g[2]))
                                             for g in data["grants"]))


def owner_only(owner_id: str) -> Acl:
    return Acl(owner_id, (Grant(owner_id, "FULL_CONTROL"),))


def canned_acl(name: str, owner_id: str, bucket_owner_id: str | None = None) -> Acl:
    """The grants a canned ACL stands for (bucket_owner_id: of an object's bucket)."""
    name = name.strip()
    owner = Grant(owner_id, "FULL_CONTROL")
    grants: tuple[Grant, ...]
    if name == "private":
        grants = (owner,)
    elif name == "public-read":
        grants = (owner, Grant(ALL_USERS, "READ"))
    elif name == "public-read-write":
        grants = (owner, Grant(ALL_USERS, "READ"), Grant(ALL_USERS, "WRITE"))
    elif name == "authenticated-read":
        grants = (owner, Grant(AUTHENTICATED_USERS, "READ"))
    elif name == "aws-exec-read":
        grants = (owner,)
    elif name == "log-delivery-write":
        grants = (owner, Grant(LOG_DELIVERY, "WRITE"), Grant(LOG_DELIVERY, "READ_ACP"))
    elif name in ("bucket-owner-read", "bucket-owner-full-control"):
        permission = "READ" if name == "bucket-owner-read" else "FULL_CONTROL"
        grants = (owner,)
        if bucket_owner_id and bucket_owner_id != owner_id:
            grants += (Grant(bucket_owner_id, permission),)
    else:
        raise AclError(f"Unknown canned ACL {name!r}")
    return Acl(owner_id, grants)


def header_grants(headers: Mapping[str, str]) -> tuple[Grant, ...]:
    """The grants of x-amz-grant-* headers: `id="..."`, `uri="..."` (emailAddress is not
    supported: this server knows no e-mail addresses)."""
    grants: list[Grant] = []
    for header, permission in GRANT_HEADERS.items():
        value = headers.get(header)
        if value is None:
            continue
        for item in value.split(","):
            kind, eq, raw = item.strip().partition("=")
            grantee = raw.strip().strip('"')
            if not eq or not grantee:
                raise AclError(f"Invalid grantee in {header}")
            kind = kind.strip().lower()
            if not printable_grantee(grantee):
                raise AclError(f"Invalid grantee in {header}")
            if kind == "id" or kind == "uri" and grantee in GROUPS:
                grants.append(Grant(grantee, permission))
            else:
                raise AclError(f"Invalid grantee in {header}: {kind}")
    return tuple(grants)


def printable_grantee(grantee: str) -> bool:
    """A grantee id an ACL document can carry: at most 256 characters, none a control
    character (XML 1.0 can not hold most of them)."""
    return len(grantee) <= 256 and all(" " <= c != "\x7f" and not "\ud800" <= c <= "\udfff"
                                       for c in grantee)


def allowed_actions(permission: str, *, bucket: bool) -> tuple[str, ...]:
    table = _BUCKET_ACTIONS if bucket else _OBJECT_ACTIONS
    if permission == "FULL_CONTROL":
        return tuple(a for actions in table.values() for a in actions)
    return table.get(permission, ())


def acl_allows(acl: Acl, user_id: str | None, names: Iterable[str], *, bucket: bool,
               ignore_public: bool) -> Grant | None:
    """The grant of `acl` that allows one of `names` to the caller (None user id:
    anonymous), or None. With `ignore_public`, grants to AllUsers and AuthenticatedUsers
    count for nothing (IgnorePublicAcls)."""
    wanted = frozenset(names)
    for grant in acl.grants:
        if grant.grantee == ALL_USERS:
            if ignore_public:
                continue
        elif grant.grantee == AUTHENTICATED_USERS:
            if ignore_public or user_id is None:
                continue
        elif grant.grantee != user_id or user_id is None:
            continue
        if wanted.intersection(allowed_actions(grant.permission, bucket=bucket)):
            return grant
    return None
