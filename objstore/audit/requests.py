"""The request observer of the listener: when a request's headers are complete it notes the
time; when its response has finished (or its client has gone) it names the operation,
feeds the request metrics and queues an audit record. That costs about 15 microseconds of
reactor time per request, after the response: no I/O, no database.

Who: the access key the request was signed with and, once its signature was verified, the
user (a refused request has no user). What: the S3 operation name the S3 API noted from
its route table, or the admin operation name (`audit.operations`). Where: bucket and key
as the S3 API read them from the path (for admin calls the path itself, in `details`, as
it names the user, team or grant), and the version and upload ids, never the rest of the
query string, so a presigned URL's signature is never recorded; the User-Agent is the only
header kept. Whatever bytes a request's headers and path carry, it is recorded: the
User-Agent is read without the UTF-8 rule that refuses requests (bytes escaped), and the
log makes every text field storable (`redact.storable_record`). A request whose client
left before the answer is recorded with status 499 and ClientDisconnected. GET
/admin/health and GET /admin/metrics (unsigned probes and scrapes) are counted in the
metrics but not audited; cluster-protocol requests are neither.

With `[audit] strict = true` the record of an audited request is written before its answer
leaves (`record_now`, called by the request's `AnswerGate`, audit/strict.py): then the
finished request feeds the metrics and the access log only.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.audit.access_log import AccessEntry, AccessLog
from objstore.audit.log import AuditLog
from objstore.audit.operations import (
    ADMIN_HEALTH,
    ADMIN_METRICS,
    UNKNOWN,
    admin_operation,
)
from objstore.audit.redact import redact_text
from objstore.http.client_bytes import loggable_header
from objstore.http.ratelimit import peer_address
from objstore.http.site import ObjstoreRequest
from objstore.meta.audit_queries import AuditRecord, Detail
from objstore.metrics.registry import RequestMetrics

log = Logger()

UNAUDITED = frozenset({ADMIN_HEALTH, ADMIN_METRICS})
CLIENT_GONE_STATUS = 499
CLIENT_GONE_CODE = "ClientDisconnected"


class RequestRecorder:
    """The `ObjstoreSite` observer feeding the audit log and the request metrics."""

    def __init__(
        self, *, audit: AuditLog, metrics: RequestMetrics, clock: Callable[[], float],
        access: AccessLog | None = None,
    ) -> None:
        """`access`: the access log ([logging] access_log), None when it is off."""
        self._audit = audit
        self._access = access
        self._metrics = metrics
        self._clock = clock

    def request_started(self, request: ObjstoreRequest) -> None:
        request.audit.started = self._clock()
        self._metrics.in_flight += 1

    def request_finished(self, request: ObjstoreRequest, completed: bool) -> None:
        self._metrics.in_flight -= 1
        try:
            self._record(request, completed)
        except Exception:
            log.failure("recording a finished request failed")

    def _record(self, request: ObjstoreRequest, completed: bool) -> None:
        context = request.audit
        if context.api == "cluster":  # peers' traffic
            return
        status, error_code = outcome(request, completed)
        duration = max(0.0, self._clock() - context.started)
        bytes_in = request.spool.length if request.spool is not None else 0
        bytes_out = int(request.sentLength or 0)
        if self._access is not None:
            self._access.add(access_entry(request, status, duration, bytes_in, bytes_out))
        if context.api == "console":  # static files: neither metrics nor audit
            return
        operation, bucket, key, details = describe(request)
        self._metrics.observe(operation, status, error_code, duration, bytes_in, bytes_out)
        if operation in UNAUDITED or context.recorded:
            return
        self._audit.add(self._audit_record(
            request, operation, bucket, key, details, status=status, error_code=error_code,
            duration=duration, bytes_in=bytes_in, bytes_out=bytes_out))

    def record_now(self, request: ObjstoreRequest, bytes_out: int) -> Deferred[None] | None:
        """[audit] strict: write the record of `request`'s answer, about to be sent
        (`request.code`, the error code noted, `bytes_out` bytes), through the DB writer;
        fires once it is committed. None when the request is not audited (the answer need
        not wait); its record is then never queued again once it finishes."""
        context = request.audit
        if context.api in ("cluster", "console") or not self._audit.enabled:
            return None
        operation, bucket, key, details = describe(request)
        if operation in UNAUDITED:
            return None
        context.recorded = True
        bytes_in = request.spool.length if request.spool is not None else 0
        return self._audit.write_now(self._audit_record(
            request, operation, bucket, key, details, status=int(request.code),
            error_code=context.error_code,
            duration=max(0.0, self._clock() - context.started), bytes_in=bytes_in,
            bytes_out=bytes_out))

    def _audit_record(
        self, request: ObjstoreRequest, operation: str, bucket: str, key: str,
        details: dict[str, Detail], *, status: int, error_code: str, duration: float,
        bytes_in: int, bytes_out: int,
    ) -> AuditRecord:
        context = request.audit
        return AuditRecord(
            ts=context.started or self._clock(),
            operation=operation,
            node_id=self._audit.node_id,
            request_id=request.request_id,
            user_id=context.user_id,
            username=context.username,
            access_key=context.access_key,
            bucket=bucket,
            key=redact_text(key),
            source_ip=peer_address(request),
            status=status,
            error_code=error_code,
            duration_ms=round(duration * 1000.0, 3),
            bytes_in=bytes_in,
            bytes_out=bytes_out,
            user_agent=redact_text(loggable_header(
                request.requestHeaders.getRawHeaders(b"user-agent"))),
            details=details,
        )


def access_entry(request: ObjstoreRequest, status: int, duration: float, bytes_in: int,
                 bytes_out: int) -> AccessEntry:
    """The access log's line of a request: the path without its query string."""
    context = request.audit
    raw_path = (request.path or b"").split(b"?", 1)[0]
    return AccessEntry(
        ts=context.started or 0.0,
        request_id=request.request_id,
        principal=context.username or context.access_key or "-",
        source_ip=peer_address(request),
        method=(request.method or b"-").decode("ascii", "backslashreplace"),
        path=raw_path.decode("utf-8", "backslashreplace"),
        status=status,
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        duration_ms=duration * 1000.0,
    )


def outcome(request: ObjstoreRequest, completed: bool) -> tuple[int, str]:
    """(status, error code); a request whose client left unanswered gets 499."""
    code = request.audit.error_code
    if completed or code:
        return int(request.code), code
    return CLIENT_GONE_STATUS, CLIENT_GONE_CODE


def describe(request: ObjstoreRequest) -> tuple[str, str, str, dict[str, Detail]]:
    """(operation, bucket, key, details) of a request; with [audit] strict, an answer that
    was withheld (its record could not be written) is named in `withheld_status`."""
    context = request.audit
    details: dict[str, Detail] = {}
    if context.withheld:
        details["withheld_status"] = context.withheld
    if request.path is None:  # refused before the request line was complete
        return UNKNOWN, "", "", details
    if context.api == "admin":
        path = request.path.decode("utf-8", "replace")
        operation = admin_operation(request.method.decode("ascii", "replace"),
                                    path.split("/")[2:])
        # The ids the call names; a bucket only when the handler noted one (an archive).
        details["path"] = redact_text(path)
        return operation, context.bucket, "", details
    if not context.operation:  # the S3 API never saw it
        return UNKNOWN, "", "", details
    for name, value in (context.details or {}).items():
        details[name] = redact_text(value)
    return context.operation, context.bucket, context.key, details
