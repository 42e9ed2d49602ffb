"""CopyObject: PUT /bucket/key with `x-amz-copy-source` (UploadPartCopy, which also carries
an uploadId, is routed to multipart before it gets here).

This module owns the HTTP side of a server-side copy: the source header and its
authorization (s3:GetObject, or s3:GetObjectVersion with a versionId, on the source object,
besides s3:PutObject on the destination checked by the router), the metadata and tagging
directives, the `x-amz-copy-source-if-*` conditions, the rule against copying an object
onto itself unchanged, and the object lock headers of the new version (the source's lock
state is never copied: the destination gets what the request asks for, or its bucket's
default retention). The bytes are copied by the engine on the IO pool; this module never
touches a blob.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from objstore.crypto.customer_key import (
    COPY_SOURCE_PREFIX,
    CopyKeys,
    customer_key,
    key_for_object,
)
from objstore.crypto.customer_key import response_headers as ssec_response_headers
from objstore.engine.objects import ObjectAttrs, SourceChanged
from objstore.errors import S3Error
from objstore.meta.records import NULL_VERSION, ObjectRecord, WritePrecondition
from objstore.s3.acl_headers import written_acl
from objstore.s3.call import S3Call, S3Response
from objstore.s3.conditions import evaluate
from objstore.s3.copy_source import CopySource, parse_copy_source
from objstore.s3.objects import (
    encryption_headers,
    object_attrs,
    request_headers,
    version_header,
    write_precondition,
)
from objstore.s3.objects_xml import copy_object_result_document

XML = "application/xml"
DIRECTIVES = frozenset({"COPY", "REPLACE"})
COPY_CONDITION_PREFIX = "x-amz-copy-source-if-"
# Request headers that change an object's encryption or website redirect: a copy onto
# itself that sets one of them is a real change.
CHANGING_HEADERS = (
    "x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-customer-algorithm", "x-amz-website-redirect-location",
)
SELF_COPY_MESSAGE = (
    "This copy request is illegal because it is trying to copy an object to itself without "
    "changing the object's metadata, storage class, website redirect location or encryption "
    "attributes."
)


@dataclass(frozen=True)
class CopyDirectives:
    metadata: str = "COPY"  # COPY | REPLACE
    tagging: str = "COPY"


def parse_directives(headers: Mapping[str, str]) -> CopyDirectives:
    return CopyDirectives(
        metadata=_directive(headers, "x-amz-metadata-directive", "metadata"),
        tagging=_directive(headers, "x-amz-tagging-directive", "tagging"),
    )


def _directive(headers: Mapping[str, str], name: str, what: str) -> str:
    value = headers.get(name, "COPY").strip()
    if value not in DIRECTIVES:
        raise S3Error("InvalidArgument", f"Unknown {what} directive.", ArgumentName=name,
                      ArgumentValue=value)
    return value


def copied_attrs(
    source: ObjectRecord, directives: CopyDirectives, requested: ObjectAttrs
) -> ObjectAttrs:
    """The destination's attributes. COPY keeps the source's content type, user metadata
    and system headers (resp. tags); REPLACE takes them from the request. The storage class
    always comes from the request (STANDARD when it names none), as on AWS."""
    described = requested
    if directives.metadata == "COPY":
        described = replace(requested, content_type=source.content_type,
                            user_metadata=dict(source.user_metadata),
                            system_headers=dict(source.system_headers))
    tags = requested.tags if directives.tagging == "REPLACE" else dict(source.tags)
    return replace(described, tags=tags, checksums={})


def self_copy_refused(
    source: CopySource, record: ObjectRecord, bucket: str, key: str,
    directives: CopyDirectives, headers: Mapping[str, str],
) -> bool:
    """True for a copy of the current object onto itself that changes nothing AWS counts
    as a change (metadata with REPLACE, storage class, encryption, website redirect).
    Copying an older version over the current one restores it, which is allowed."""
    if (source.bucket, source.key) != (bucket, key) or not record.is_latest:
        return False
    if directives.metadata == "REPLACE":
        return False
    requested_class = headers.get("x-amz-storage-class")
    if requested_class is not None and requested_class.strip() != record.storage_class:
        return False
    return not any(name in headers for name in CHANGING_HEADERS)


@dataclass(frozen=True)
class CopyRequest:
    source: CopySource
    directives: CopyDirectives
    requested: ObjectAttrs
    precondition: WritePrecondition | None
    headers: Mapping[str, str]


async def copy_object(call: S3Call) -> S3Response:
    headers = request_headers(call)
    acl = await written_acl(call, headers)
    request = CopyRequest(
        source=parse_copy_source(headers["x-amz-copy-source"]),
        directives=parse_directives(headers),
        requested=object_attrs(call, headers, acl),
        precondition=write_precondition(headers),
        headers=headers,
    )
    try:
        record, source = await _copy_once(call, request)
    except SourceChanged:
        try:
            record, source = await _copy_once(call, request)
        except SourceChanged:
            raise S3Error("InternalError", "The copy source changed while it was being "
                          "copied; please retry.") from None
    response_headers = version_header(record)
    response_headers.update(encryption_headers(record))
    response_headers.update(ssec_response_headers(customer_key(headers)))
    if source.version_id != NULL_VERSION:
        response_headers["x-amz-copy-source-version-id"] = source.version_id
    return S3Response(headers=response_headers, body=copy_object_result_document(record),
                      content_type=XML)


async def _copy_once(call: S3Call, request: CopyRequest) -> tuple[ObjectRecord, ObjectRecord]:
    """(new record, source record) of one attempt; SourceChanged when the source's bytes
    vanished under a concurrent overwrite (a second lookup sees the new source)."""
    source = await source_record(call, request.source)
    evaluate(request.headers, source.etag, source.last_modified,
             prefix=COPY_CONDITION_PREFIX, not_modified_code="PreconditionFailed")
    if self_copy_refused(request.source, source, call.bucket, call.key, request.directives,
                         request.headers):
        raise S3Error("InvalidRequest", SELF_COPY_MESSAGE)
    attrs = copied_attrs(source, request.directives, request.requested)
    keys = copy_keys(request.headers, source)
    record = await call.services.objects.copy(
        call.caller, source, call.bucket, call.key, attrs, request.precondition,
        plan=call.services.objects.copy_plan(
            request.headers, await call.services.bucket_config.stage_settings(call.bucket),
            customer=keys.destination is not None),
        keys=keys,
    )
    return record, source


def copy_keys(headers: Mapping[str, str], source: ObjectRecord) -> CopyKeys:
    """The SSE-C keys of a copy (CopyObject, UploadPartCopy): the source's, checked
    against it (400 without one for an SSE-C source, 403 another one), and the one the
    destination is to be encrypted with."""
    source_key = key_for_object(source.encryption_algorithm, source.encryption_params,
                                customer_key(headers, COPY_SOURCE_PREFIX))
    return CopyKeys(source_key, customer_key(headers))


async def source_record(call: S3Call, source: CopySource) -> ObjectRecord:
    """The version a copy (CopyObject, UploadPartCopy) reads, as a read of it answers."""
    try:
        return await call.services.objects.head(source.bucket, source.key, source.version_id)
    except S3Error as error:
        if error.code == "MethodNotAllowed":
            raise S3Error("InvalidRequest", "The source of a copy request may not "
                          "specifically refer to a delete marker by version id.") from None
        # The delete-marker headers of a GET describe the source, not this response.
        error.headers.clear()
        raise
