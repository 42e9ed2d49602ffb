"""The ACL a request sets: canned `x-amz-acl`, `x-amz-grant-*` headers or an
AccessControlPolicy body (`requested_acl`), and the ACL a new object version is born with
(`written_acl`: PutObject, CopyObject, CreateMultipartUpload, POST form uploads).

As on AWS, what a write may set depends on the bucket (`BucketAccess`):
- ownership BucketOwnerEnforced (ACLs disabled, the default): only an ACL that leaves the
  owner alone with FULL_CONTROL (`private`, `bucket-owner-full-control`, no grant
  headers) is accepted, and nothing is stored; anything else is
  AccessControlListNotSupported;
- ACLs enabled (ObjectWriter, BucketOwnerPreferred): the ACL is stored with the version
  (`ObjectRecord.acl`, None for the owner's alone); a public one (a grant to AllUsers or
  AuthenticatedUsers) is AccessDenied while the public access block has BlockPublicAcls.
A request without ACL headers reads nothing (no bucket lookup): the write path of buckets
that never use ACLs is what it was. CopyObject never copies the source's ACL (AWS does
not): the copy gets the request's, or the owner's alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from objstore.errors import S3Error
from objstore.iam.acl_rules import (
    GRANT_HEADERS,
    GROUPS,
    PERMISSIONS,
    Acl,
    AclError,
    Grant,
    canned_acl,
    header_grants,
    owner_only,
    printable_grantee,
)
from objstore.iam.decision import BucketAccess
from objstore.s3.call import S3Call
from objstore.s3.objects_xml import parse_access_control_policy

# What a bucket with ACLs disabled accepts: the canned ACLs that leave the owner alone.
OWNER_ONLY_CANNED_ACLS = frozenset({"private", "bucket-owner-full-control"})


def has_acl_headers(headers: Mapping[str, str]) -> bool:
    return "x-amz-acl" in headers or any(name in headers for name in GRANT_HEADERS)


def requested_acl(headers: Mapping[str, str], body: bytes, owner_id: str,
                  bucket_owner_id: str | None = None) -> Acl | None:
    """The ACL a request sets (canned header, grant headers or XML body; None: none).
    InvalidArgument for an unknown canned ACL or grantee, InvalidRequest for both a canned
    ACL and grant headers, MalformedACLError for a body that is not a valid policy."""
    canned = headers.get("x-amz-acl")
    try:
        grants = header_grants(headers)
        if canned is not None:
            if grants:
                raise S3Error("InvalidRequest", "Specifying both Canned ACLs and Header "
                              "Grants is not allowed")
            return canned_acl(canned, owner_id, bucket_owner_id)
    except AclError as exc:
        raise S3Error("InvalidArgument", str(exc), ArgumentName="x-amz-acl") from None
    if grants:
        return Acl(owner_id, grants)
    if not body.strip():
        return None
    policy = parse_access_control_policy(body)
    parsed = []
    for grant in policy.grants:
        if grant.permission not in PERMISSIONS or not grant.grantee_id \
                or not printable_grantee(grant.grantee_id):
            raise S3Error("MalformedACLError")
        if grant.grantee_type.endswith("Group") and grant.grantee_id not in GROUPS:
            raise S3Error("MalformedACLError")
        parsed.append(Grant(grant.grantee_id, grant.permission))
    return Acl(owner_id, tuple(parsed))


def check_acl_headers(headers: Mapping[str, str]) -> None:
    """Refuse (AccessControlListNotSupported) ACL headers that grant anything to anyone
    but the owner: what a bucket with ACLs disabled accepts."""
    canned = headers.get("x-amz-acl")
    if canned is not None and canned.strip() not in OWNER_ONLY_CANNED_ACLS:
        raise S3Error("AccessControlListNotSupported")
    if any(name in headers for name in GRANT_HEADERS):
        raise S3Error("AccessControlListNotSupported")


def stored_acl(access: BucketAccess, acl: Acl) -> str | None:
    """What a version stores for `acl` on a bucket with ACLs enabled (None: the owner's
    alone); AccessDenied for a public ACL under BlockPublicAcls."""
    if acl.grants == owner_only(acl.owner_id).grants:
        return None
    if acl.public and access.block.block_public_acls:
        raise S3Error("AccessDenied", "Access Denied: the public access block of this "
                      "bucket blocks public ACLs (BlockPublicAcls).")
    return acl.to_json()


async def check_grantees(call: S3Call, acl: Acl) -> None:
    """Every user a grant names is a user of this server (InvalidArgument "Invalid id"
    otherwise, as AWS answers an unknown canonical user id)."""
    for grant in acl.grants:
        if grant.group or grant.grantee == acl.owner_id:
            continue
        if not await call.services.objects.known_user(grant.grantee):
            raise S3Error("InvalidArgument", "Invalid id", ArgumentName="CanonicalUser/ID",
                          ArgumentValue=grant.grantee)


async def written_acl(call: S3Call, headers: Mapping[str, str]) -> str | None:
    """The ACL a new version of `call.key` is born with (`ObjectRecord.acl`), from the
    request's ACL headers; None when it has none or they say the owner's alone."""
    if not has_acl_headers(headers):
        return None
    access = await call.services.authorizer.bucket_access(call.bucket)
    if access is None or not access.acls_enabled:
        check_acl_headers(headers)
        return None
    acl = requested_acl(headers, b"", call.principal.user_id, access.owner_id)
    if acl is None:
        return None
    await check_grantees(call, acl)
    return stored_acl(access, acl)
