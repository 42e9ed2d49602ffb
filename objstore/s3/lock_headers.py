"""The object lock headers of the S3 API: `x-amz-object-lock-mode`,
`-retain-until-date` and `-legal-hold` on PutObject, CopyObject and
CreateMultipartUpload (parsed into a `LockRequest`), the same headers on GET/HEAD
responses, and the integrity-header rule that writes with lock parameters follow.

Pure functions of header mappings and records (no Twisted, no I/O), shared by the object,
copy and multipart handlers; the permission checks that go with the headers live with the
handlers.
"""

from __future__ import annotations

from collections.abc import Mapping

from objstore.engine import lock_rules
from objstore.errors import S3Error
from objstore.http.checksum_headers import is_checksum_claim
from objstore.meta.records import ObjectRecord
from objstore.s3.versioning_xml import parse_timestamp
from objstore.s3.xml import iso8601

MODE_HEADER = "x-amz-object-lock-mode"
UNTIL_HEADER = "x-amz-object-lock-retain-until-date"
HOLD_HEADER = "x-amz-object-lock-legal-hold"
BYPASS_HEADER = "x-amz-bypass-governance-retention"


def lock_request(headers: Mapping[str, str]) -> lock_rules.LockRequest:
    """The lock a write asks for. Mode and date come together; values as AWS spells them
    (InvalidArgument otherwise)."""
    mode, until_text = headers.get(MODE_HEADER), headers.get(UNTIL_HEADER)
    hold = headers.get(HOLD_HEADER)
    if (mode is None) != (until_text is None):
        raise S3Error("InvalidArgument", "x-amz-object-lock-retain-until-date and "
                      "x-amz-object-lock-mode must both be supplied",
                      ArgumentName=MODE_HEADER if mode is None else UNTIL_HEADER)
    until = None
    if mode is not None and until_text is not None:
        mode = mode.strip()
        if mode not in lock_rules.MODES:
            raise S3Error("InvalidArgument", "Unknown wormMode directive.",
                          ArgumentName=MODE_HEADER, ArgumentValue=mode)
        until = parse_timestamp(until_text)
        if until is None:
            raise S3Error("InvalidArgument", "The retain until date must be provided in "
                          "ISO 8601 format", ArgumentName=UNTIL_HEADER,
                          ArgumentValue=until_text)
    if hold is not None:
        hold = hold.strip()
        if hold not in lock_rules.HOLD_STATUSES:
            raise S3Error("InvalidArgument", "Legal Hold must be either of 'ON' or 'OFF'",
                          ArgumentName=HOLD_HEADER, ArgumentValue=hold)
    return lock_rules.LockRequest(mode, until, hold)


def lock_actions(request: lock_rules.LockRequest) -> list[str]:
    """The extra actions a write with lock headers needs, as on AWS."""
    actions = []
    if request.mode is not None:
        actions.append("s3:PutObjectRetention")
    if request.legal_hold is not None:
        actions.append("s3:PutObjectLegalHold")
    return actions


def bypass_requested(headers: Mapping[str, str]) -> bool:
    return (headers.get(BYPASS_HEADER) or "").strip().lower() == "true"


def retention_headers(record: ObjectRecord) -> dict[str, str]:
    if record.retention_mode is None or record.retain_until_date is None:
        return {}
    return {MODE_HEADER: record.retention_mode,
            UNTIL_HEADER: iso8601(record.retain_until_date)}


def legal_hold_headers(record: ObjectRecord) -> dict[str, str]:
    if record.legal_hold_status is None:
        return {}
    return {HOLD_HEADER: record.legal_hold_status}


def has_integrity_header(headers: Mapping[str, str]) -> bool:
    """Content-MD5 or an x-amz-checksum-* value (header or announced trailer);
    authentication has already verified whichever was sent."""
    if "content-md5" in headers or any(is_checksum_claim(name) for name in headers):
        return True
    trailers = (headers.get("x-amz-trailer") or "").lower().split(",")
    return any(is_checksum_claim(name.strip()) for name in trailers)
