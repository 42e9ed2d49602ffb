"""Bucket and object ACLs: GetBucketAcl, PutBucketAcl, GetObjectAcl, PutObjectAcl, and the
ACL headers of CreateBucket.

Whether ACLs count is the bucket's object ownership setting (`s3/bucket_policy.py`):
BucketOwnerEnforced (the default, and every bucket made before the setting existed) has
ACLs disabled, as on AWS: reading an ACL answers the owner's FULL_CONTROL, and setting
one succeeds only when it says exactly that (`private`, `bucket-owner-full-control`, or a
policy with the owner's single FULL_CONTROL grant); anything else is
AccessControlListNotSupported. With ObjectWriter or BucketOwnerPreferred a bucket's ACL
(canned `x-amz-acl`, `x-amz-grant-*` headers or an AccessControlPolicy body: canonical
user ids of this server, AllUsers, AuthenticatedUsers) is stored as the bucket document
`acl` and evaluated on every request by the one decision (`iam/decision.py`); a public
one is refused (AccessDenied) while the public access block has BlockPublicAcls.
On such buckets each object version carries its own ACL (`ObjectRecord.acl`, set by
PutObjectAcl, with `versionId` on a given version, or born with the version from the ACL
headers of its write: `s3/acl_headers.py`), which the decision reads only when nothing
else allowed a request on the object. GetObjectAcl answers it (the owner's FULL_CONTROL
while ACLs are disabled, whatever was stored before).
"""

from __future__ import annotations

from lxml import etree

from objstore.errors import S3Error
from objstore.http.error_xml import serialize, sub_element
from objstore.iam.acl_rules import Acl, owner_only
from objstore.iam.bucket_access import ACL_KEY, OWNERSHIP_KEY
from objstore.iam.decision import BucketAccess
from objstore.iam.public_access import OWNER_ENFORCED
from objstore.s3.acl_headers import (
    check_acl_headers,
    check_grantees,
    requested_acl,
    stored_acl,
)
from objstore.s3.bucket_policy import checked_ownership
from objstore.s3.call import S3Call, S3Response
from objstore.s3.objects import request_headers, version_header, version_id_param
from objstore.s3.objects_xml import (
    XSI_NS,
    XSI_TYPE,
    owner_only_full_control,
    parse_access_control_policy,
)
from objstore.s3.xml import s3_root

XML = "application/xml"


def accept_acl(call: S3Call, owner_id: str) -> None:
    """Refuse an ACL (headers or body) that grants anything beyond the owner's
    FULL_CONTROL."""
    check_acl_headers(request_headers(call))
    body = call.body()
    if body.strip():
        policy = parse_access_control_policy(body)
        if not owner_only_full_control(policy, owner_id):
            raise S3Error("AccessControlListNotSupported")


async def _access(call: S3Call) -> BucketAccess:
    access = await call.services.authorizer.bucket_access(call.bucket)
    if access is None:
        raise S3Error("NoSuchBucket", BucketName=call.bucket)
    return access


def acl_document(acl: Acl, owner_name: str) -> bytes:
    root = s3_root("AccessControlPolicy")
    owner = sub_element(root, "Owner")
    sub_element(owner, "ID", acl.owner_id)
    sub_element(owner, "DisplayName", owner_name)
    listed = sub_element(root, "AccessControlList")
    for grant in acl.grants:
        element = sub_element(listed, "Grant")
        grantee = etree.SubElement(element, "Grantee", nsmap={"xsi": XSI_NS})
        if grant.group:
            grantee.set(XSI_TYPE, "Group")
            sub_element(grantee, "URI", grant.grantee)
        else:
            grantee.set(XSI_TYPE, "CanonicalUser")
            sub_element(grantee, "ID", grant.grantee)
            if grant.grantee == acl.owner_id:
                sub_element(grantee, "DisplayName", owner_name)
        sub_element(element, "Permission", grant.permission)
    return serialize(root)


async def get_bucket_acl(call: S3Call) -> S3Response:
    owner_id, owner_name = await call.services.objects.bucket_owner(call.bucket)
    access = await call.services.authorizer.bucket_access(call.bucket)
    acl = access.acl if access is not None and access.acls_enabled else None
    return S3Response(body=acl_document(acl or owner_only(owner_id), owner_name),
                      content_type=XML)


async def put_bucket_acl(call: S3Call) -> S3Response:
    access = await _access(call)
    acl = requested_acl(request_headers(call), call.body(), access.owner_id)
    if acl is None:
        raise S3Error("MissingSecurityHeader", "Your request was missing a required header",
                      MissingHeaderName="x-amz-acl")
    await store_bucket_acl(call, access, acl)
    return S3Response()


async def store_bucket_acl(call: S3Call, access: BucketAccess, acl: Acl) -> None:
    """Store `acl` as the bucket's, as its ownership setting and public access block
    allow (nothing is stored while ACLs are disabled: only the owner's ACL is accepted)."""
    if not access.acls_enabled:
        if acl.grants != owner_only(access.owner_id).grants:
            raise S3Error("AccessControlListNotSupported")
        return
    if acl.public and access.block.block_public_acls:
        raise S3Error("AccessDenied", "Access Denied: the public access block of this "
                      "bucket blocks public ACLs (BlockPublicAcls).")
    await check_grantees(call, acl)
    await call.services.bucket_config.put_config(call.caller, call.bucket, ACL_KEY,
                                                 acl.to_json())


async def get_object_acl(call: S3Call) -> S3Response:
    record = await call.services.objects.head(call.bucket, call.key, version_id_param(call))
    access = await call.services.authorizer.bucket_access(call.bucket)
    acl = owner_only(record.owner_id)
    if record.acl and access is not None and access.acls_enabled:
        acl = Acl.from_json(record.acl)
    return S3Response(headers=version_header(record),
                      body=acl_document(acl, record.owner_name), content_type=XML)


async def put_object_acl(call: S3Call) -> S3Response:
    version_id = version_id_param(call)
    record = await call.services.objects.head(call.bucket, call.key, version_id)
    access = await _access(call)
    if not access.acls_enabled:
        accept_acl(call, record.owner_id)
        return S3Response(headers=version_header(record))
    acl = requested_acl(request_headers(call), call.body(), record.owner_id,
                        access.owner_id)
    if acl is None:
        raise S3Error("MissingSecurityHeader", "Your request was missing a required header",
                      MissingHeaderName="x-amz-acl")
    await check_grantees(call, acl)
    stored = await call.services.versions.put_acl(
        call.caller, call.bucket, call.key, record.version_id, stored_acl(access, acl))
    return S3Response(headers=version_header(stored))


def creation_access(call: S3Call) -> tuple[str | None, Acl | None]:
    """CreateBucket's `x-amz-object-ownership` and ACL headers, checked before the bucket
    is made: with ACLs disabled (the default) only the owner's ACL is accepted
    (InvalidBucketAclWithObjectOwnership otherwise, as AWS answers)."""
    raw = call.header("x-amz-object-ownership")
    ownership = None if raw is None else checked_ownership(raw)
    acl = requested_acl(request_headers(call), b"", call.principal.user_id)
    if acl is None or acl.grants == owner_only(call.principal.user_id).grants:
        return ownership, None
    if (ownership or OWNER_ENFORCED) == OWNER_ENFORCED:
        raise S3Error("InvalidBucketAclWithObjectOwnership")
    return ownership, acl


async def store_creation_access(call: S3Call, ownership: str | None, acl: Acl | None
                                ) -> None:
    if ownership is not None:
        await call.services.bucket_config.put_config(call.caller, call.bucket,
                                                     OWNERSHIP_KEY, ownership)
    if acl is not None:
        await store_bucket_acl(call, await _access(call), acl)
