"""What each S3 request needs to be authorized: the route's action on its resource, and the
further actions its headers imply (pure; no I/O).

The route table (`routes.py`) declares each route's action and, where the request's
headers add actions as on AWS, an `ExtraNeeds` rule from this module: a PUT carrying tags
also needs s3:PutObjectTagging (which s3:PutObject covers there), lock headers need
s3:PutObjectRetention / s3:PutObjectLegalHold, ACL headers s3:PutObjectAcl /
s3:PutBucketAcl, a copy source s3:GetObject (s3:GetObjectVersion) on the source, a
CreateBucket with object lock the lock configuration and versioning actions and with
`x-amz-object-ownership` s3:PutBucketOwnershipControls. A `versionId` in the query selects
the version variant of the action (s3:GetObjectVersion, ...). Nothing here raises: a
header that does not parse adds nothing, and the handler refuses it in its turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from objstore.errors import S3Error
from objstore.iam.acl_rules import GRANT_HEADERS
from objstore.iam.actions import VERSION_VARIANTS
from objstore.iam.decision import Need
from objstore.s3.copy_source import parse_copy_source

ARN_PREFIX = "arn:aws:s3:::"
HeaderGet = Callable[[str], "str | None"]
ExtraNeeds = Callable[[str, str, Mapping[str, str], HeaderGet], tuple[Need, ...]]



def resource_of(bucket: str, key: str) -> str:
    if key:
        return f"{ARN_PREFIX}{bucket}/{key}"
    return f"{ARN_PREFIX}{bucket}" if bucket else "*"


def versioned(action: str, query: Mapping[str, str]) -> str:
    if "versionId" in query:
        return VERSION_VARIANTS.get(action, action)
    return action


def route_needs(action: str, bucket: str, key: str, query: Mapping[str, str],
                header: HeaderGet, extra: ExtraNeeds | None = None) -> tuple[Need, ...]:
    """Every need of a request: the route's action (its version variant with a
    versionId) on the request's resource, then what `extra` adds."""
    first = Need(versioned(action, query), resource_of(bucket, key), bucket, key=key)
    if extra is None:
        return (first,)
    return (first, *extra(bucket, key, query, header))


def _present(header: HeaderGet, name: str) -> bool:
    value = header(name)
    return value is not None and value.strip() != ""


def _acl_headers(header: HeaderGet) -> bool:
    return _present(header, "x-amz-acl") or any(_present(header, h) for h in GRANT_HEADERS)


def _object_write(bucket: str, key: str, header: HeaderGet, *, tags: bool) -> list[Need]:
    arn = resource_of(bucket, key)
    needs = []
    if tags:
        needs.append(Need("s3:PutObjectTagging", arn, bucket, ("s3:PutObject",), key))
    if _present(header, "x-amz-object-lock-mode") or _present(
            header, "x-amz-object-lock-retain-until-date"):
        needs.append(Need("s3:PutObjectRetention", arn, bucket, key=key))
    if _present(header, "x-amz-object-lock-legal-hold"):
        needs.append(Need("s3:PutObjectLegalHold", arn, bucket, key=key))
    if _acl_headers(header):
        needs.append(Need("s3:PutObjectAcl", arn, bucket, key=key))
    return needs


def copy_source_need(header: HeaderGet) -> Need | None:
    raw = header("x-amz-copy-source")
    if raw is None:
        return None
    try:
        source = parse_copy_source(raw)
    except S3Error:
        return None
    action = "s3:GetObjectVersion" if source.version_id is not None else "s3:GetObject"
    return Need(action, resource_of(source.bucket, source.key), source.bucket,
                key=source.key)


def put_object_needs(bucket: str, key: str, query: Mapping[str, str],
                     header: HeaderGet) -> tuple[Need, ...]:
    """PutObject and CopyObject (a copy's tags count only with the REPLACE directive)."""
    source = copy_source_need(header)
    if source is None:
        tags = _present(header, "x-amz-tagging")
    else:
        tags = (header("x-amz-tagging-directive") or "").strip().upper() == "REPLACE" \
            and _present(header, "x-amz-tagging")
    needs = _object_write(bucket, key, header, tags=tags)
    return tuple(needs if source is None else [source, *needs])


def create_upload_needs(bucket: str, key: str, query: Mapping[str, str],
                        header: HeaderGet) -> tuple[Need, ...]:
    return tuple(_object_write(bucket, key, header, tags=_present(header, "x-amz-tagging")))


def upload_part_needs(bucket: str, key: str, query: Mapping[str, str],
                      header: HeaderGet) -> tuple[Need, ...]:
    source = copy_source_need(header)
    return () if source is None else (source,)


def attributes_needs(bucket: str, key: str, query: Mapping[str, str],
                     header: HeaderGet) -> tuple[Need, ...]:
    """GetObjectAttributes needs s3:GetObjectAttributes and s3:GetObject (with a
    versionId their version variants), as on AWS."""
    return (Need(versioned("s3:GetObject", query), resource_of(bucket, key), bucket,
                 key=key),)


def create_bucket_needs(bucket: str, key: str, query: Mapping[str, str],
                        header: HeaderGet) -> tuple[Need, ...]:
    arn = resource_of(bucket, "")
    needs = []
    if (header("x-amz-bucket-object-lock-enabled") or "").strip().lower() == "true":
        needs += [Need("s3:PutBucketObjectLockConfiguration", arn, bucket),
                  Need("s3:PutBucketVersioning", arn, bucket)]
    if _acl_headers(header):
        needs.append(Need("s3:PutBucketAcl", arn, bucket))
    if _present(header, "x-amz-object-ownership"):
        needs.append(Need("s3:PutBucketOwnershipControls", arn, bucket))
    return tuple(needs)


def delete_key_need(bucket: str, key: str, version_id: str | None) -> Need:
    """What one key of DeleteObjects needs (checked per key, as AWS does)."""
    action = "s3:DeleteObject" if version_id is None else "s3:DeleteObjectVersion"
    return Need(action, resource_of(bucket, key), bucket, key=key)
