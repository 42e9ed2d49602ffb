"""Object lock operations of the S3 API: Get/PutObjectLockConfiguration (GET/PUT
/bucket?object-lock), Get/PutObjectRetention (/bucket/key?retention) and
Get/PutObjectLegalHold (/bucket/key?legal-hold), each with an optional versionId.

The PUTs need Content-MD5 or an x-amz-checksum-* value, as AWS requires of object lock
requests (authentication has verified whichever was sent). The rules themselves
(governance bypass, compliance, legal hold) live in `engine/lock_rules.py`; this module
only parses, asks the engine and renders.
"""

from __future__ import annotations

from objstore.errors import S3Error
from objstore.meta.records import ObjectRecord
from objstore.s3.call import S3Call, S3Response
from objstore.s3.lock_headers import bypass_requested, has_integrity_header
from objstore.s3.objects import request_headers, version_id_param
from objstore.s3.versioning_xml import (
    legal_hold_document,
    lock_configuration_document,
    parse_legal_hold,
    parse_lock_configuration,
    parse_retention,
    retention_document,
)

XML = "application/xml"


def require_integrity(call: S3Call) -> None:
    if not has_integrity_header(request_headers(call)):
        raise S3Error("InvalidRequest", "Missing required header for this request: "
                      "Content-MD5 OR x-amz-checksum-*")


# -- bucket configuration --------------------------------------------------------------


async def get_lock_configuration(call: S3Call) -> S3Response:
    config = await call.services.bucket_config.lock_configuration(call.bucket)
    return S3Response(body=lock_configuration_document(config), content_type=XML)


async def put_lock_configuration(call: S3Call) -> S3Response:
    """On a bucket without object lock this turns it on (only while the bucket is empty:
    the spec's deliberate divergence from AWS), with versioning."""
    require_integrity(call)
    config = parse_lock_configuration(call.body())
    await call.services.bucket_config.put_lock_configuration(call.caller, call.bucket, config)
    return S3Response()


# -- retention and legal hold of one version -------------------------------------------


async def _locked_version(call: S3Call) -> ObjectRecord:
    """The version a GET of retention or legal hold names; the bucket must have object
    lock (InvalidRequest otherwise, as on AWS)."""
    version_id = version_id_param(call)
    await call.services.versions.lock_bucket(call.bucket)
    return await call.services.objects.head(call.bucket, call.key, version_id)


async def get_retention(call: S3Call) -> S3Response:
    record = await _locked_version(call)
    if record.retention_mode is None:
        raise S3Error("NoSuchObjectLockConfiguration")
    return S3Response(body=retention_document(record), content_type=XML)


async def put_retention(call: S3Call) -> S3Response:
    require_integrity(call)
    version_id = version_id_param(call)
    retention = parse_retention(call.body())
    await call.services.versions.put_retention(
        call.caller, call.bucket, call.key, version_id, retention,
        bypass_governance=bypass_requested(request_headers(call)),
    )
    return S3Response()


async def get_legal_hold(call: S3Call) -> S3Response:
    record = await _locked_version(call)
    if record.legal_hold_status is None:
        raise S3Error("NoSuchObjectLockConfiguration")
    return S3Response(body=legal_hold_document(record.legal_hold_status), content_type=XML)


async def put_legal_hold(call: S3Call) -> S3Response:
    require_integrity(call)
    version_id = version_id_param(call)
    status = parse_legal_hold(call.body())
    await call.services.versions.put_legal_hold(call.caller, call.bucket, call.key, version_id,
                                                status)
    return S3Response()
