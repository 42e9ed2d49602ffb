"""Versioning operations of the S3 API: GetBucketVersioning, PutBucketVersioning and
ListObjectVersions (GET /bucket?versions).

This module owns the query parameters of ListObjectVersions (prefix, delimiter,
key-marker, version-id-marker; max-keys and encoding-type as `s3/params.py` reads them for
every listing) and their refusals; the grouping rules live in `engine/versioning.py`, the
state rules in `engine/bucket_config.py`.
"""

from __future__ import annotations

from objstore.engine.versioning import check_version_id
from objstore.errors import S3Error
from objstore.s3.call import S3Call, S3Response
from objstore.s3.listing_xml import VersionsListing, list_versions_document
from objstore.s3.params import encoding_type, max_keys
from objstore.s3.versioning_xml import parse_versioning, versioning_document

XML = "application/xml"


async def get_versioning(call: S3Call) -> S3Response:
    bucket = await call.services.bucket_config.get(call.bucket)
    return S3Response(body=versioning_document(bucket.versioning), content_type=XML)


async def put_versioning(call: S3Call) -> S3Response:
    status = parse_versioning(call.body())
    await call.services.bucket_config.set_versioning(call.caller, call.bucket, status)
    return S3Response()


def markers(key_marker: str, version_marker: str | None) -> str:
    """The version-id-marker to use: it needs a key-marker, and must be a version id."""
    if version_marker is None or version_marker == "":
        return ""
    if not key_marker:
        raise S3Error("InvalidArgument", "A version-id marker cannot be specified without "
                      "a key marker.", ArgumentName="version-id-marker",
                      ArgumentValue=version_marker)
    check_version_id(version_marker, "version-id-marker")
    return version_marker


async def list_object_versions(call: S3Call) -> S3Response:
    query = call.query
    encoding = encoding_type(query)
    page_size = max_keys(query.get("max-keys"))
    prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
    key_marker = query.get("key-marker", "")
    version_marker = markers(key_marker, query.get("version-id-marker"))
    page = await call.services.versions.list_versions(
        call.bucket, prefix=prefix, delimiter=delimiter, key_marker=key_marker,
        version_marker=version_marker, max_keys=page_size,
    )
    body = list_versions_document(VersionsListing(
        bucket=call.bucket, prefix=prefix, delimiter=delimiter, key_marker=key_marker,
        version_id_marker=version_marker, max_keys=page_size, encoding_type=encoding,
        entries=page.entries, common_prefixes=page.common_prefixes,
        is_truncated=page.is_truncated, next_key_marker=page.next_key_marker,
        next_version_id_marker=page.next_version_id_marker,
    ))
    return S3Response(body=body, content_type=XML)
