"""Multipart upload operations of the S3 API: CreateMultipartUpload, UploadPart,
UploadPartCopy, CompleteMultipartUpload, AbortMultipartUpload, ListParts and
ListMultipartUploads.

This module owns the HTTP side: query parameters and their limits, the checksum headers of
an upload (x-amz-checksum-algorithm / -type), the copy-source headers of UploadPartCopy and
its authorization (read access to the source), and the response headers and documents.
The body's own checksums were verified by authentication before a handler runs. Mutations
run to their end even when the client disconnects (S3Api shields every request), so a
commit is never cut between its blob and its row. No handler touches a blob or the
database directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar
from urllib.parse import quote

from twisted.logger import Logger

from objstore.blobs.checksum_combine import CRC_ALGORITHMS
from objstore.crypto.customer_key import (
    SSE_C,
    CustomerKey,
    customer_key,
    refuse_key_for_other,
    require_key,
)
from objstore.crypto.customer_key import response_headers as ssec_response_headers
from objstore.crypto.kms_key import response_headers as sse_headers
from objstore.engine.multipart import (
    COMPOSITE,
    FULL_OBJECT,
    SSEC_EXTRA,
    ChecksumMode,
    CompletionClaims,
    upload_plan,
)
from objstore.engine.objects import SourceChanged
from objstore.engine.stage_plan import decide_stage_plan
from objstore.errors import S3Error
from objstore.http.authn import claimed_checksums
from objstore.http.checksum_headers import claimed_algorithm
from objstore.meta.records import NULL_VERSION, ObjectRecord, PartRecord, UploadRecord
from objstore.s3.acl_headers import written_acl
from objstore.s3.call import S3Call, S3Response
from objstore.s3.conditions import evaluate
from objstore.s3.copy import copy_keys, source_record
from objstore.s3.copy_source import CopySource, parse_copy_range, parse_copy_source
from objstore.s3.lock_headers import has_integrity_header
from objstore.s3.multipart_xml import (
    PartsPage,
    UploadsPage,
    complete_result,
    copy_part_result,
    initiate_result,
    list_parts_result,
    list_uploads_result,
    parse_complete,
)
from objstore.s3.objects import (
    encryption_headers,
    object_attrs,
    request_headers,
    version_header,
    write_precondition,
)
from objstore.s3.params import count_argument, encoding_type, integer_argument, part_number

log = Logger()
T = TypeVar("T")

XML = "application/xml"
MAX_LISTED = 1000
COPY_CONDITION_PREFIX = "x-amz-copy-source-if-"
ALGORITHMS = {"CRC32": "crc32", "CRC32C": "crc32c", "CRC64NVME": "crc64nvme",
              "SHA1": "sha1", "SHA256": "sha256"}


# -- request parsing (pure) -----------------------------------------------------------


def checksum_mode(algorithm: str | None, checksum_type: str | None) -> ChecksumMode:
    """The upload's checksum from x-amz-checksum-algorithm and x-amz-checksum-type, with
    AWS's defaults (COMPOSITE, but FULL_OBJECT for CRC64NVME) and refusals."""
    if algorithm is None or not algorithm.strip():
        if checksum_type is not None:
            raise S3Error("InvalidRequest", "The x-amz-checksum-type header can only be used "
                          "with the x-amz-checksum-algorithm header.")
        return ChecksumMode()
    name = ALGORITHMS.get(algorithm.strip().upper())
    if name is None:
        raise S3Error("InvalidRequest", "Checksum algorithm provided is unsupported. Please "
                      "try again with any of the valid types: [CRC32, CRC32C, CRC64NVME, "
                      "SHA1, SHA256]")
    default = FULL_OBJECT if name == "crc64nvme" else COMPOSITE
    kind = (checksum_type or default).strip().upper()
    if kind not in (COMPOSITE, FULL_OBJECT):
        raise S3Error("InvalidRequest", "Value for x-amz-checksum-type header is invalid.")
    full_only, composite_only = name == "crc64nvme", name not in CRC_ALGORITHMS
    if (kind == COMPOSITE and full_only) or (kind == FULL_OBJECT and composite_only):
        raise S3Error("InvalidRequest", f"The {kind} checksum type cannot be used with the "
                      f"{name} checksum algorithm.")
    return ChecksumMode(name, kind)


def count_param(query: Mapping[str, str], name: str, default: int) -> int:
    """A non-negative integer query parameter (max-parts, max-uploads,
    part-number-marker); the callers cap it."""
    return count_argument(query.get(name), name, default)


def completion_claims(headers: Mapping[str, str]) -> CompletionClaims:
    checksums = {alg: headers[name] for name in headers
                 if (alg := claimed_algorithm(name)) is not None}
    size_text = headers.get("x-amz-mp-object-size")
    object_size = None
    if size_text is not None:
        object_size = integer_argument(size_text, "x-amz-mp-object-size", "The "
                                       "x-amz-mp-object-size header must be a non-negative "
                                       "integer.")
    return CompletionClaims(
        checksums=checksums,
        checksum_type=headers.get("x-amz-checksum-type"),
        object_size=object_size,
    )


def mode_headers(upload: UploadRecord) -> dict[str, str]:
    mode = ChecksumMode.of(upload)
    if mode.algorithm is None:
        return {}
    headers = {"x-amz-checksum-algorithm": mode.algorithm.upper()}
    if mode.type:
        headers["x-amz-checksum-type"] = mode.type
    return headers


def part_headers(part: PartRecord) -> dict[str, str]:
    headers = {"ETag": f'"{part.etag}"'}
    for algorithm, value in sorted(part.checksums.items()):
        headers[f"x-amz-checksum-{algorithm}"] = value
    return headers


# -- shielding mutations from disconnects ----------------------------------------------


# -- handlers -------------------------------------------------------------------------


async def create_upload(call: S3Call) -> S3Response:
    headers = request_headers(call)
    attrs = object_attrs(call, headers, await written_acl(call, headers))
    mode = checksum_mode(headers.get("x-amz-checksum-algorithm"),
                         headers.get("x-amz-checksum-type"))
    settings = await call.services.bucket_config.stage_settings(call.bucket)
    ssec_key = customer_key(headers)
    plan = decide_stage_plan("CreateMultipartUpload", headers, settings,
                             key_id=call.services.objects.encryption_key_id,
                             customer=ssec_key is not None,
                             key_ids=call.services.objects.kms_key_ids)
    upload = await call.services.multipart.create(call.caller, call.bucket, call.key,
                                                  attrs, mode, plan, ssec_key)
    body = initiate_result(upload.bucket, upload.key, upload.upload_id)
    return S3Response(headers={**mode_headers(upload), **upload_encryption_headers(upload),
                               **ssec_response_headers(ssec_key)},
                      body=body, content_type=XML)


def upload_encryption_headers(upload: UploadRecord) -> dict[str, str]:
    """x-amz-server-side-encryption (and an SSE-KMS key id) of an encrypted upload, as AWS
    shows it on CreateMultipartUpload, UploadPart and UploadPartCopy."""
    plan = upload_plan(upload)
    return sse_headers(plan.encryption, plan.key_id)


async def upload_part(call: S3Call) -> S3Response:
    """UploadPart, or UploadPartCopy when the request names a copy source; the upload is
    looked up first either way."""
    number = part_number(call.query.get("partNumber"))
    multipart = call.services.multipart
    upload = await multipart.upload(call.bucket, call.key, call.query["uploadId"])
    if call.header("x-amz-copy-source") is not None:
        return await _copy_part(call, upload, number)
    spool = call.request.spool
    if spool is None or (call.header("content-length") is None
                         and call.header("transfer-encoding") is None):
        raise S3Error("MissingContentLength")
    headers = request_headers(call)
    if upload.extra.get("lock_required") and not has_integrity_header(headers):
        raise S3Error("InvalidRequest", "Content-MD5 OR x-amz-checksum- HTTP header is "
                      "required for Put Part requests with Object Lock parameters")
    claimed = claimed_checksums(spool, headers)
    part = await multipart.upload_part(call.caller, upload, number, spool, claimed)
    return S3Response(headers={**part_headers(part), **upload_encryption_headers(upload),
                               **ssec_response_headers(customer_key(headers))})


async def _copy_part(call: S3Call, upload: UploadRecord, number: int) -> S3Response:
    headers = request_headers(call)
    source_ref = parse_copy_source(headers["x-amz-copy-source"])
    try:
        part, source = await _copy_part_once(call, upload, number, source_ref, headers)
    except SourceChanged:
        try:
            part, source = await _copy_part_once(call, upload, number, source_ref, headers)
        except SourceChanged:
            raise S3Error("InternalError", "The copy source changed while it was being "
                          "copied; please retry.") from None
    response_headers = upload_encryption_headers(upload)
    response_headers.update(ssec_response_headers(customer_key(headers)))
    if source.version_id != NULL_VERSION:
        response_headers["x-amz-copy-source-version-id"] = source.version_id
    return S3Response(headers=response_headers, body=copy_part_result(part), content_type=XML)


async def _copy_part_once(
    call: S3Call, upload: UploadRecord, number: int, source_ref: CopySource,
    headers: Mapping[str, str],
) -> tuple[PartRecord, ObjectRecord]:
    source = await source_record(call, source_ref)
    evaluate(headers, source.etag, source.last_modified, prefix=COPY_CONDITION_PREFIX,
             not_modified_code="PreconditionFailed")
    span = parse_copy_range(headers.get("x-amz-copy-source-range"), source.size)
    keys = copy_keys(headers, source)
    if upload_plan(upload).encryption == SSE_C:  # the upload's key, as on UploadPart
        require_key(upload.extra.get(SSEC_EXTRA) or {}, keys.destination)
    else:
        refuse_key_for_other(keys.destination)
    part = await call.services.multipart.copy_part(call.caller, upload, number, source, span,
                                                   keys)
    return part, source


async def complete_upload(call: S3Call) -> S3Response:
    requested = parse_complete(call.body())
    headers = request_headers(call)
    precondition = write_precondition(headers)
    claims = completion_claims(headers)
    ssec_key = customer_key(headers)
    if ssec_key is not None:  # optional here (the AWS CLI sends it): checked when given
        await _check_upload_key(call, ssec_key)
    location = _location(call)  # its Host header is read before anything changes
    record = await call.services.multipart.complete_by_id(
        call.caller, call.bucket, call.key, call.query["uploadId"], requested, claims,
        precondition)
    body = complete_result(location, record.bucket, record.key, record.etag,
                           record.checksums, record.checksum_type)
    return S3Response(headers={**version_header(record), **encryption_headers(record),
                               **ssec_response_headers(ssec_key)},
                      body=body, content_type=XML)


async def _check_upload_key(call: S3Call, key: CustomerKey) -> None:
    """A completion that names an SSE-C key names its upload's (403 another one; a key
    for an upload that is not SSE-C is 400). A completed upload is left to the
    completion's own answer."""
    try:
        upload = await call.services.multipart.upload(call.bucket, call.key,
                                                      call.query["uploadId"])
    except S3Error:
        return
    if upload_plan(upload).encryption == SSE_C:
        require_key(upload.extra.get(SSEC_EXTRA) or {}, key)
    else:
        refuse_key_for_other(key)


def _location(call: S3Call) -> str:
    scheme = "https" if call.request.isSecure() else "http"
    host = call.header("host") or "localhost"
    return f"{scheme}://{host}/{quote(call.bucket)}/{quote(call.key)}"


async def abort_upload(call: S3Call) -> S3Response:
    multipart = call.services.multipart
    upload = await multipart.upload(call.bucket, call.key, call.query["uploadId"])
    await multipart.abort(call.caller, upload)
    return S3Response(status=204)


async def list_parts(call: S3Call) -> S3Response:
    max_parts = min(count_param(call.query, "max-parts", MAX_LISTED), MAX_LISTED)
    marker = count_param(call.query, "part-number-marker", 0)
    multipart = call.services.multipart
    upload = await multipart.upload(call.bucket, call.key, call.query["uploadId"])
    parts, truncated = await multipart.list_parts(upload, marker, max_parts)
    body = list_parts_result(PartsPage(upload, parts, marker, max_parts, truncated))
    return S3Response(body=body, content_type=XML)


async def list_uploads(call: S3Call) -> S3Response:
    query = call.query
    encoding = encoding_type(query)
    max_uploads = min(count_param(query, "max-uploads", MAX_LISTED), MAX_LISTED)
    prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
    key_marker = query.get("key-marker", "")
    upload_id_marker = query.get("upload-id-marker", "") if key_marker else ""
    listing = await call.services.multipart.list_uploads(
        call.bucket, prefix=prefix, delimiter=delimiter, key_marker=key_marker,
        upload_id_marker=upload_id_marker, max_uploads=max_uploads,
    )
    body = list_uploads_result(UploadsPage(
        bucket=call.bucket, prefix=prefix, delimiter=delimiter, key_marker=key_marker,
        upload_id_marker=upload_id_marker, max_uploads=max_uploads,
        encoding_type=encoding, uploads=listing.uploads,
        common_prefixes=listing.common_prefixes, is_truncated=listing.is_truncated,
        next_key_marker=listing.next_key_marker,
        next_upload_id_marker=listing.next_upload_id_marker,
    ))
    return S3Response(body=body, content_type=XML)
