"""Lifecycle operations of the S3 API: Put/Get/DeleteBucketLifecycleConfiguration
(PUT/GET/DELETE /bucket?lifecycle), and the x-amz-expiration header that GET, HEAD and PUT
of an object carry when an enabled rule will expire it.

The body is parsed and validated before anything is looked up or changed. As on AWS, a PUT
needs Content-MD5 or an x-amz-checksum-* value (authentication has verified whichever was
sent); a DELETE of a bucket without a configuration still answers 204.
"""

from __future__ import annotations

from urllib.parse import quote

from objstore.errors import S3Error
from objstore.http.checksum_headers import is_checksum_claim
from objstore.http.client_bytes import HeaderValues
from objstore.meta.records import ObjectRecord
from objstore.s3.call import S3Call, S3Response
from objstore.s3.lifecycle_xml import lifecycle_document, parse_lifecycle
from objstore.s3.xml import http_date

XML = "application/xml"


def expiration_header(expiry: float, rule_id: str) -> str:
    """x-amz-expiration: the expiry date and the (URL-encoded) id of the rule."""
    return f'expiry-date="{http_date(expiry)}", rule-id="{quote(rule_id, safe="")}"'


async def expiration_headers(call: S3Call, record: ObjectRecord) -> dict[str, str]:
    """{"x-amz-expiration": ...} when a lifecycle rule expires this current version."""
    found = await call.services.lifecycle.expiration(record)
    if found is None:
        return {}
    return {"x-amz-expiration": expiration_header(*found)}


def has_integrity_header(call: S3Call) -> bool:
    """Content-MD5 or an x-amz-checksum-* value, in a header or an announced trailer (this
    module is imported by `objects`, so it cannot share DeleteObjects' helper)."""
    headers = HeaderValues(call.request.requestHeaders.getAllRawHeaders())
    if "content-md5" in headers or any(is_checksum_claim(name) for name in headers):
        return True
    trailers = (headers.get("x-amz-trailer") or "").lower().split(",")
    return any(is_checksum_claim(name.strip()) for name in trailers)


async def put_lifecycle(call: S3Call) -> S3Response:
    if not has_integrity_header(call):
        raise S3Error("InvalidRequest", "Missing required header for this request: "
                      "Content-MD5 OR x-amz-checksum-*")
    config = parse_lifecycle(call.body())
    await call.services.lifecycle.put(call.caller, call.bucket, config)
    return S3Response()


async def get_lifecycle(call: S3Call) -> S3Response:
    config = await call.services.lifecycle.get(call.bucket)
    return S3Response(body=lifecycle_document(config), content_type=XML)


async def delete_lifecycle(call: S3Call) -> S3Response:
    await call.services.lifecycle.delete(call.caller, call.bucket)
    return S3Response(status=204)


__all__ = ["delete_lifecycle", "expiration_header", "expiration_headers", "get_lifecycle",
           "put_lifecycle"]
