"""What the layers of a request note about it for the audit log and the metrics, while it is
served: which API took it, who the caller claimed and proved to be, and the error code of
the answer. Every `ObjstoreRequest` carries one (`request.audit`).

Plain data with no behaviour and no imports: the HTTP plumbing, the authenticator and both
APIs write it; only `objstore.audit.requests` reads it, once the response has finished
(or, with [audit] strict, when its first byte is about to leave).
Never put a secret here (no signature, no Authorization header, no secret key).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RequestAudit:
    api: str = "s3"  # "s3", "admin", "cluster" or "console", set by the root resource
    started: float = 0.0  # clock reading when the headers were complete
    access_key: str = ""  # the access key id the request was signed with (proved or not)
    user_id: str = ""  # set only once the signature was verified
    username: str = ""
    error_code: str = ""  # the S3 or admin error code of the response, if any
    # What the S3 API read from the request line, before anything could refuse it.
    operation: str = ""  # the route's operation name; "" when the S3 API never saw it
    bucket: str = ""
    key: str = ""
    details: dict[str, str] | None = None  # ids the request names (version_id, upload_id)
    # [audit] strict (audit/strict.py): the record was written before the answer left, or
    # the status of the answer withheld because it could not be.
    recorded: bool = False
    withheld: int = 0


def _audit_of(request: object) -> RequestAudit | None:
    # Requests made by test doubles (StubTreq, DummyRequest) carry no RequestAudit.
    audit = getattr(request, "audit", None)
    return audit if isinstance(audit, RequestAudit) else None


def note_api(request: object, api: str) -> None:
    audit = _audit_of(request)
    if audit is not None:
        audit.api = api


def note_access_key(request: object, access_key: str) -> None:
    audit = _audit_of(request)
    if audit is not None:
        audit.access_key = access_key


def note_user(request: object, user_id: str, username: str) -> None:
    audit = _audit_of(request)
    if audit is not None:
        audit.user_id, audit.username = user_id, username


def note_operation(request: object, operation: str, bucket: str, key: str,
                   details: dict[str, str] | None) -> None:
    audit = _audit_of(request)
    if audit is not None:
        audit.operation, audit.bucket, audit.key, audit.details = operation, bucket, key, details


def note_error(request: object, code: str) -> None:
    audit = _audit_of(request)
    if audit is not None:
        audit.error_code = code
