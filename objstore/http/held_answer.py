"""Answers held until something is durable: the request of a listener whose site has an
`AnswerGate` (`[audit] strict = true`: the gate commits the request's audit record).

`HeldAnswerRequest` is the one place where the first byte of an answer leaves: twisted.web
writes the status line and headers at a request's first `write` (or at `finish` without
one), and an answer refused before its body goes out through `reject_now`. There, it asks
the gate `before_answer(request, bytes_out)` with the status and headers the handler set;
None lets the answer go at once (a request the gate does not cover). A Deferred holds it:
what the handler writes meanwhile is kept in memory, a `finish` is remembered, and a
streaming producer (a GET's `BlobProducer` or `SendfileProducer`) is paused, so at most a
chunk or two wait, never the object. When the Deferred fires, the kept bytes go out in
order, the finish follows and the producer resumes. When it fails, the answer is never
sent: the handler's headers and bytes are dropped, its producer stopped, and the gate's
`refusal` (a 503 S3 XML or admin JSON document) is sent instead; whatever the handler does
afterwards is ignored. A client that left during the hold gets nothing, as it would have.

The site uses this class only when it has a gate (`ObjstoreSite.requestFactory`), so a
listener without one runs twisted.web's `write` and `finish` untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http

from objstore.http.channel import EarlyAnswer
from objstore.http.client_bytes import decimal
from objstore.http.site import ObjstoreRequest, ResponseHeaders, pause_reading

_log = Logger()

# States of a request's answer.
_OPEN = 0  # nothing written yet
_HELD = 1  # waiting for the gate
_SENT = 2  # released (or never held): writes go straight to twisted.web
_REPLACED = 3  # the gate failed: the refusal was sent; the handler's answer is dropped

# Headers every answer carries, kept when the held answer is replaced by the refusal.
KEPT_HEADERS = (b"server", b"date", b"x-amz-request-id", b"x-amz-id-2")


class AnswerGate(Protocol):
    def before_answer(self, request: ObjstoreRequest, bytes_out: int
                      ) -> defer.Deferred[Any] | None:
        """What `request`'s answer (status `request.code`, `bytes_out` bytes of body)
        waits for; None: it need not wait."""
        ...

    def refusal(self, request: ObjstoreRequest) -> EarlyAnswer:
        """What is sent instead of an answer whose wait failed."""
        ...


def bytes_out(method: bytes, status: int, content_length: Sequence[bytes] | None,
              written: int) -> int:
    """The size of the body an answer sends: none for HEAD, 204 and 304 (their
    Content-Length describes a body never sent); else as the answer declares it (its
    Content-Length, when it has a valid one), else the bytes written so far (a chunked or
    unfinished answer)."""
    if method == b"HEAD" or status in http.NO_BODY_CODES:
        return 0
    if content_length:
        declared = decimal(content_length[0].decode("latin-1").strip())
        if declared is not None:
            return declared
    return written


class HeldAnswerRequest(ObjstoreRequest):
    """See the module docstring."""

    _answer_state = _OPEN
    _kept: list[bytes] | None = None
    _finish_wanted = False
    _paused_producer: Any = None

    # -- the first byte of a processed request's answer ----------------------------------
    def write(self, data: bytes) -> None:
        state = self._answer_state
        if state == _SENT:
            super().write(data)
            return
        if state == _REPLACED:
            return
        if state == _OPEN:
            if self.finished or self._disconnected or not self._hold(data):
                self._answer_state = _SENT
                super().write(data)
            return
        assert self._kept is not None
        self._kept.append(data)
        self._pause_producer()

    def finish(self) -> None:
        state = self._answer_state
        if state == _REPLACED:
            return
        if state == _OPEN and not (self.finished or self._disconnected):
            self.write(b"")  # the head: may start the hold
            state = self._answer_state
        if state == _HELD:
            self._finish_wanted = True
            return
        super().finish()

    def _hold(self, first: bytes) -> bool:
        """Start holding the answer whose first write is `first` (False: it need not
        wait). The gate's answer may come at once: `first` is kept before it can."""
        gate: AnswerGate | None = self.objstore_site.answer_gate
        if gate is None:
            return False
        size = bytes_out(self.method, self.code,
                         self.responseHeaders.getRawHeaders(b"content-length"), len(first))
        waiting = gate.before_answer(self, size)
        if waiting is None:
            return False
        self._answer_state = _HELD
        self._kept = [first]
        self._pause_producer()
        waiting.addCallbacks(self._release, self._replace)
        return True

    def _pause_producer(self) -> None:
        producer = self.producer
        if producer is not None and self.streamingProducer and self._paused_producer is None:
            self._paused_producer = producer
            producer.pauseProducing()

    def _release(self, _: object) -> None:
        kept, self._kept = self._kept or [], None
        self._answer_state = _SENT
        if self._disconnected:
            return
        for data in kept:
            self.write(data)  # twisted.web's own, or the no-op it sets for HEAD
        if self._finish_wanted:
            self.finish()
        paused: Any = self._paused_producer
        self._paused_producer = None
        if paused is not None and not self.finished and self.producer is paused:
            self.producer.resumeProducing()  # type: ignore[union-attr]

    def _replace(self, reason: Failure) -> None:
        gate: AnswerGate = self.objstore_site.answer_gate
        self._kept = None
        self._answer_state = _REPLACED
        _log.warn("request {id}: its answer ({status}) was withheld: {error}",
                  id=self.request_id, status=self.code, error=reason.getErrorMessage())
        if self._disconnected:
            return
        producer, self._paused_producer = self.producer, None
        if producer is not None:
            self.unregisterProducer()
            producer.stopProducing()
        self._send_refusal(gate.refusal(self))

    def _send_refusal(self, answer: EarlyAnswer) -> None:
        kept = ResponseHeaders()
        for name in KEPT_HEADERS:
            values = self.responseHeaders.getRawHeaders(name)
            if values:
                kept.setRawHeaders(name, values)
        self.responseHeaders = kept
        self.etag = self.lastModified = None
        self.setResponseCode(answer.status, http.RESPONSES.get(answer.status))
        self.setHeader(b"Content-Type", answer.content_type)
        self.setHeader(b"Content-Length", b"%d" % len(answer.body))
        for name, value in answer.headers:
            self.setHeader(name, value)
        super().write(answer.body)
        super().finish()

    # -- answers refused before the body ---------------------------------------------------
    def send_early(self, answer: EarlyAnswer) -> None:
        gate: AnswerGate | None = self.objstore_site.answer_gate
        waiting = None if gate is None else gate.before_answer(self, len(answer.body))
        if waiting is None:
            super().send_early(answer)
            return
        pause_reading(self, True)  # the body will never be read: read nothing meanwhile
        self._answer_state = _HELD

        def refused(reason: Failure) -> None:
            assert gate is not None
            _log.warn("request {id}: its answer ({status}) was withheld: {error}",
                      id=self.request_id, status=answer.status,
                      error=reason.getErrorMessage())
            super(HeldAnswerRequest, self).send_early(gate.refusal(self))

        waiting.addCallbacks(lambda _: super(HeldAnswerRequest, self).send_early(answer),
                             refused)
