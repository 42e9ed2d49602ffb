"""Tagging operations of the S3 API: Get/Put/DeleteObjectTagging (/bucket/key?tagging,
per version with versionId) and Get/Put/DeleteBucketTagging (/bucket?tagging).

Object tags follow the rules of `tagging_header` (10 tags, keys of 1-128 and values of
0-256 characters, unique keys, no `aws:` prefix; InvalidTag otherwise); bucket tags are a
separate set of up to 50 under the same rules. Object tag changes rewrite the version's
sidecar (the engine does), so `recover` restores them.
"""

from __future__ import annotations

from objstore.s3.call import S3Call, S3Response
from objstore.s3.objects import read_version_header, version_header, version_id_param
from objstore.s3.versioning_xml import parse_tagging, tagging_document

XML = "application/xml"
MAX_OBJECT_TAGS = 10
MAX_BUCKET_TAGS = 50


# -- object tags ------------------------------------------------------------------------


async def get_object_tagging(call: S3Call) -> S3Response:
    bucket, record = await call.services.objects.lookup(call.bucket, call.key,
                                                        version_id_param(call))
    return S3Response(headers=read_version_header(bucket, record),
                      body=tagging_document(record.tags.items()), content_type=XML)


async def put_object_tagging(call: S3Call) -> S3Response:
    version_id = version_id_param(call)
    tags = parse_tagging(call.body(), MAX_OBJECT_TAGS, "Object tags")
    record = await call.services.versions.put_tags(call.caller, call.bucket, call.key, version_id,
                                                   tags)
    return S3Response(headers=version_header(record))


async def delete_object_tagging(call: S3Call) -> S3Response:
    version_id = version_id_param(call)
    record = await call.services.versions.put_tags(call.caller, call.bucket, call.key, version_id,
                                                   {})
    return S3Response(status=204, headers=version_header(record))


# -- bucket tags ------------------------------------------------------------------------


async def get_bucket_tagging(call: S3Call) -> S3Response:
    tags = await call.services.bucket_config.tags(call.bucket)
    return S3Response(body=tagging_document(tags.items()), content_type=XML)


async def put_bucket_tagging(call: S3Call) -> S3Response:
    tags = parse_tagging(call.body(), MAX_BUCKET_TAGS, "Bucket tag count")
    await call.services.bucket_config.put_tags(call.caller, call.bucket, tags)
    return S3Response(status=204)


async def delete_bucket_tagging(call: S3Call) -> S3Response:
    await call.services.bucket_config.delete_tags(call.caller, call.bucket)
    return S3Response(status=204)
