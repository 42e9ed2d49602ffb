"""Bucket and object ACLs: GetBucketAcl, PutBucketAcl, GetObjectAcl, PutObjectAcl.

This server has no ACLs: access is governed by grants (IAM-style policies), like an AWS
bucket whose Object Ownership is BucketOwnerEnforced (the AWS default since 2023). So, as
there, reading an ACL answers the owner with FULL_CONTROL (tools that probe ACLs keep
working), and setting one succeeds only when it says exactly that (the canned `private` or
`bucket-owner-full-control`, or a policy with the owner's single FULL_CONTROL grant); any
other ACL is refused with AccessControlListNotSupported. Nothing is ever stored.
"""

from __future__ import annotations

from objstore.errors import S3Error
from objstore.s3.call import S3Call, S3Response
from objstore.s3.objects import (
    check_acl_headers,
    request_headers,
    version_header,
    version_id_param,
)
from objstore.s3.objects_xml import (
    access_control_policy_document,
    owner_only_full_control,
    parse_access_control_policy,
)

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


async def get_bucket_acl(call: S3Call) -> S3Response:
    owner_id, owner_name = await call.services.objects.bucket_owner(call.bucket)
    return S3Response(body=access_control_policy_document(owner_id, owner_name),
                      content_type=XML)


async def put_bucket_acl(call: S3Call) -> S3Response:
    owner_id, _ = await call.services.objects.bucket_owner(call.bucket)
    accept_acl(call, owner_id)
    return S3Response()


async def get_object_acl(call: S3Call) -> S3Response:
    record = await call.services.objects.head(call.bucket, call.key, version_id_param(call))
    body = access_control_policy_document(record.owner_id, record.owner_name)
    return S3Response(headers=version_header(record), body=body, content_type=XML)


async def put_object_acl(call: S3Call) -> S3Response:
    record = await call.services.objects.head(call.bucket, call.key, version_id_param(call))
    accept_acl(call, record.owner_id)
    return S3Response(headers=version_header(record))
