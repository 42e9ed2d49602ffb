"""Object operations of the S3 API: PutObject, GetObject (with Range), HeadObject,
DeleteObject. Request headers become engine attributes here; records become response
headers here; the engine never sees HTTP."""

from __future__ import annotations

from objstore.engine.objects import ObjectAttrs
from objstore.errors import S3Error
from objstore.http.authn import claimed_checksums, request_view
from objstore.http.producers import CHUNK_BYTES, SegmentProducer
from objstore.meta.records import NULL_VERSION, ObjectRecord
from objstore.s3.call import S3Call, S3Response
from objstore.s3.ranges import parse_range
from objstore.s3.xml import http_date

SYSTEM_HEADERS = (
    "cache-control", "content-disposition", "content-encoding", "content-language", "expires",
)
STORAGE_CLASSES = frozenset({
    "STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
    "GLACIER", "DEEP_ARCHIVE", "GLACIER_IR", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE",
})
META_PREFIX = "x-amz-meta-"
RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}
SMALL_OBJECT_BYTES = CHUNK_BYTES


def object_attrs(call: S3Call) -> ObjectAttrs:
    headers = request_view(call.request).headers
    user_metadata = {
        name[len(META_PREFIX):]: value
        for name, value in headers.items()
        if name.startswith(META_PREFIX)
    }
    limit = call.request.objstore_site.limits.max_metadata_size
    if sum(len(k) + len(v) for k, v in user_metadata.items()) > limit:
        raise S3Error("MetadataTooLarge", MaxSizeAllowed=str(limit))
    storage_class = headers.get("x-amz-storage-class", "STANDARD").strip() or "STANDARD"
    if storage_class not in STORAGE_CLASSES:
        raise S3Error("InvalidStorageClass", StorageClassRequested=storage_class)
    return ObjectAttrs(
        content_type=headers.get("content-type") or "binary/octet-stream",
        user_metadata=user_metadata,
        system_headers={h: headers[h] for h in SYSTEM_HEADERS if h in headers},
        storage_class=storage_class,
        checksums=claimed_checksums(call.request.spool, headers),
    )


async def put_object(call: S3Call) -> S3Response:
    if call.header("x-amz-copy-source") is not None:
        raise S3Error("NotImplemented", "CopyObject is not implemented yet.")
    spool = call.request.spool
    if spool is None:
        raise S3Error("MissingContentLength")
    if call.header("content-length") is None and call.header("transfer-encoding") is None:
        raise S3Error("MissingContentLength")
    record = await call.services.objects.put(
        call.principal, call.bucket, call.key, spool, object_attrs(call)
    )
    headers = {"ETag": f'"{record.etag}"'}
    headers.update(_version_header(record))
    for algorithm, value in record.checksums.items():
        headers[f"x-amz-checksum-{algorithm}"] = value
    return S3Response(headers=headers)


def _version_header(record: ObjectRecord) -> dict[str, str]:
    if record.version_id == NULL_VERSION:
        return {}
    return {"x-amz-version-id": record.version_id}


def object_headers(call: S3Call, record: ObjectRecord, *, ranged: bool) -> dict[str, str]:
    """Response headers of GET/HEAD. Checksums describe the whole object, so a ranged
    response carries none (as AWS; SDKs would validate them against the slice)."""
    headers = {
        "ETag": f'"{record.etag}"',
        "Last-Modified": http_date(record.last_modified),
        "Content-Type": record.content_type,
        "Accept-Ranges": "bytes",
    }
    for name, value in record.system_headers.items():
        headers[name.title()] = value
    for name, value in record.user_metadata.items():
        headers[META_PREFIX + name] = value
    if record.storage_class != "STANDARD":
        headers["x-amz-storage-class"] = record.storage_class
    headers.update(_version_header(record))
    if not ranged and (call.header("x-amz-checksum-mode") or "").upper() == "ENABLED":
        for algorithm, value in record.checksums.items():
            headers[f"x-amz-checksum-{algorithm}"] = value
        if record.checksum_type:
            headers["x-amz-checksum-type"] = record.checksum_type
    for param, header in RESPONSE_OVERRIDES.items():
        if param in call.query:
            headers[header] = call.query[param]
    return headers


async def head_object(call: S3Call) -> S3Response:
    record = await call.services.objects.head(call.bucket, call.key, _version_id(call))
    span = parse_range(call.header("range"), record.size)
    headers = object_headers(call, record, ranged=span is not None)
    if span is None:
        headers["Content-Length"] = str(record.size)
        return S3Response(headers=headers)
    start, end = span
    headers["Content-Length"] = str(end - start + 1)
    headers["Content-Range"] = f"bytes {start}-{end}/{record.size}"
    return S3Response(status=206, headers=headers)


async def get_object(call: S3Call) -> S3Response:
    objects = call.services.objects
    record = await objects.head(call.bucket, call.key, _version_id(call))
    span = parse_range(call.header("range"), record.size)
    headers = object_headers(call, record, ranged=span is not None)
    status = 200
    start, length = 0, record.size
    if span is not None:
        start, end = span
        length = end - start + 1
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{record.size}"
    headers["Content-Length"] = str(length)
    if length == 0:
        return S3Response(status=status, headers=headers)
    if length <= SMALL_OBJECT_BYTES:
        data = await objects.read_bytes(record, start, length)
        return S3Response(status=status, headers=headers, body=data)
    segments = objects.read_plan(record, start, length)
    producer = SegmentProducer(call.request, objects.open_blob, segments)
    return S3Response(status=status, headers=headers, stream=producer)


async def delete_object(call: S3Call) -> S3Response:
    if _version_id(call) not in (None, NULL_VERSION):
        raise S3Error("NotImplemented", "Deleting a specific version is not implemented yet.")
    await call.services.objects.delete(call.bucket, call.key)
    return S3Response(status=204)


def _version_id(call: S3Call) -> str | None:
    version_id = call.query.get("versionId")
    if version_id == "":
        raise S3Error("InvalidArgument", "Version id cannot be the empty string",
                      ArgumentName="versionId", ArgumentValue="")
    return version_id
