"""Bucket operations of the S3 API: ListBuckets, CreateBucket, HeadBucket, DeleteBucket,
GetBucketLocation."""

from __future__ import annotations

from objstore.s3.acl import creation_access, store_creation_access
from objstore.s3.call import S3Call, S3Response
from objstore.s3.params import integer_argument
from objstore.s3.xml import list_buckets_document, location_document, parse_create_bucket

XML = "application/xml"


async def list_buckets(call: S3Call) -> S3Response:
    prefix = call.query.get("prefix", "")
    start_after = call.query.get("continuation-token", "")
    max_buckets = _max_buckets(call.query.get("max-buckets"))
    records = [
        b for b in await call.services.buckets.list()
        if b.name.startswith(prefix) and b.name > start_after
    ]
    page = records[:max_buckets]
    token = page[-1].name if len(records) > max_buckets else None
    body = list_buckets_document(
        call.principal.user_id,
        call.principal.username,
        [(b.name, b.created_at, b.region) for b in page],
        continuation_token=token,
        prefix=call.query.get("prefix"),
    )
    return S3Response(body=body, content_type=XML)


def _max_buckets(raw: str | None) -> int:
    if raw is None:
        return 10000
    return integer_argument(raw, "max-buckets", "max-buckets must be an integer from 1 to "
                            "10000.", low=1, high=10000)


async def create_bucket(call: S3Call) -> S3Response:
    location = parse_create_bucket(call.body())
    lock_header = (call.header("x-amz-bucket-object-lock-enabled") or "").strip().lower()
    ownership, acl = creation_access(call)
    await call.services.buckets.create(
        call.caller, call.bucket, location=location, object_lock=lock_header == "true"
    )
    await store_creation_access(call, ownership, acl)
    return S3Response(headers={"Location": f"/{call.bucket}"})


async def head_bucket(call: S3Call) -> S3Response:
    bucket = await call.services.buckets.get(call.bucket)
    return S3Response(headers={"x-amz-bucket-region": bucket.region})


async def delete_bucket(call: S3Call) -> S3Response:
    await call.services.buckets.delete(call.caller, call.bucket)
    return S3Response(status=204)


async def get_location(call: S3Call) -> S3Response:
    bucket = await call.services.buckets.get(call.bucket)
    return S3Response(body=location_document(bucket.region), content_type=XML)
