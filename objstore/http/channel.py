"""The HTTP/1.1 connection of the listener: what happens before a request reaches a resource.

`ObjstoreChannel` is twisted.web's `HTTPChannel` with the limits and deadlines of a
request's head answered, never a silent close: a request line or header block over
`HEAD_LIMIT_BYTES` is 400 RequestHeaderSectionTooLarge; headers not complete
`header_timeout_seconds` after their first byte are 400 RequestTimeout (twisted.web's only
deadline is an idle timer that every trickled byte resets); a body that stalls for the idle
timeout is 400 RequestTimeout too; any other malformed head is 400 InvalidRequest. Each is
S3 XML with `Connection: close`, written straight to the transport (`answer_early`), because
no resource runs for such a request; a request refused from its headers is answered the
same way. It also hands the request line to the request as soon as the headers are
complete (twisted.web sets it only once the body has arrived), so that the request can be
authenticated before its body is read.

An HTTP/1.0 request that asks `Connection: keep-alive` keeps its connection when its answer
is delimited without a close (a Content-Length, or no body: HEAD, 204, 304), and the
answer says `Connection: Keep-Alive`; any other HTTP/1.0 answer ends with a close.
twisted.web closes every HTTP/1.0 connection: it decides before the answer's length is
known, so the decision is taken here when the answer's head is written (`writeHeaders`).

It owns request ids too. It must never run an API's code.
"""

from __future__ import annotations

import base64
import os
import random
from dataclasses import dataclass
from typing import Any

from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.http import datetimeToString

from objstore.errors import RETRY_AFTER_SECONDS, S3Error
from objstore.http.error_xml import error_document

# The request line plus every header line (without line ends), and any one line: what
# twisted.web allows too, but it closed the connection without a word past it.
HEAD_LIMIT_BYTES = 16 * 1024
HEADER_TIMEOUT_SECONDS = 20.0
IDLE_TIMEOUT_SECONDS = 60.0  # twisted.web's default is 12 hours

_log = Logger()


class _RequestIds:
    """Request ids and host ids without a system call per request: a PRNG seeded from
    os.urandom once per process (and again after a fork). The ids only need to be unique
    enough to find a request in the logs; they are not secrets."""

    def __init__(self) -> None:
        self._pid = -1
        self._random = random.Random()

    def _source(self) -> random.Random:
        pid = os.getpid()
        if pid != self._pid:
            self._random.seed(os.urandom(32))
            self._pid = pid
        return self._random

    def request_id(self) -> str:
        return f"{self._source().getrandbits(64):016X}"

    def host_id(self) -> str:
        return base64.b64encode(self._source().randbytes(24)).decode()


_ids = _RequestIds()


def new_request_id() -> str:
    return _ids.request_id()


def new_host_id() -> str:
    return _ids.host_id()


@dataclass(frozen=True, slots=True)
class EarlyAnswer:
    """A complete error response decided before the request's body was read."""

    status: int
    code: str  # the S3 or admin error code, for the audit log
    content_type: bytes
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


class Refusal(Exception):
    """Raised by an API's admission: refuse the request with `answer`, unread body and all."""

    def __init__(self, answer: EarlyAnswer) -> None:
        super().__init__(answer.code)
        self.answer = answer


def s3_answer(error: S3Error, request_id: str, host_id: str) -> EarlyAnswer:
    """`error` as the S3 XML document `render_error` would send."""
    body = error_document(error.code, error.message, request_id, host_id, error.fields)
    headers = [(name.encode("latin-1"), value.encode("latin-1"))
               for name, value in error.headers.items()]
    if error.status == 503:
        headers.append((b"Retry-After", str(RETRY_AFTER_SECONDS).encode()))
    return EarlyAnswer(error.status, error.code, b"application/xml", body, tuple(headers))


def early_answer_bytes(answer: EarlyAnswer, *, request_id: str, host_id: str,
                       server_header: bytes) -> bytes:
    """The whole response for `answer`, with `Connection: close`: the body was not read, so
    the connection can not carry another request."""
    reason = http.RESPONSES.get(answer.status, b"Error")
    head = [
        b"HTTP/1.1 %d %s" % (answer.status, reason),
        b"Server: " + server_header,
        b"Date: " + datetimeToString(),
        b"x-amz-request-id: " + request_id.encode(),
        b"x-amz-id-2: " + host_id.encode(),
        b"Content-Type: " + answer.content_type,
        b"Content-Length: %d" % len(answer.body),
        *(name + b": " + value for name, value in answer.headers),
        b"Connection: close",
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + answer.body


def asks_keep_alive(connection: list[bytes] | None) -> bool:
    """Whether the Connection header values name `keep-alive` (tokens separated by commas,
    any case)."""
    return any(token.strip().lower() == b"keep-alive"
               for value in connection or () for token in value.split(b","))


class ObjstoreChannel(http.HTTPChannel):
    """See the module docstring. The site sets `header_timeout_seconds`, `server_header` and
    `clock` (its reactor)."""

    MAX_LENGTH = HEAD_LIMIT_BYTES
    totalHeadersSize = HEAD_LIMIT_BYTES
    header_timeout_seconds: float = HEADER_TIMEOUT_SECONDS
    server_header: bytes = b"objstore"
    clock: Any = None  # IReactorTime

    def __init__(self) -> None:
        super().__init__()
        self._reading_head = True  # between requests, or in a request line and headers
        self._head_started: float | None = None  # when the first byte of this head came
        # One timer per connection, not per request: when it fires it checks the head in
        # progress (if any) and re-arms itself for what is left of that head's time.
        self._head_timer: Any = None  # an IDelayedCall
        self._answered = False
        self._abort_call: Any = None
        # What every request of the connection asks and the connection never changes (a
        # system call, an interface adaptation): looked up once.
        self._host: Any = None
        self._secure: bool | None = None
        self._keep_alive_1_0: Any = None  # the HTTP/1.0 request that asked to keep it

    def getHost(self) -> Any:  # noqa: N802
        if self._host is None:
            self._host = super().getHost()
        return self._host

    def isSecure(self) -> bool:  # noqa: N802
        if self._secure is None:
            self._secure = bool(super().isSecure())
        return self._secure

    # -- the head of a request -----------------------------------------------------------
    def dataReceived(self, data: bytes) -> None:  # noqa: N802
        if self._reading_head and self._head_started is None and not self._handlingRequest:
            self._head_started = self.clock.seconds()
            if self._head_timer is None:
                self._head_timer = self.callLater(self.header_timeout_seconds,
                                                  self._check_head_time)
        super().dataReceived(data)

    def _check_head_time(self) -> None:
        self._head_timer = None
        if self._head_started is None:
            return  # no head in progress: the next one arms the timer again
        left = self._head_started + self.header_timeout_seconds - self.clock.seconds()
        if left > 0:
            self._head_timer = self.callLater(left, self._check_head_time)
            return
        self._refuse_head(S3Error("RequestTimeout"))

    def lineLengthExceeded(self, line: bytes) -> None:  # noqa: N802
        self._refuse_head(S3Error("RequestHeaderSectionTooLarge"))

    def allHeadersReceived(self) -> None:  # noqa: N802
        self._head_read()
        request = self.requests[-1]
        # twisted.web sets these in requestReceived, after the body: the request needs them
        # before (authentication, routing).
        request.method, request.uri = self._command, self._path
        request.path = request.uri.split(b"?", 1)[0]
        request.clientproto = self._version
        super().allHeadersReceived()

    def requestDone(self, request: Any) -> None:  # noqa: N802
        self._reading_head = True
        super().requestDone(request)

    # -- HTTP/1.0 keep-alive (module notes) ------------------------------------------------
    def checkPersistence(self, request: Any, version: bytes) -> bool:  # noqa: N802
        self._keep_alive_1_0 = None
        if version == b"HTTP/1.0" and asks_keep_alive(
                request.requestHeaders.getRawHeaders(b"connection")):
            self._keep_alive_1_0 = request
            return True
        return bool(super().checkPersistence(request, version))

    def writeHeaders(self, version: bytes, code: bytes, reason: bytes,  # noqa: N802
                     headers: Any) -> None:
        request, self._keep_alive_1_0 = self._keep_alive_1_0, None
        if request is not None:
            if (request.method == b"HEAD" or int(code) in http.NO_BODY_CODES
                    or headers.hasHeader(b"content-length")):
                headers.setRawHeaders(b"Connection", [b"Keep-Alive"])
            else:  # the body ends with the connection
                self.persistent = False
        super().writeHeaders(version, code, reason, headers)

    def _head_read(self) -> None:
        self._reading_head = False
        self._head_started = None

    def _respondToBadRequestAndDisconnect(self) -> None:  # noqa: N802
        # twisted.web's answer to a malformed head, or one over totalHeadersSize, is a bare
        # status line; ours is S3 XML.
        if getattr(self, "_receivedHeaderSize", 0) > self.totalHeadersSize:
            self._refuse_head(S3Error("RequestHeaderSectionTooLarge"))
        else:
            self._refuse_head(S3Error("InvalidRequest", "The request is not valid HTTP/1.1."))

    def _refuse_head(self, error: S3Error) -> None:
        self._head_read()
        self.answer_early(s3_answer(error, new_request_id(), new_host_id()))

    # -- the body ------------------------------------------------------------------------
    def timeoutConnection(self) -> None:  # noqa: N802
        if self._answered or not self.requests or self._handlingRequest:
            super().timeoutConnection()  # idle between requests: close without a word
            return
        # In the middle of a request's head or body: tell the client why.
        transport: Any = self.transport
        _log.info("Timing out client: {peer}", peer=str(transport.getPeer()))
        self.answer_early(s3_answer(S3Error("RequestTimeout"), new_request_id(),
                                    new_host_id()))

    # -- answers written before any resource runs ----------------------------------------
    def answer_early(self, answer: EarlyAnswer, *, request_id: str | None = None,
                     host_id: str | None = None) -> None:
        """Answer the request being received with `answer` and close the connection once it
        is sent (or `abortTimeout` later, if the client does not read it); only the first
        answer is written."""
        transport: Any = self.transport
        if self._answered or transport is None or transport.disconnecting:
            return
        self._answered = True
        self.persistent = False
        transport.write(early_answer_bytes(
            answer, request_id=request_id or new_request_id(),
            host_id=host_id or new_host_id(), server_header=self.server_header))
        self.loseConnection()
        if self.abortTimeout is not None:
            self._abort_call = self.callLater(self.abortTimeout, self.forceAbortClient)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        for timer in (self._head_timer, self._abort_call):
            if timer is not None and timer.active():
                timer.cancel()
        self._head_timer = self._abort_call = None
        super().connectionLost(reason)
