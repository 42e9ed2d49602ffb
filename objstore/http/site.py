"""The HTTP listener's Site and Request: request ids, common headers, the streamed body sink,
request-level limits, in-flight tracking for drain, and error pages that are never HTML.

twisted.web reads the whole body before any resource runs, so the body goes straight into
a `BodySpool` (`getContentFile`): aws-chunked decoding there, then a `BlobWriter` that keeps
it on the data volume and hashes it as it arrives. A declared length
over `max_body_size` is answered at once with EntityTooLarge and the connection closed,
before the client sends the body.
"""

from __future__ import annotations

import base64
import os
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python import failure
from twisted.web import http, server
from twisted.web.http import datetimeToString
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource

from objstore.audit.context import RequestAudit
from objstore.config import ServerLimits
from objstore.errors import S3Error
from objstore.http import sigv4
from objstore.http.checksum_headers import claimed_algorithm
from objstore.http.spool import BodySpool
from objstore.s3.xml import error_document
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


class ObjstoreRequest(server.Request):
    audit: RequestAudit
    request_id: str
    host_id: str
    spool: BodySpool | None
    early_error: S3Error | None

    def __init__(self, channel: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(channel, *args, **kwargs)
        self.responseHeaders = ResponseHeaders()
        self.request_id = new_request_id()
        self.host_id = new_host_id()
        self.spool = None
        self.early_error = None
        self.audit = RequestAudit()

    def header(self, name: str) -> str | None:
        value = self.requestHeaders.getRawHeaders(name)
        if not value:
            return None
        return ",".join(v.decode("latin-1") if isinstance(v, bytes) else v for v in value)

    @property
    def objstore_site(self) -> ObjstoreSite:
        site: ObjstoreSite = self.channel.site  # type: ignore[attr-defined]
        return site

    def gotLength(self, length: int | None) -> None:
        site = self.objstore_site
        site.request_started(self)  # from the first body byte on, a drain waits for us
        self.content = site.open_body_sink(self, length)

    def process(self) -> None:
        site = self.objstore_site
        self.site = site
        self.setHeader(b"Server", site.server_header)
        self.setHeader(b"Date", datetimeToString())
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

    def reject_now(self, error: S3Error) -> None:
        """Answer before the body arrives and close the connection: an unread body would
        desynchronise keep-alive, and reading gigabytes only to refuse them wastes both
        sides. Called from gotLength, before twisted.web's automatic 100 Continue."""
        self.requestHeaders.removeHeader(b"expect")
        self.code, self.audit.error_code = error.status, error.code
        body = error_document(error.code, error.message, self.request_id, self.host_id,
                              error.fields)
        reason = http.RESPONSES.get(error.status, b"Error")
        head = [
            b"HTTP/1.1 %d %s" % (error.status, reason),
            b"Server: " + self.objstore_site.server_header,
            b"Date: " + datetimeToString(),
            b"x-amz-request-id: " + self.request_id.encode(),
            b"x-amz-id-2: " + self.host_id.encode(),
            b"Content-Type: application/xml",
            b"Content-Length: %d" % len(body),
            b"Connection: close",
        ]
        transport: Any = self.channel.transport
        transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        transport.loseConnection()


class _DiscardSink:
    """Body sink for requests already answered: swallows bytes."""

    def write(self, data: bytes) -> None:
        pass

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def read(self, size: int = -1) -> bytes:
        return b""

    def close(self) -> None:
        pass


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


class ObjstoreSite(server.Site):
    requestFactory = ObjstoreRequest
    displayTracebacks = False
    observer: RequestObserver | None = None  # the audit log and request metrics
    space: SpaceGuard | None = None  # refuses a body that does not fit on the data volume

    def __init__(
        self,
        root: Resource,
        *,
        tmp_dir: str,
        limits: ServerLimits,
        server_header: str,
        hash_runner: Runner | None = None,
        sync_runner: Runner | None = None,
    ) -> None:
        super().__init__(root)
        # Where complete bodies on disk start their fdatasync (`BlobWriter.flush_early`);
        # None when the node does not fsync.
        self.sync_runner = sync_runner
        self.tmp_dir = tmp_dir
        self.limits = limits
        self.server_header = server_header.encode()
        self.in_flight = 0
        self._idle_waiters: list[defer.Deferred[None]] = []
        self.noisy = False
        # MD5 and SHA-256 of large bodies (blobs/digests.py). The daemon passes its own pool;
        # otherwise (tests, tools) one is made at first use.
        self.hash_runner: Runner = (hash_runner if hash_runner is not None
                                    else LazyPool(HASH_POOL_NAME, HASH_THREADS))

    def log(self, request: Any) -> None:
        """Access logging belongs to the audit log, not twistd's log."""

    # -- body sink -------------------------------------------------------------------
    def open_body_sink(self, request: ObjstoreRequest, length: int | None) -> Any:
        get = request.header
        max_body = self.limits.max_body_size
        declared = get("x-amz-decoded-content-length")
        try:
            decoded_length = int(declared) if declared is not None else None
        except ValueError:
            decoded_length = None
        for size in (length, decoded_length):
            if size is not None and size > max_body:
                request.reject_now(S3Error("EntityTooLarge", MaxSizeAllowed=str(max_body)))
                return _DiscardSink()
        if self.space is not None and not self.space.admits_body(size_hint(length, decoded_length)):
            request.reject_now(S3Error("InsufficientStorage"))
            return _DiscardSink()
        content_sha256 = get("x-amz-content-sha256") or ""
        decoder = None
        if content_sha256 in _STREAMING:
            decoder = sigv4.AwsChunkedDecoder(content_sha256, max_decoded_length=max_body)
        algorithms = _requested_checksums(request)
        if size_hint(length, decoded_length) > LARGE_BODY_BYTES:
            _read_in_large_blocks(request, True)
        spool = BodySpool(
            self.tmp_dir,
            decoder=decoder,
            want_sha256=sigv4.payload_hash_is_hex(content_sha256),
            checksum_algorithms=algorithms,
            max_length=max_body,
            hash_runner=self.hash_runner,
            sync_runner=self.sync_runner,
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


def _requested_checksums(request: ObjstoreRequest) -> list[str]:
    """Algorithms whose checksum the client sends (as a header or a trailer)."""
    names = [raw.decode("latin-1").lower() for raw, _ in request.requestHeaders.getAllRawHeaders()]
    names += [item.strip().lower() for item in (request.header("x-amz-trailer") or "").split(",")]
    return sorted({alg for alg in map(claimed_algorithm, names) if alg is not None})
