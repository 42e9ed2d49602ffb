"""The HTTP listener's Site and Request: request ids, common headers, the admission of a
request before its body, the streamed body sink, request-level limits, in-flight tracking
for drain, and error pages that are never HTML.

twisted.web reads the whole body before any resource runs, so the work that needs no body is
done when the headers are complete (`ObjstoreRequest.gotLength`): a declared length over
`max_body_size` is answered at once with EntityTooLarge; then the API the request is for
admits it (authentication, authorization: `Gatekeeper`), reading nothing more meanwhile and
withholding `100 Continue`. A refused request is answered and its connection closed, its
body never read. An admitted one streams its body into a `BodySpool` (`getContentFile`):
aws-chunked decoding there, then a `BlobWriter` that keeps it on the data volume and hashes
it as it arrives; the admission's result (`request.admitted`) is carried to the handler.
The connection itself (limits and deadlines of a request's head) is `http/channel.py`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python import failure
from twisted.web import http, server
from twisted.web.http import datetimeToString
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource

from objstore.audit.context import RequestAudit
from objstore.blobs.factory import BlobStages
from objstore.blobs.plan import IDENTITY, StagePlan
from objstore.checksums import CHECKSUM_ALGORITHMS
from objstore.config import ServerLimits
from objstore.crypto.customer_key import CustomerKey
from objstore.errors import S3Error
from objstore.http import sigv4
from objstore.http.channel import (
    HEADER_TIMEOUT_SECONDS,
    IDLE_TIMEOUT_SECONDS,
    EarlyAnswer,
    ObjstoreChannel,
    Refusal,
    new_host_id,
    new_request_id,
    s3_answer,
)
from objstore.http.checksum_headers import claimed_algorithm
from objstore.http.client_bytes import decimal, header_value
from objstore.http.error_xml import error_document
from objstore.http.form_data import FormDecoder
from objstore.http.spool import BodySpool
from objstore.threads import NamedPool, Runner

if TYPE_CHECKING:
    from objstore.blobs.space import SpaceGuard

_log = Logger()
T = TypeVar("T")

_STREAMING = {
    sigv4.STREAMING_SIGNED,
    sigv4.STREAMING_SIGNED_TRAILER,
    sigv4.STREAMING_UNSIGNED_TRAILER,
}


class ResponseHeaders(Headers):
    """Response headers that keep `x-amz-meta-*` names in lower case, as S3 sends them:
    twisted.web title-cases every name, and SDKs derive user-metadata keys from the
    names' case."""

    _PREFIX = b"x-amz-meta-"

    def _literal(self, name: str | bytes) -> bytes | None:
        raw = name.encode("latin-1") if isinstance(name, str) else name
        lowered = raw.lower()
        return lowered if lowered.startswith(self._PREFIX) else None

    def setRawHeaders(self, name: str | bytes, values: Any) -> None:  # noqa: N802
        literal = self._literal(name)
        if literal is None:
            super().setRawHeaders(name, values)
            return
        self._rawHeaders[literal] = [_header_value(v) for v in values]

    def addRawHeader(self, name: str | bytes, value: str | bytes) -> None:  # noqa: N802
        literal = self._literal(name)
        if literal is None:
            super().addRawHeader(name, value)
            return
        self._rawHeaders.setdefault(literal, []).append(_header_value(value))


def _header_value(value: str | bytes) -> bytes:
    """Encode a header value; CR and LF never reach the wire (no header injection)."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return raw.replace(b"\r", b" ").replace(b"\n", b" ")


class Admitted(Protocol):
    """What an API's admission carries from a request's headers to its handler (opaque to
    the site, but for what the body's sink must know). An admission may also carry a
    `stage_plan` (blobs/plan.py: the S3 API's does): the stages the body passes through on
    its way to the disk, decided before the body, so that a body to encrypt is never
    spooled as sent; without one the body is stored as sent."""

    @property
    def hash_body(self) -> bool:
        """The body's SHA-256 is needed although the client did not claim one."""
        ...


@runtime_checkable
class Gatekeeper(Protocol):
    """Decides from a request's line and headers whether its body may be read: the
    Deferred fires with what the API carries to its handler, or fails with `Refusal` (how
    to answer); None: nothing to decide before the body."""

    def admit(self, request: ObjstoreRequest) -> defer.Deferred[Admitted] | None: ...


class AdmittingApi(Protocol):
    def admit(self, request: ObjstoreRequest) -> defer.Deferred[Admitted]: ...


class GatekeeperResource(Resource):
    """An API's Klein app as the leaf resource the root routes to, and that API's
    `Gatekeeper` (its admission runs before the body is read). APIs that must adjust the
    path before Klein routes override `render`."""

    isLeaf = True

    def __init__(self, klein: Any, api: AdmittingApi) -> None:
        super().__init__()
        self._klein = klein
        self._api = api

    def admit(self, request: ObjstoreRequest) -> defer.Deferred[Admitted]:
        return self._api.admit(request)

    def render(self, request: ObjstoreRequest) -> Any:
        return self._klein.render(request)


class ObjstoreRequest(server.Request):
    audit: RequestAudit
    request_id: str
    host_id: str
    spool: BodySpool | None
    early_error: S3Error | None
    # Set when the headers are complete: the declared body length (None: chunked) and, for
    # a request with a body, what its API's admission carries to the handler.
    body_length: int | None
    admitted: Admitted | None
    api_resource: Resource | None  # the API the root resource routed this request to

    def __init__(self, channel: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(channel, *args, **kwargs)
        self.responseHeaders = ResponseHeaders()
        self.request_id = new_request_id()
        self.host_id = new_host_id()
        self.spool = None
        self.early_error = None
        self.audit = RequestAudit()
        self.body_length = None
        self.admitted = None
        self.api_resource = None
        self._deciding = False  # the admission has not decided yet
        self._refused = False  # answered before the body: never processed
        self._process_waiting = False  # the body arrived before the admission decided
        self._held = False  # reading paused while the admission decides
        self._withheld_expect: list[bytes] | None = None

    def header(self, name: str) -> str | None:
        """The value of header `name`, or None; S3Error InvalidArgument when its bytes are
        not UTF-8 (`client_bytes.header_value`, the one rule for header bytes)."""
        values = self.requestHeaders.getRawHeaders(name.encode("ascii"))
        return header_value(name, values) if values else None

    @property
    def objstore_site(self) -> ObjstoreSite:
        site: ObjstoreSite = self.channel.site  # type: ignore[attr-defined]
        return site

    # -- from complete headers to the body's sink ----------------------------------------
    def gotLength(self, length: int | None) -> None:
        site = self.objstore_site
        site.request_started(self)  # from the first body byte on, a drain waits for us
        self.body_length = length
        too_large = site.size_refusal(self, length)
        if too_large is not None:
            self.reject_now(s3_answer(too_large, self.request_id, self.host_id))
            return
        admission = site.admission(self, length)
        if admission is None:
            self.content = site.open_spool(self, length, hash_body=False)
            return
        self.content = _HeldBody(self)
        self._deciding = True
        admission.addCallbacks(self._admit, self._refuse)
        if self._deciding:  # not decided at once (identity or policy not cached)
            self._hold_body()

    def _hold_body(self) -> None:
        """Read nothing more, and do not invite the body (twisted.web answers `Expect:
        100-continue` as soon as this returns), until the admission has decided."""
        self._held = True
        withheld = self.requestHeaders.getRawHeaders(b"expect")
        self._withheld_expect = list(withheld) if withheld else None
        self.requestHeaders.removeHeader(b"expect")
        pause_reading(self, True)

    def _admit(self, admitted: Admitted) -> None:
        self._deciding = False
        self.admitted = admitted
        if self._disconnected:
            return
        held = self.content
        assert isinstance(held, _HeldBody)
        self.content = self.objstore_site.open_spool(
            self, self.body_length, hash_body=admitted.hash_body,
            plan=stage_plan_of(admitted), form=form_decoder_of(admitted),
            checksums=getattr(admitted, "body_checksums", ()),
            customer_key=getattr(admitted, "customer_key", None))
        for chunk in held.chunks:
            self.content.write(chunk)
        if self._held:
            self._release_body(invite=not held.chunks)
        if self._process_waiting:
            self._process_waiting = False
            self.process()

    def _release_body(self, invite: bool) -> None:
        self._held = False
        withheld, self._withheld_expect = self._withheld_expect, None
        if withheld:
            self.requestHeaders.setRawHeaders(b"expect", withheld)
            wants = withheld[0].lower() == b"100-continue" and self.clientproto == b"HTTP/1.1"
            transport: Any = self.channel.transport
            if invite and wants:
                transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        pause_reading(self, False)

    def _refuse(self, reason: failure.Failure) -> None:
        self._deciding = False
        if isinstance(reason.value, Refusal):
            answer = reason.value.answer
        else:
            _log.failure("admitting request {uri} failed", reason, uri=self.uri)
            answer = s3_answer(S3Error("InternalError"), self.request_id, self.host_id)
        if not self._disconnected:
            self.reject_now(answer)

    def reject_now(self, answer: EarlyAnswer) -> None:
        """Answer before the body is read and close the connection: an unread body would
        desynchronise keep-alive, and reading gigabytes only to refuse them wastes both
        sides. The request is never processed."""
        self._refused = True
        self.content = _DiscardSink()
        self.requestHeaders.removeHeader(b"expect")  # when called from gotLength
        self.code, self.audit.error_code = answer.status, answer.code
        self.send_early(answer)

    def send_early(self, answer: EarlyAnswer) -> None:
        """Write `answer` straight to the connection and close it (`reject_now`)."""
        channel: ObjstoreChannel = self.channel  # type: ignore[assignment]
        channel.answer_early(answer, request_id=self.request_id, host_id=self.host_id)

    # -- the body is complete --------------------------------------------------------------
    def process(self) -> None:
        if self._refused:
            return  # answered already; the connection is closing
        if self._deciding:
            self._process_waiting = True
            return
        site = self.objstore_site
        self.site = site
        self.setHeader(b"Server", site.server_header)
        self.setHeader(b"Date", date_header())
        self.setHeader(b"x-amz-request-id", self.request_id)
        self.setHeader(b"x-amz-id-2", self.host_id)
        self.prepath = []
        self.postpath = list(map(http.unquote, self.path[1:].split(b"/")))
        if self.spool is not None:
            self.spool.finish_decoding()
            self.spool.flush_early()
            _read_in_large_blocks(self, False)
        try:
            resource = site.getResourceFor(self)
            self.render(resource)
        except BaseException:
            self.processingFailed(failure.Failure())

    def processingFailed(self, reason: failure.Failure) -> None:
        """Last resort: never an HTML page or a traceback."""
        _log.failure("unhandled error in request {uri}", reason, uri=self.uri)
        body = error_document(
            "InternalError", "We encountered an internal error. Please try again.",
            self.request_id, self.host_id, {},
        )
        self.setResponseCode(500)
        self.audit.error_code = "InternalError"
        self.setHeader(b"Content-Type", b"application/xml")
        self.setHeader(b"Content-Length", str(len(body)).encode())
        self.write(body)
        self.finish()
        return None


_date_now: tuple[int, bytes] = (-1, b"")


def date_header(now: Callable[[], float] = time.time) -> bytes:
    """The Date header's value (twisted.web's `datetimeToString`), formatted once per
    second rather than once per response."""
    global _date_now
    second = int(now())
    if _date_now[0] != second:
        _date_now = (second, datetimeToString(second))
    return _date_now[1]


class _DiscardSink:
    """Body sink for requests already answered: swallows bytes."""

    def write(self, data: bytes) -> None:
        pass

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def tell(self) -> int:
        return 0

    def read(self, size: int = -1) -> bytes:
        return b""

    def close(self) -> None:
        pass


class _HeldBody(_DiscardSink):
    """Body sink while the admission decides: keeps what arrived with the headers for the
    spool of an admitted request. Nothing reaches the disk before the decision, and little
    memory: reading is paused meanwhile, and paused again whenever bytes still arrive
    (twisted.web resumes its transport once a previous response has been sent)."""

    def __init__(self, request: ObjstoreRequest) -> None:
        self.chunks: list[bytes] = []
        self._request = request

    def write(self, data: bytes) -> None:
        self.chunks.append(data)
        pause_reading(self._request, True)


def stage_plan_of(admitted: Admitted) -> StagePlan:
    """The stage plan an admission decided (identity when its API has none)."""
    plan = getattr(admitted, "stage_plan", IDENTITY)
    return plan if isinstance(plan, StagePlan) else IDENTITY


def pause_reading(request: ObjstoreRequest, paused: bool) -> None:
    """Stop (or resume) reading the request's connection."""
    transport = getattr(request.channel, "transport", None)
    if transport is None or transport.disconnecting:
        return
    if paused:
        transport.pauseProducing()
    else:
        transport.resumeProducing()


class RequestObserver(Protocol):
    """Told when a request's headers are complete and when its response has finished
    (`completed` False: the connection was lost first). Must never raise."""

    def request_started(self, request: ObjstoreRequest) -> None: ...

    def request_finished(self, request: ObjstoreRequest, completed: bool) -> None: ...


# A body larger than this is read off the socket in blocks of LARGE_READ_BYTES instead of
# twisted's 64 KiB: at hundreds of MiB/s each read costs the reactor tens of microseconds
# of Python, so fewer, larger reads leave it free. Back to the default once the body is in
# (a 1 MiB read buffer would cost a large allocation per small request).
LARGE_BODY_BYTES = 8 * 1024 * 1024
LARGE_READ_BYTES = 1024 * 1024


def size_hint(*sizes: int | None) -> int:
    return max((size for size in sizes if size is not None), default=0)


def _read_in_large_blocks(request: ObjstoreRequest, large: bool) -> None:
    transport = getattr(request.channel, "transport", None)
    default = getattr(type(transport), "bufferSize", None)  # a plain TCP connection
    if isinstance(default, int):
        transport.bufferSize = LARGE_READ_BYTES if large else default  # type: ignore[union-attr]


HASH_POOL_NAME = "objstore-hash"
HASH_THREADS = 4


class LazyPool:
    """A `NamedPool` on the global reactor made at its first `run` and stopped when the
    reactor shuts down: most processes that build a site (tests, tools) never spool a
    large body, and should not get threads or a shutdown trigger for nothing."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self._size = size
        self._pool: NamedPool | None = None

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> defer.Deferred[T]:
        if self._pool is None:
            from twisted.internet import reactor

            running: Any = reactor
            pool = NamedPool(running, self.name, self._size)
            pool.start()
            running.addSystemEventTrigger("after", "shutdown", pool.stop)
            self._pool = pool
        return self._pool.run(fn, *args, **kwargs)


def _pressure_of(request: ObjstoreRequest) -> Callable[[bool], None]:
    """A spool's `pressure` callback pausing `request`'s connection. It holds the request
    weakly: the spool is the request's attribute, and a strong reference back made every
    request's objects (~60 of them) a reference cycle, which only the garbage collector
    frees, after promoting them through its generations."""
    alive = weakref.ref(request)

    def pressure(paused: bool) -> None:
        found = alive()
        if found is not None:
            pause_reading(found, paused)

    return pressure


class ObjstoreSite(server.Site):
    requestFactory = ObjstoreRequest
    protocol = ObjstoreChannel  # type: ignore[assignment]  # HTTP/1.1 only (no h2 here)
    displayTracebacks = False
    observer: RequestObserver | None = None  # the audit log and request metrics
    space: SpaceGuard | None = None  # refuses a body that does not fit on the data volume
    sendfile = True  # plain objects sent by the kernel on plain TCP (http/sendfile.py)
    # [audit] strict: what answers wait for (http/held_answer.py; its request factory too).
    answer_gate: Any = None

    def __init__(
        self,
        root: Resource,
        *,
        tmp_dir: str,
        limits: ServerLimits,
        server_header: str,
        hash_runner: Runner | None = None,
        sync_runner: Runner | None = None,
        blob_stages: BlobStages | None = None,
        header_timeout_seconds: float = HEADER_TIMEOUT_SECONDS,
        idle_timeout_seconds: float = IDLE_TIMEOUT_SECONDS,
        reactor: Any = None,
    ) -> None:
        # No form parsing: twisted.web would read a whole urlencoded or multipart POST body
        # into memory; no API here takes form fields.
        super().__init__(root, parsePOSTFormSubmission=False, timeout=idle_timeout_seconds,
                         reactor=reactor)
        # The resource that admits requests before their body (the root resource).
        self.gatekeeper: Gatekeeper | None = root if isinstance(root, Gatekeeper) else None
        # Where complete bodies on disk start their fdatasync (`BlobWriter.flush_early`);
        # None when the node does not fsync.
        self.sync_runner = sync_runner
        # Builds each body's writer from its stage plan (blobs/factory.py).
        self.blob_stages = blob_stages if blob_stages is not None else BlobStages()
        self.tmp_dir = tmp_dir
        self.limits = limits
        self.server_header = server_header.encode()
        self.header_timeout_seconds = header_timeout_seconds
        self.in_flight = 0
        self._idle_waiters: list[defer.Deferred[None]] = []
        # Open connections, closed after the drain: a peer's or client's keep-alive
        # connection would otherwise bring requests after the listener closed, while the
        # node's services and pools stop under them.
        self._channels: weakref.WeakSet[Any] = weakref.WeakSet()
        self.noisy = False
        # MD5 and SHA-256 of large bodies (blobs/digests.py). The daemon passes its own pool;
        # otherwise (tests, tools) one is made at first use.
        self.hash_runner: Runner = (hash_runner if hash_runner is not None
                                    else LazyPool(HASH_POOL_NAME, HASH_THREADS))

    def buildProtocol(self, addr: Any) -> Any:  # noqa: N802
        channel = super().buildProtocol(addr)
        channel.header_timeout_seconds = self.header_timeout_seconds
        channel.server_header = self.server_header
        channel.clock = self.reactor
        self._channels.add(channel)
        return channel

    def close_connections(self) -> int:
        """Close every open connection (after the drain, at shutdown): what is being
        written is flushed first. Returns how many were open."""
        channels = [c for c in self._channels if c.transport is not None]
        for channel in channels:
            channel.transport.loseConnection()
        return len(channels)

    def log(self, request: Any) -> None:
        """Access logging belongs to the audit log, not twistd's log."""

    # -- before the body -----------------------------------------------------------------
    def size_refusal(self, request: ObjstoreRequest, length: int | None) -> S3Error | None:
        """The refusal of a body before it is read: a header that says how to read it whose
        bytes or number are not readable (InvalidArgument), a declared body over
        max_body_size (EntityTooLarge), or one the data volume has no room for
        (InsufficientStorage, from the capacity guard's last sample)."""
        max_body = self.limits.max_body_size
        try:
            decoded_length = _decoded_length(request)
            request.header("x-amz-content-sha256")
            _requested_checksums(request)
        except S3Error as error:
            return error
        for size in (length, decoded_length):
            if size is not None and size > max_body:
                return S3Error("EntityTooLarge", MaxSizeAllowed=str(max_body))
        if self.space is not None and not self.space.admits_body(size_hint(length,
                                                                           decoded_length)):
            return S3Error("InsufficientStorage")
        return None

    def admission(self, request: ObjstoreRequest, length: int | None
                  ) -> defer.Deferred[Admitted] | None:
        """The admission of a request with a body (one without is admitted by its API when
        it is processed: there is nothing to protect, and nothing to wait for)."""
        if length == 0 or self.gatekeeper is None:
            return None
        return self.gatekeeper.admit(request)

    # -- body sink -------------------------------------------------------------------
    def open_spool(self, request: ObjstoreRequest, length: int | None, *, hash_body: bool,
                   plan: StagePlan = IDENTITY, form: FormDecoder | None = None,
                   checksums: Sequence[str] = (),
                   customer_key: CustomerKey | None = None) -> BodySpool:
        """The body's sink: `hash_body` computes its SHA-256 even without a claimed one;
        `plan`: its stages (the admission's decision; identity before one); `form`: the
        decoder of a form upload's body (only its file part is kept, with every checksum
        a form field may claim); `checksums`: algorithms computed although not claimed."""
        get = request.header
        max_body = self.limits.max_body_size
        content_sha256 = get("x-amz-content-sha256") or ""
        decoder: sigv4.AwsChunkedDecoder | FormDecoder | None = form
        if form is None and content_sha256 in _STREAMING:
            decoder = sigv4.AwsChunkedDecoder(content_sha256, max_decoded_length=max_body)
        algorithms = (list(CHECKSUM_ALGORITHMS) if form is not None
                      else _requested_checksums(request))
        algorithms += [name for name in checksums if name not in algorithms]
        if size_hint(length, _decoded_length(request)) > LARGE_BODY_BYTES:
            _read_in_large_blocks(request, True)
        spool = BodySpool(
            self.tmp_dir,
            decoder=decoder,
            want_sha256=hash_body or sigv4.payload_hash_is_hex(content_sha256),
            checksum_algorithms=algorithms,
            max_length=max_body,
            hash_runner=self.hash_runner,
            sync_runner=self.sync_runner,
            stages=self.blob_stages,
            plan=plan,
            customer_key=customer_key,
            # A staged body's pipeline lagging behind the network pauses the connection.
            pressure=_pressure_of(request),
        )
        request.spool = spool
        return spool

    # -- drain -----------------------------------------------------------------------
    def request_started(self, request: ObjstoreRequest) -> None:
        self.in_flight += 1
        if self.observer is not None:
            self.observer.request_started(request)
        request.notifyFinish().addBoth(self._request_done, request)

    def _request_done(self, result: object, request: ObjstoreRequest) -> None:
        if self.observer is not None:
            self.observer.request_finished(request, not isinstance(result, failure.Failure))
        self._release()

    def hold(self) -> Callable[[], None]:
        """Count work that must finish before shutdown even when its client has gone (a
        shielded write); call the returned function once it is done."""
        self.in_flight += 1
        return self._release

    def _release(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def wait_idle(self) -> defer.Deferred[None]:
        if self.in_flight == 0:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()
        self._idle_waiters.append(waiter)
        return waiter


def _decoded_length(request: ObjstoreRequest) -> int | None:
    declared = request.header("x-amz-decoded-content-length")
    if declared is None:
        return None
    value = decimal(declared.strip())
    if value is None:
        raise S3Error("InvalidArgument", "x-amz-decoded-content-length must be a non-negative "
                      "integer.", ArgumentName="x-amz-decoded-content-length",
                      ArgumentValue=declared)
    return value


def _requested_checksums(request: ObjstoreRequest) -> list[str]:
    """Algorithms whose checksum the client sends (as a header or a trailer)."""
    names = [raw.decode("latin-1").lower() for raw, _ in request.requestHeaders.getAllRawHeaders()]
    names += [item.strip().lower() for item in (request.header("x-amz-trailer") or "").split(",")]
    return sorted({alg for alg in map(claimed_algorithm, names) if alg is not None})


def form_decoder_of(admitted: Admitted) -> FormDecoder | None:
    """The body decoder an admission asks for (a form upload's), if any."""
    make = getattr(admitted, "body_decoder", None)
    return make() if callable(make) else None
