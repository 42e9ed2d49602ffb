"""Object operations of the S3 API: PutObject (conditional writes, x-amz-tagging, object
lock headers), GetObject and HeadObject (conditional reads, Range, partNumber, versionId,
object lock headers), DeleteObject (versionId, delete markers, governance bypass). Request
headers become engine attributes here; records become response headers here; the engine
never sees HTTP. The helpers that turn headers into attributes are shared with CopyObject.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from objstore.blobs.segments import part_span
from objstore.crypto.customer_key import CustomerKey, customer_key, key_for_object
from objstore.crypto.customer_key import response_headers as ssec_response_headers
from objstore.crypto.kms_key import response_headers as sse_headers
from objstore.engine.objects import ObjectAttrs, VersionVanished
from objstore.errors import S3Error
from objstore.http.authn import claimed_checksums
from objstore.http.client_bytes import HeaderValues
from objstore.http.producers import CHUNK_BYTES, body_producer
from objstore.iam.decision import Need
from objstore.meta.records import NULL_VERSION, BucketRecord, ObjectRecord, WritePrecondition
from objstore.s3.access import permits
from objstore.s3.acl_headers import written_acl
from objstore.s3.call import S3Call, S3Response
from objstore.s3.conditions import evaluate
from objstore.s3.lifecycle import expiration_headers
from objstore.s3.lock_headers import (
    bypass_requested,
    has_integrity_header,
    legal_hold_headers,
    lock_request,
    retention_headers,
)
from objstore.s3.meta_values import returned_value, stored_value
from objstore.s3.params import part_number
from objstore.s3.ranges import parse_range
from objstore.s3.route_needs import resource_of
from objstore.s3.tagging_header import parse_tagging_header
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
# A GET whose version vanished under it plans again; a key rewritten faster than that
# gets 503 (clients retry it).
READ_ATTEMPTS = 3


# -- request headers -> attributes ------------------------------------------------------


def request_headers(call: S3Call) -> HeaderValues:
    """The request headers by lower-case name, each decoded when read (UTF-8, else
    InvalidArgument: `client_bytes.header_value`)."""
    return HeaderValues(call.request.requestHeaders.getAllRawHeaders())


def storage_class(headers: Mapping[str, str]) -> str:
    value = headers.get("x-amz-storage-class", "STANDARD").strip() or "STANDARD"
    if value not in STORAGE_CLASSES:
        raise S3Error("InvalidStorageClass", StorageClassRequested=value)
    return value


def object_attrs(call: S3Call, headers: Mapping[str, str], acl: str | None = None
                 ) -> ObjectAttrs:
    """What a PutObject (or a CopyObject with REPLACE) sets besides the bytes; `acl`: the
    version's (`acl_headers.written_acl`)."""
    user_metadata = {
        name[len(META_PREFIX):]: stored_value(headers[name])
        for name in headers
        if name.startswith(META_PREFIX)
    }
    limit = call.request.objstore_site.limits.max_metadata_size
    if sum(len(k) + len(v) for k, v in user_metadata.items()) > limit:
        raise S3Error("MetadataTooLarge", MaxSizeAllowed=str(limit))
    return ObjectAttrs(
        content_type=headers.get("content-type") or "binary/octet-stream",
        user_metadata=user_metadata,
        system_headers=system_headers(headers),
        storage_class=storage_class(headers),
        checksums=claimed_checksums(call.request.spool, headers),
        tags=parse_tagging_header(headers.get("x-amz-tagging")),
        lock=lock_request(headers),
        acl=acl,
    )


def system_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The standard headers stored with an object. `aws-chunked` in Content-Encoding names
    the transfer framing of a streaming-signed body, not the object's encoding: it is
    dropped, as AWS does, and any other encodings listed are kept in their order."""
    found = {name: headers[name] for name in SYSTEM_HEADERS if name in headers}
    encoding = found.pop("content-encoding", None)
    if encoding is not None:
        kept = [part.strip() for part in encoding.split(",")
                if part.strip() and part.strip().lower() != "aws-chunked"]
        if kept:
            found["content-encoding"] = ",".join(kept)
    return found


def write_precondition(headers: Mapping[str, str]) -> WritePrecondition | None:
    """The conditional-write headers of PutObject/CopyObject/CompleteMultipartUpload:
    `If-None-Match: *` (create only), `If-None-Match: <etag>` (not over that version:
    412 when the current object has it) and `If-Match: <etag>` (404 when there is no
    current object, 412 when it has another ETag)."""
    if_none_match = headers.get("if-none-match")
    if_match = headers.get("if-match")
    if if_none_match is None and if_match is None:
        return None
    none_match_etag = None
    if if_none_match is not None and if_none_match.strip() != "*":
        none_match_etag = if_none_match.strip().removeprefix("W/").strip('"')
        if not none_match_etag:
            raise S3Error("InvalidArgument", "If-None-Match needs * or an ETag",
                          ArgumentName="If-None-Match", ArgumentValue=if_none_match[:64])
    etag = None
    if if_match is not None:
        etag = if_match.strip().strip('"')
        if not etag or etag == "*":
            raise S3Error("NotImplemented", "If-Match on a write needs an ETag value",
                          Header="If-Match")
    return WritePrecondition(if_absent=if_none_match is not None and none_match_etag is None,
                             if_match_etag=etag, if_none_match_etag=none_match_etag)


def version_id_param(call: S3Call) -> str | None:
    version_id = call.query.get("versionId")
    if version_id == "":
        raise S3Error("InvalidArgument", "Version id cannot be the empty string",
                      ArgumentName="versionId", ArgumentValue="")
    return version_id


def version_header(record: ObjectRecord) -> dict[str, str]:
    """x-amz-version-id of a write: absent for the null version (as AWS answers a write to
    an unversioned or a Suspended bucket)."""
    if record.version_id == NULL_VERSION:
        return {}
    return {"x-amz-version-id": record.version_id}


def read_version_header(bucket: BucketRecord, record: ObjectRecord) -> dict[str, str]:
    """x-amz-version-id of a read: the null version is named `null` once the bucket has
    ever been versioned (Enabled or Suspended), and not at all before."""
    if record.version_id == NULL_VERSION and bucket.versioning == "Disabled":
        return {}
    return {"x-amz-version-id": record.version_id}


async def visible_lock_headers(call: S3Call, record: ObjectRecord) -> dict[str, str]:
    """The object lock headers of GET/HEAD, each shown only to callers who may read it
    (s3:GetObjectRetention, s3:GetObjectLegalHold), as on AWS."""
    headers: dict[str, str] = {}
    arn = resource_of(call.bucket, call.key)
    if record.retention_mode and await permits(
            call, Need("s3:GetObjectRetention", arn, call.bucket, key=call.key)):
        headers.update(retention_headers(record))
    if record.legal_hold_status and await permits(
            call, Need("s3:GetObjectLegalHold", arn, call.bucket, key=call.key)):
        headers.update(legal_hold_headers(record))
    return headers


# -- PutObject ---------------------------------------------------------------------------


async def put_object(call: S3Call) -> S3Response:
    spool = call.request.spool
    if spool is None:
        raise S3Error("MissingContentLength")
    if call.header("content-length") is None and call.header("transfer-encoding") is None:
        raise S3Error("MissingContentLength")
    headers = request_headers(call)
    acl = await written_acl(call, headers)
    precondition = write_precondition(headers)
    attrs = object_attrs(call, headers, acl)
    record = await call.services.objects.put(
        call.caller, call.bucket, call.key, spool, attrs, precondition,
        integrity=has_integrity_header(headers),
    )
    response_headers = {"ETag": f'"{record.etag}"'}
    response_headers.update(version_header(record))
    response_headers.update(encryption_headers(record))
    response_headers.update(ssec_response_headers(customer_key(headers)))
    for algorithm, value in record.checksums.items():
        response_headers[f"x-amz-checksum-{algorithm}"] = value
    response_headers.update(await expiration_headers(call, record))
    return S3Response(headers=response_headers)


# -- GetObject / HeadObject --------------------------------------------------------------


@dataclass(frozen=True)
class ReadPlan:
    """Which bytes a GET/HEAD answers with, and how."""

    record: ObjectRecord
    status: int
    headers: dict[str, str]
    start: int
    length: int
    customer_key: CustomerKey | None = None  # an SSE-C object's (checked)


def object_headers(call: S3Call, record: ObjectRecord, *, ranged: bool) -> dict[str, str]:
    """Response headers of GET/HEAD. Checksums describe the whole object, so a ranged
    response carries none (as AWS; SDKs would validate them against the slice)."""
    headers = validator_headers(record)
    headers.update(encryption_headers(record))
    headers["Content-Type"] = record.content_type
    headers["Accept-Ranges"] = "bytes"
    for name, value in record.system_headers.items():
        headers[name.title()] = value
    for name, value in record.user_metadata.items():
        headers[META_PREFIX + name] = returned_value(value)
    if record.storage_class != "STANDARD":
        headers["x-amz-storage-class"] = record.storage_class
    if record.tags:
        headers["x-amz-tagging-count"] = str(len(record.tags))
    if record.replication_status:
        headers["x-amz-replication-status"] = record.replication_status
    if not ranged and (call.header("x-amz-checksum-mode") or "").upper() == "ENABLED":
        for algorithm, value in record.checksums.items():
            headers[f"x-amz-checksum-{algorithm}"] = value
        if record.checksum_type:
            headers["x-amz-checksum-type"] = record.checksum_type
    for param, header in RESPONSE_OVERRIDES.items():
        if param in call.query:
            headers[header] = call.query[param]
    return headers


def encryption_headers(record: ObjectRecord) -> dict[str, str]:
    """x-amz-server-side-encryption of an encrypted object (SSE-S3, SSE-KMS with its key
    id: crypto/kms_key.py), as AWS answers it on PUT, GET, HEAD and copies."""
    return sse_headers(record.encryption_algorithm, record.encryption_key_id)


def validator_headers(record: ObjectRecord) -> dict[str, str]:
    """ETag, Last-Modified and the version: what a 304 Not Modified still carries."""
    headers = {"ETag": f'"{record.etag}"', "Last-Modified": http_date(record.last_modified)}
    headers.update(version_header(record))
    return headers


def check_read_conditions(call: S3Call, record: ObjectRecord) -> None:
    """If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since (412 or 304)."""
    try:
        evaluate(request_headers(call), record.etag, record.last_modified)
    except S3Error as error:
        if error.code == "NotModified":
            error.headers.update(validator_headers(record))
        raise


def part_number_param(call: S3Call) -> int | None:
    raw = call.query.get("partNumber")
    if raw is None:
        return None
    number = part_number(raw)
    if call.header("range") is not None:
        raise S3Error("InvalidRequest",
                      "Cannot specify both Range header and partNumber query parameter")
    return number


def part_range(record: ObjectRecord, part_number: int) -> tuple[int, int] | None:
    """(start, end inclusive) of one part (a plain object has one part: all of it); None
    for part 1 of an empty object, which is answered whole."""
    span = part_span(record, part_number)
    if span is None:
        raise S3Error("InvalidPartNumber", PartNumberRequested=str(part_number),
                      ActualPartCount=str(max(1, len(record.parts))))
    start, length = span
    return None if length == 0 else (start, start + length - 1)


async def plan_read(call: S3Call, *, fresh: bool = False) -> ReadPlan:
    """What a GET or HEAD answers; `fresh`: the record from the database, not the object
    cache (a read whose version vanished under it looks again)."""
    part_number = part_number_param(call)
    try:
        bucket, record = await call.services.objects.lookup(call.bucket, call.key,
                                                            version_id_param(call), fresh=fresh)
    except S3Error as error:
        if error.code == "MethodNotAllowed":  # a delete marker named by its version id
            error.fields = {"Method": call.request.method.decode("ascii", "replace"),
                            **error.fields}
        if error.code == "NoSuchKey" and not await permits(
                call, Need("s3:ListBucket", resource_of(call.bucket, ""), call.bucket)):
            # As AWS: a caller who may not list the bucket can not probe for key names.
            raise S3Error("AccessDenied") from None
        raise
    # An SSE-C object is read (and even shown) only with its key: 400 without, 403 another.
    ssec_key = key_for_object(record.encryption_algorithm, record.encryption_params,
                              customer_key(request_headers(call)))
    check_read_conditions(call, record)
    if part_number is not None:
        span = part_range(record, part_number)
    else:
        span = parse_range(call.header("range"), record.size)
    headers = object_headers(call, record, ranged=span is not None)
    headers.update(ssec_response_headers(ssec_key))
    headers.update(read_version_header(bucket, record))
    headers.update(await visible_lock_headers(call, record))
    headers.update(await expiration_headers(call, record))
    if part_number is not None and record.parts:
        headers["x-amz-mp-parts-count"] = str(len(record.parts))
    if span is None:
        headers["Content-Length"] = str(record.size)
        return ReadPlan(record, 200, headers, 0, record.size, ssec_key)
    start, end = span
    headers["Content-Length"] = str(end - start + 1)
    headers["Content-Range"] = f"bytes {start}-{end}/{record.size}"
    return ReadPlan(record, 206, headers, start, end - start + 1, ssec_key)


async def head_object(call: S3Call) -> S3Response:
    plan = await plan_read(call)
    return S3Response(status=plan.status, headers=plan.headers)


async def get_object(call: S3Call) -> S3Response:
    """A version overwritten or deleted between its lookup and the moment its bytes are
    held is answered as the key is now (another version, 404, 304, 412, ...): the read
    is planned again from the database, as if it had come a little later."""
    for attempt in range(READ_ATTEMPTS):
        plan = await plan_read(call, fresh=attempt > 0)
        try:
            return await _answer_read(call, plan)
        except VersionVanished:
            continue
    raise S3Error("ServiceUnavailable", "The object is being rewritten too often to be "
                  "read; retry the request.")


async def _answer_read(call: S3Call, plan: ReadPlan) -> S3Response:
    objects = call.services.objects
    if plan.length == 0:
        return S3Response(status=plan.status, headers=plan.headers)
    if plan.length <= SMALL_OBJECT_BYTES:
        data = await objects.read_bytes(plan.record, plan.start, plan.length,
                                        plan.customer_key)
        return S3Response(status=plan.status, headers=plan.headers, body=data)
    stream = await objects.stream(plan.record, plan.start, plan.length, plan.customer_key)
    return S3Response(status=plan.status, headers=plan.headers,
                      stream=body_producer(call.request, stream))


# -- DeleteObject ------------------------------------------------------------------------


async def delete_object(call: S3Call) -> S3Response:
    outcome = await call.services.objects.delete(
        call.caller, call.bucket, call.key, version_id_param(call),
        bypass_governance=bypass_requested(request_headers(call)),
    )
    headers = {}
    if outcome.version_id is not None:
        headers["x-amz-version-id"] = outcome.version_id
    if outcome.delete_marker:
        headers["x-amz-delete-marker"] = "true"
    return S3Response(status=204, headers=headers)
