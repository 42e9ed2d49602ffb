"""Bucket access settings of the S3 API: Put/Get/DeleteBucketPolicy, GetBucketPolicyStatus,
Put/Get/DeletePublicAccessBlock and Put/Get/DeleteBucketOwnershipControls.

Each is a bucket configuration document (`BucketConfigService`: database, control record,
replication, export/import; keys in `iam/bucket_access.py`), parsed and validated before
anything is stored: a policy that is not valid is MalformedPolicy (400), a public one on
a bucket whose public access block has BlockPublicPolicy is AccessDenied, as on AWS. The
policy is stored and answered as the client sent it. What they mean for a request is
decided in one place, `iam/decision.py`.
"""

from __future__ import annotations

from lxml import etree

from objstore.errors import S3Error
from objstore.http.error_xml import serialize, sub_element
from objstore.iam.bucket_access import OWNERSHIP_KEY, POLICY_KEY, PUBLIC_ACCESS_BLOCK_KEY
from objstore.iam.bucket_policy import PolicyDocumentError, parse_bucket_policy
from objstore.iam.public_access import FIELDS, OWNER_ENFORCED, OWNERSHIPS, PublicAccessBlock
from objstore.s3.call import S3Call, S3Response
from objstore.s3.xml import child_text, parse_document, s3_root

XML = "application/xml"


# -- bucket policy -----------------------------------------------------------------------

async def put_bucket_policy(call: S3Call) -> S3Response:
    body = call.body()
    if not body.strip():
        raise S3Error("MalformedPolicy", "Policies must be valid JSON and the first byte "
                      "must be '{'")
    try:
        policy = parse_bucket_policy(body, call.bucket)
    except PolicyDocumentError as exc:
        raise S3Error("MalformedPolicy", str(exc)) from None
    access = await call.services.authorizer.bucket_access(call.bucket)
    if access is None:
        raise S3Error("NoSuchBucket", BucketName=call.bucket)
    for name in sorted(policy.principal_names()):
        if not await call.services.objects.known_user(name):
            raise S3Error("MalformedPolicy", "Invalid principal in policy")
    if policy.public and access.block.block_public_policy:
        raise S3Error("AccessDenied", "Access Denied: the public access block of this "
                      "bucket blocks public policies (BlockPublicPolicy).")
    await call.services.bucket_config.put_config(call.caller, call.bucket, POLICY_KEY,
                                                 policy.text)
    return S3Response(status=204)


async def _policy_text(call: S3Call) -> str:
    await call.services.bucket_config.get(call.bucket)
    text = await call.services.bucket_config.document(call.bucket, POLICY_KEY)
    if text is None:
        raise S3Error("NoSuchBucketPolicy", BucketName=call.bucket)
    return text


async def get_bucket_policy(call: S3Call) -> S3Response:
    text = await _policy_text(call)
    return S3Response(body=text.encode("utf-8"), content_type="application/json")


async def delete_bucket_policy(call: S3Call) -> S3Response:
    await call.services.bucket_config.get(call.bucket)
    await call.services.bucket_config.delete_config(call.caller, call.bucket, POLICY_KEY)
    return S3Response(status=204)


async def get_bucket_policy_status(call: S3Call) -> S3Response:
    await _policy_text(call)
    access = await call.services.authorizer.bucket_access(call.bucket)
    public = access is not None and access.policy is not None and access.policy.public
    root = s3_root("PolicyStatus")
    sub_element(root, "IsPublic", "true" if public else "false")
    return S3Response(body=serialize(root), content_type=XML)


# -- public access block -----------------------------------------------------------------

def parse_public_access_block(body: bytes) -> PublicAccessBlock:
    root = parse_document(body, "PublicAccessBlockConfiguration")
    known = {etree.QName(child).localname for child in root if isinstance(child.tag, str)}
    if known - set(FIELDS):
        raise S3Error("MalformedXML")
    flags = []
    for name in FIELDS:
        value = (child_text(root, name) or "false").strip().lower()
        if value not in ("true", "false"):
            raise S3Error("MalformedXML", f"{name} must be true or false.")
        flags.append(value == "true")
    return PublicAccessBlock(*flags)


def public_access_block_document(block: PublicAccessBlock) -> bytes:
    root = s3_root("PublicAccessBlockConfiguration")
    for name, flag in zip(FIELDS, block.flags(), strict=True):
        sub_element(root, name, "true" if flag else "false")
    return serialize(root)


async def put_public_access_block(call: S3Call) -> S3Response:
    block = parse_public_access_block(call.body())
    await call.services.bucket_config.put_config(call.caller, call.bucket,
                                                 PUBLIC_ACCESS_BLOCK_KEY, block.to_json())
    return S3Response()


async def get_public_access_block(call: S3Call) -> S3Response:
    await call.services.bucket_config.get(call.bucket)
    text = await call.services.bucket_config.document(call.bucket, PUBLIC_ACCESS_BLOCK_KEY)
    if text is None:
        raise S3Error("NoSuchPublicAccessBlockConfiguration", BucketName=call.bucket)
    return S3Response(body=public_access_block_document(PublicAccessBlock.from_json(text)),
                      content_type=XML)


async def delete_public_access_block(call: S3Call) -> S3Response:
    await call.services.bucket_config.get(call.bucket)
    await call.services.bucket_config.delete_config(call.caller, call.bucket,
                                                    PUBLIC_ACCESS_BLOCK_KEY)
    return S3Response(status=204)


# -- object ownership --------------------------------------------------------------------

def parse_ownership_controls(body: bytes) -> str:
    root = parse_document(body, "OwnershipControls")
    rules = [c for c in root if isinstance(c.tag, str) and etree.QName(c).localname == "Rule"]
    if len(rules) != 1:
        raise S3Error("MalformedXML", "Exactly one Rule is expected.")
    ownership = (child_text(rules[0], "ObjectOwnership") or "").strip()
    if ownership not in OWNERSHIPS:
        raise S3Error("MalformedXML", "ObjectOwnership must be one of "
                      + ", ".join(OWNERSHIPS) + ".")
    return ownership


def checked_ownership(value: str) -> str:
    """The `x-amz-object-ownership` header of CreateBucket (InvalidArgument if unknown)."""
    value = value.strip()
    if value not in OWNERSHIPS:
        raise S3Error("InvalidArgument", "Invalid x-amz-object-ownership header",
                      ArgumentName="x-amz-object-ownership", ArgumentValue=value)
    return value


def ownership_document(ownership: str) -> bytes:
    root = s3_root("OwnershipControls")
    rule = sub_element(root, "Rule")
    sub_element(rule, "ObjectOwnership", ownership)
    return serialize(root)


async def put_ownership_controls(call: S3Call) -> S3Response:
    """BucketOwnerEnforced is refused while the bucket's ACL grants anyone but its owner
    (InvalidBucketAclWithObjectOwnership, as AWS): set the ACL to private first."""
    ownership = parse_ownership_controls(call.body())
    access = await call.services.authorizer.bucket_access(call.bucket)
    if access is None:
        raise S3Error("NoSuchBucket", BucketName=call.bucket)
    if ownership == OWNER_ENFORCED and access.acl is not None and any(
            grant.grantee != access.owner_id for grant in access.acl.grants):
        raise S3Error("InvalidBucketAclWithObjectOwnership")
    await call.services.bucket_config.put_config(call.caller, call.bucket, OWNERSHIP_KEY,
                                                 ownership)
    return S3Response()


async def get_ownership_controls(call: S3Call) -> S3Response:
    await call.services.bucket_config.get(call.bucket)
    text = await call.services.bucket_config.document(call.bucket, OWNERSHIP_KEY)
    # No setting is BucketOwnerEnforced (every bucket made before the setting existed
    # had ACLs disabled), which AWS also answers for a bucket created without one.
    return S3Response(body=ownership_document(text or OWNER_ENFORCED), content_type=XML)


async def delete_ownership_controls(call: S3Call) -> S3Response:
    await call.services.bucket_config.get(call.bucket)
    await call.services.bucket_config.delete_config(call.caller, call.bucket, OWNERSHIP_KEY)
    return S3Response(status=204)
