"""`[audit] strict = true`: no answer of an audited request reaches its client before its
audit record is committed to the metadata database.

`StrictAudit` is the listener's `AnswerGate` (http/held_answer.py holds each answer at its
first byte): it has the request's record written at once (`RequestRecorder.record_now`:
the status and error code of the answer about to be sent, the duration so far, the bytes
out its Content-Length declares) through the DB writer, where concurrent records share a
group commit with each other and with object writes; the answer goes once that COMMIT is
done. Requests that are not audited (cluster traffic, console files, health probes and
metric scrapes) and requests whose client left before an answer (recorded 499 as today,
after the fact) do not wait.

When the record can not be written (the database down, full or failing), the answer is
withheld and `refusal` is sent instead: 503 ServiceUnavailable with Retry-After, S3 XML or
admin JSON by the request's API. The operation itself may have taken effect (as after a
timeout: a PUT may be stored), which the client must assume; the 503 is queued as an
ordinary record naming the withheld status (`withheld_status`), written if the database
comes back before the process ends. No answer other than such a 503 is ever unrecorded.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from objstore.admin.api import admin_answer
from objstore.audit.requests import RequestRecorder
from objstore.errors import AdminError, S3Error
from objstore.http.channel import EarlyAnswer, s3_answer
from objstore.http.site import ObjstoreRequest

MESSAGE = ("The audit log could not record this request, so its answer was withheld; "
           "the operation may have taken effect.")


def refusal_for(api: str, request_id: str, host_id: str) -> EarlyAnswer:
    """The answer sent in place of one whose record could not be written."""
    if api == "admin":
        return admin_answer(AdminError("ServiceUnavailable", MESSAGE))
    return s3_answer(S3Error("ServiceUnavailable", MESSAGE), request_id, host_id)


class StrictAudit:
    """The `AnswerGate` of `[audit] strict = true` (see the module docstring)."""

    def __init__(self, recorder: RequestRecorder) -> None:
        self._recorder = recorder

    def before_answer(self, request: ObjstoreRequest, bytes_out: int) -> Deferred[Any] | None:
        return self._recorder.record_now(request, bytes_out)

    def refusal(self, request: ObjstoreRequest) -> EarlyAnswer:
        answer = refusal_for(request.audit.api, request.request_id, request.host_id)
        context = request.audit
        context.withheld = int(request.code)
        context.recorded = False  # the 503 is queued when the request finishes
        context.error_code = answer.code
        request.code = answer.status
        return answer
