"""The S3 REST API: one Klein app whose single branch route reads the request line once
(`routes.parse_request_line`: target, query, route and the operation's name, noted at once
for the audit log), then admits the request (rate limits, SigV4 of the line and headers,
the route's refusals, the route's action authorized, the cluster write gate for a route
that mutates: `routes.Route.mutates`), checks what the client claimed
about the body, and runs the handler, shielded from the client's departure.

A request with a body is admitted before the body is read (`admit`, asked by the site when
the headers are complete): a refused one is answered at once and its body never read. The
admission is carried on the request (`request.admitted`) and not repeated.

Known sub-resources without a handler answer 501 NotImplemented; an unknown combination of
method and target answers 405 MethodNotAllowed (the table is in `routes.py`). Every error
is S3 XML whose RequestId equals the x-amz-request-id header; nothing else ever reaches
the client.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.audit.context import note_error, note_operation
from objstore.blobs.plan import IDENTITY, StagePlan
from objstore.crypto.customer_key import (
    COPY_SOURCE_PREFIX,
    SSE_C,
    CustomerKey,
    customer_key,
    has_customer_headers,
    refuse_key_for_other,
    require_key,
)
from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.buckets import BucketService
from objstore.engine.lifecycle import LifecycleService
from objstore.engine.multipart import SSEC_EXTRA, MultipartService, upload_plan
from objstore.engine.objects import ObjectService
from objstore.engine.replicator import NO_GATE, WriteGate
from objstore.engine.stage_plan import (
    BODY_OPERATIONS,
    NO_BUCKET_STAGES,
    PLAN_HEADERS,
    decide_stage_plan,
)
from objstore.engine.versions import VersionService
from objstore.errors import RETRY_AFTER_SECONDS, S3Error, s3_error_of
from objstore.http import cors
from objstore.http.authn import Authenticator, VerifiedHeaders
from objstore.http.channel import Refusal, s3_answer
from objstore.http.error_xml import error_document
from objstore.http.form_data import boundary_of
from objstore.http.ratelimit import RequestRateLimits, peer_address
from objstore.http.shield import client_gone, shielded
from objstore.http.site import Admitted, GatekeeperResource, ObjstoreRequest
from objstore.iam.authorizer import Authorizer
from objstore.iam.decision import Need
from objstore.iam.identity import Principal
from objstore.notify.configs import NotificationConfigService
from objstore.replication.service import ReplicationConfigService
from objstore.s3.access import authorize_request, permits_needs
from objstore.s3.call import S3Call, S3Response
from objstore.s3.cors import bucket_rules
from objstore.s3.params import part_number
from objstore.s3.post_object import OPERATION as OPERATION_POST_OBJECT
from objstore.s3.post_object import FormAdmission, form_header, form_key, form_of
from objstore.s3.route_needs import put_object_needs, resource_of, route_needs
from objstore.s3.routes import RequestLine, parse_request_line
from objstore.s3.unsupported import refuse_unsupported_headers

if TYPE_CHECKING:
    from objstore.blobs.space import SpaceGuard

log = Logger()


@dataclass(frozen=True)
class S3Services:
    buckets: BucketService
    objects: ObjectService
    multipart: MultipartService
    authorizer: Authorizer
    bucket_config: BucketConfigService
    versions: VersionService
    lifecycle: LifecycleService
    # Bucket notification configurations (None: answered 501, in-memory test setups).
    notifications: NotificationConfigService | None = None
    replication: ReplicationConfigService | None = None


_LINE = "s3_request_line"
REPLICA_HEADER = "x-amz-replication-status"
REPLICATE_ACTION = "s3:ReplicateObject"


def request_line(request: ObjstoreRequest) -> RequestLine:
    """The request line, read (and noted for the audit log) once per request."""
    line: RequestLine | None = getattr(request, _LINE, None)
    if line is None:
        line = parse_request_line(request)
        setattr(request, _LINE, line)
    return line


class _RequestLineFirst(GatekeeperResource):
    """Reads (and notes) the request line, then lets Klein run the one handler. The S3
    API routes by its own table (`routes.py`), never by Klein's URL map: Klein is given
    an empty path, because werkzeug refuses paths an S3 key may hold (a percent-encoded
    newline matches no rule, a path that is not UTF-8 gets a text/plain 400), and this
    way every path reaches `dispatch`, which answers S3 XML. The handler takes the line
    from the request instead of parsing it again. It is also the S3 API's `Gatekeeper`."""

    def render(self, request: ObjstoreRequest) -> Any:
        request_line(request)
        request.postpath = [b""]  # Klein routes "/"; the line above read request.path
        return self._klein.render(request)


class S3Api:
    app = Klein()

    def __init__(
        self,
        services: S3Services,
        authenticator: Authenticator,
        rate_limits: RequestRateLimits | None = None,
        space: SpaceGuard | None = None,
        gate: WriteGate = NO_GATE,
        key_id: str | None = None,
        allow_ssec_over_http: bool = False,
    ) -> None:
        self._services = services
        self._key_id = key_id  # the master key new encrypted objects use (None: no SSE)
        self._allow_ssec_over_http = allow_ssec_over_http
        self._authenticator = authenticator
        self._rate_limits = rate_limits or RequestRateLimits.disabled()
        self._space = space
        self._gate = gate  # asked before the handler of every route that mutates

    def resource(self) -> object:
        return _RequestLineFirst(self.app.resource(), self)

    def admit(self, request: ObjstoreRequest) -> Deferred[Admitted]:
        """Admit a request with a body from its line and headers; a refusal is the S3
        error document."""
        return Deferred.fromCoroutine(self._admit_or_refuse(request))

    async def _admit_or_refuse(self, request: ObjstoreRequest) -> Admitted:
        line = request_line(request)
        try:
            return await self._admit(request, line)
        except S3Error as error:
            error.headers.update(await self._cors_headers(request, line))
            raise Refusal(s3_answer(error, request.request_id, request.host_id)) from None

    @app.route("/", branch=True)  # every method: unknown ones get S3 MethodNotAllowed
    async def dispatch(self, request: ObjstoreRequest) -> bytes:
        line = request_line(request)
        if line.method == "OPTIONS" and line.bucket:
            return await self._preflight(request, line)
        try:
            response = await shielded(self._serve(request, line), request.objstore_site.hold)
        except S3Error as error:
            self._set_headers(request, await self._cors_headers(request, line))
            return self._render_error(request, error)
        except CancelledError:
            return b""  # the client left; the work itself ran to its end
        except Exception as exc:
            self._set_headers(request, await self._cors_headers(request, line))
            return self._render_error(request, _error_of(request, exc))
        if client_gone(request):
            return b""
        self._set_headers(request, await self._cors_headers(request, line))
        return await self._send(request, response)

    async def _preflight(self, request: ObjstoreRequest, line: RequestLine) -> bytes:
        """A browser's CORS preflight (OPTIONS /bucket[/key]): unauthenticated, answered
        from the bucket's CORS rules (http/cors.py), 403 CORSResponse when none allows."""
        try:
            if not self._rate_limits.allow_address(peer_address(request)):
                raise S3Error("SlowDown")
            if request.early_error is not None:
                raise request.early_error
            rules = await bucket_rules(self._services.bucket_config, line.bucket)
            headers = cors.preflight(rules, _lower_headers(request))
        except S3Error as error:
            return self._render_error(request, error)
        self._set_headers(request, headers)
        request.setHeader("Content-Length", "0")
        return b""

    async def _cors_headers(self, request: ObjstoreRequest, line: RequestLine
                            ) -> dict[str, str]:
        """The Access-Control-* headers of an actual response (success or error, presigned
        or not) to a browser's request, from the bucket's CORS rules; none when the request
        names no Origin or no rule allows it. Never fails the response."""
        origin = request.header("origin")
        if not origin or not line.bucket or not (origin.isascii() and origin.isprintable()):
            return {}
        try:
            rules = await bucket_rules(self._services.bucket_config, line.bucket)
        except Exception:  # an unreadable setting: the answer goes out without CORS
            return {}
        return cors.actual(rules, origin, line.method)

    @staticmethod
    def _set_headers(request: ObjstoreRequest, headers: dict[str, str]) -> None:
        for name, value in headers.items():
            request.setHeader(name, value)

    async def _serve(self, request: ObjstoreRequest, line: RequestLine) -> S3Response:
        admitted = request.admitted
        if not isinstance(admitted, VerifiedHeaders | FormAdmission):  # no body: admit now
            admitted = await self._admit(request, line)
            if request.spool is not None:  # an empty body's spool was opened before
                request.spool.restage(admitted.stage_plan,
                                      getattr(admitted, "customer_key", None),
                                      getattr(admitted, "body_checksums", ()))
        key = line.key
        if isinstance(admitted, FormAdmission):
            principal, key = await self._form_caller(request, line)
        else:
            principal = await self._authenticator.verify_body(
                request, admitted, body_describes_object=_completes_upload(line))
        route = line.route
        assert route is not None and route.handler is not None  # else not admitted
        call = S3Call(request, principal, self._services, line.bucket, key, line.query,
                      line.operation)
        return await route.handler(call)

    async def _form_caller(self, request: ObjstoreRequest, line: RequestLine
                           ) -> tuple[Principal, str]:
        """The caller of a form upload and the key it writes: the signed POST policy and
        its conditions (the authenticator), then s3:PutObject on that key (the
        authorizer), all before anything is stored."""
        form = form_of(request.spool)
        if request.spool is not None:
            await request.spool.digests_ready()
        principal = await self._authenticator.authenticate_form(
            request, form.fields, line.bucket, form.file_length)
        if not principal.anonymous and not self._rate_limits.allow_credential(
                principal.access_key):
            raise S3Error("SlowDown")
        key = form_key(form.fields, form.filename)
        note_operation(request, line.operation, line.bucket, key, None)  # known only now
        needs = route_needs("s3:PutObject", line.bucket, key, {}, form_header(form.fields),
                            put_object_needs)
        if not await permits_needs(self._services, request, principal, needs):
            raise S3Error("AccessDenied")
        return principal, key

    async def _admit_form(self, request: ObjstoreRequest, line: RequestLine) -> FormAdmission:
        """A form upload is admitted before its body without a caller (the signature is
        in the body): a multipart/form-data body, the write gate, the disk guard, the
        bucket's default stages."""
        self._gate.check_write(0)
        boundary = boundary_of(request.header("content-type"))
        if boundary is None:
            raise S3Error("RequestIsNotMultiPartContent")
        if line.error is not None:
            raise line.error
        if self._space is not None and self._space.refuses_write():
            raise S3Error("InsufficientStorage")
        settings = await self._services.bucket_config.stage_settings(line.bucket)
        plan = decide_stage_plan("PutObject", {}, settings, key_id=self._key_id)
        return FormAdmission(boundary, plan)

    async def _admit(self, request: ObjstoreRequest, line: RequestLine
                     ) -> VerifiedHeaders | FormAdmission:
        """Everything decided from the request line and headers, in order: per-IP rate
        limit, request-level limits, SigV4, per-credential rate limit, the route (or why
        there is none), unsupported headers, the route's action, then, for a route that
        mutates, the cluster write gate (before any body is read; the engine asks it
        again with the bytes) and the local disk guard, and last the body's stage plan
        (which may read the bucket's settings)."""
        if not self._rate_limits.allow_address(peer_address(request)):
            raise S3Error("SlowDown")
        if request.early_error is not None:
            raise request.early_error
        if line.operation == OPERATION_POST_OBJECT:
            return await self._admit_form(request, line)
        verified = await self._authenticator.authenticate_headers(request, anonymous=True)
        if not verified.principal.anonymous and not self._rate_limits.allow_credential(
                verified.principal.access_key):
            raise S3Error("SlowDown")
        if line.error is not None:
            raise line.error
        route = line.route
        if route is None or route.handler is None:
            raise line.refusal()
        refuse_unsupported_headers(
            ((name.decode("latin-1"), values[-1].decode("latin-1"))
             for name, values in request.requestHeaders.getAllRawHeaders()),
            line.operation)
        await authorize_request(self._services, request, line, verified.principal)
        if route.mutates and (request.header(REPLICA_HEADER) or "").upper() == "REPLICA":
            # A replication source's write (born REPLICA, journals nothing): as on AWS, the
            # caller also needs s3:ReplicateObject.
            need = Need(REPLICATE_ACTION, resource_of(line.bucket, line.key), line.bucket,
                        key=line.key)
            if not await permits_needs(self._services, request, verified.principal, (need,)):
                raise S3Error("AccessDenied")
        if route.mutates:
            self._gate.check_write(0)
        if self._space is not None and _writes(line) and self._space.refuses_write():
            raise S3Error("InsufficientStorage")
        ssec_key = self._customer_key(request)
        if line.operation == "UploadPart":
            return await self._part_stages(request, line, verified, ssec_key)
        plan = await self._stage_plan(request, line, ssec_key is not None)
        if plan.identity:
            return verified
        return replace(verified, stage_plan=plan,
                       customer_key=ssec_key if line.operation in BODY_OPERATIONS else None)

    def _customer_key(self, request: ObjstoreRequest) -> CustomerKey | None:
        """The request's SSE-C key (judged now, before any body); refused over plain HTTP
        (as AWS) unless [encryption] allow_ssec_over_http. The copy source's key is read
        by the copy's handler."""
        headers = {name.decode("latin-1").lower(): value.decode("latin-1")
                   for name, values in request.requestHeaders.getAllRawHeaders()
                   for value in values[:1]}
        if not (has_customer_headers(headers)
                or has_customer_headers(headers, COPY_SOURCE_PREFIX)):
            return None
        if not request.isSecure() and not self._allow_ssec_over_http:
            raise S3Error("InvalidRequest", "Requests specifying Server Side Encryption with "
                          "Customer provided keys must be made over a secure connection.")
        return customer_key(headers)

    async def _part_stages(self, request: ObjstoreRequest, line: RequestLine,
                           verified: VerifiedHeaders, key: CustomerKey | None
                           ) -> VerifiedHeaders:
        """An UploadPart body is written with its upload's stages (decided when the upload
        was created); its upload's checksum is then computed as it arrives (a staged body
        can not be read back). An unknown upload is NoSuchUpload before the body; a part
        of an SSE-C upload must give the upload's key (400 without, 403 another one). The
        part number is judged first, as UploadPart's handler does."""
        part_number(line.query.get("partNumber"))
        upload = await self._services.multipart.upload(line.bucket, line.key,
                                                       line.query.get("uploadId", ""))
        plan = upload_plan(upload)
        if plan.encryption == SSE_C:
            key = require_key(upload.extra.get(SSEC_EXTRA) or {}, key)
        else:
            refuse_key_for_other(key)
        if plan.identity:
            return verified
        algorithm = upload.checksum_algorithm
        return replace(verified, stage_plan=plan, customer_key=key,
                       body_checksums=() if algorithm is None else (algorithm,))

    async def _stage_plan(self, request: ObjstoreRequest, line: RequestLine,
                          customer: bool = False) -> StagePlan:
        """The body's stages (engine/stage_plan.py), before the body is read: from the
        request's headers and the bucket's settings (the configuration cache)."""
        if line.operation not in BODY_OPERATIONS:
            return IDENTITY
        headers = {name: value for name in PLAN_HEADERS
                   if (value := request.header(name)) is not None}
        bucket = NO_BUCKET_STAGES
        if line.bucket:  # default encryption and compression
            bucket = await self._services.bucket_config.stage_settings(line.bucket)
        return decide_stage_plan(line.operation, headers, bucket, key_id=self._key_id,
                                 key_ids=self._services.objects.kms_key_ids,
                                 customer=customer)

    def _render_error(self, request: ObjstoreRequest, error: S3Error) -> bytes:
        if error.status == 507 and self._space is not None:  # the guard's sample is stale
            self._space.found_full()
        return render_error(request, error)

    async def _send(self, request: ObjstoreRequest, response: S3Response) -> bytes:
        request.setResponseCode(response.status)
        for name, value in response.headers.items():
            request.setHeader(name, value)
        if response.stream is not None:
            await response.stream.start()
            return b""
        if response.content_type:
            request.setHeader("Content-Type", response.content_type)
        if "Content-Length" not in response.headers:
            request.setHeader("Content-Length", str(len(response.body)))
        return response.body

    @app.handle_errors(Exception)
    def unexpected(self, request: ObjstoreRequest, failure: Failure) -> bytes:
        return render_error(request, _error_of(request, failure.value, failure))


def _error_of(request: ObjstoreRequest, exc: BaseException | None,
              failure: Failure | None = None) -> S3Error:
    """The answer to an exception no handler turned into an S3 error: a state of the
    server (a full disk, the database out of reach) as its own code, logged in one line;
    anything else is a bug, logged with its traceback."""
    if isinstance(exc, S3Error):
        return exc
    error = s3_error_of(exc) if exc is not None else None
    if error is not None:
        log.warn("{method} {uri} answered {status}: {exc}", method=request.method,
                 uri=request.uri, status=error.status, exc=exc)
        return error
    log.failure("unhandled error serving {uri}", failure, uri=request.uri)
    return S3Error("InternalError")


def _lower_headers(request: ObjstoreRequest) -> dict[str, str]:
    return {name.decode("latin-1").lower(): values[-1].decode("latin-1")
            for name, values in request.requestHeaders.getAllRawHeaders()}


def _writes(line: RequestLine) -> bool:
    """Requests the capacity guard refuses on a full disk: every PUT and POST but
    DeleteObjects (deletes make room)."""
    return line.method in ("PUT", "POST") and line.operation != "DeleteObjects"


def render_error(request: ObjstoreRequest, error: S3Error) -> bytes:
    request.setResponseCode(error.status)
    note_error(request, error.code)
    for name, value in error.headers.items():
        request.setHeader(name, value)
    if error.status == 503:
        request.setHeader("Retry-After", str(RETRY_AFTER_SECONDS))
    if error.status == 304 or request.method == b"HEAD":
        request.setHeader("Content-Length", "0")
        return b""
    body = error_document(error.code, error.message, request.request_id, request.host_id,
                          error.fields)
    request.setHeader("Content-Type", "application/xml")
    request.setHeader("Content-Length", str(len(body)))
    return body


def _completes_upload(line: RequestLine) -> bool:
    """CompleteMultipartUpload (POST ?uploadId) carries x-amz-checksum-* of the whole
    object being assembled, not of its XML body; the multipart engine checks them."""
    return line.method == "POST" and "uploadId" in line.query
