"""The admin JSON API under /admin (Klein).

GET /admin/health answers without authentication; every other endpoint is SigV4-signed
like S3 requests, but x-amz-content-sha256 may be left out (generic SigV4 signers, such as
botocore's SigV4Auth, do not send it): the signature then covers the SHA-256 of the body,
hashed as it arrives. Errors are JSON {"error", "message"}; never HTML. A failed
authentication answers with the S3 code (SignatureDoesNotMatch, InvalidAccessKeyId,
RequestTimeTooSkewed, AccessDenied: 403; a malformed signature: 400 BadRequest).

Signed endpoints pass the gate, `authorize`, which applies the same rate limits as the S3
API (per client IP before authentication, per access key after it), then authorizes: root
users pass, others need the svc:* action of the endpoint (403 AccessDenied). A request
with a body is authenticated before its body is read (`admit`, asked by the site); the gate
then only checks the body and the action. Every such
endpoint declares its action with `gate.authorized_route`; GET /admin/health and
/admin/metrics never pass the gate: probes and scrapers are never limited. Families of
endpoints kept in their own modules (IAM, stats, presign, ...) are mounted with `mount()`
and reached through the branch route `/<family>`; they are given `authorize` as their gate.
The gate also refuses writes (PUT and POST, but for archives and presigned URLs, which
only read) with 507 InsufficientStorage while the data volume is full (blobs/space.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from objstore import __version__
from objstore.admin.gate import (
    CREATE_ARCHIVE,
    CREATE_PRESIGNED_URL,
    VIEW_SERVER_INFO,
    authorized_route,
    declared_actions,
)
from objstore.audit.context import note_error
from objstore.blobs.writer import MEMORY_LIMIT_BYTES
from objstore.errors import (
    ADMIN_ERRORS,
    DISK_FULL_MESSAGE,
    RETRY_AFTER_SECONDS,
    AdminError,
    S3Error,
    admin_error_of,
)
from objstore.http.authn import Authenticator, VerifiedHeaders
from objstore.http.channel import EarlyAnswer, Refusal
from objstore.http.health import HealthState
from objstore.http.ratelimit import RequestRateLimits, peer_address
from objstore.http.site import Admitted, GatekeeperResource, ObjstoreRequest
from objstore.iam.authorizer import Authorizer
from objstore.iam.identity import Principal

if TYPE_CHECKING:
    from objstore.blobs.space import SpaceGuard

log = Logger()
_SLOW_DOWN = "Please reduce your request rate."
# Actions of endpoints that POST but write nothing: not refused on a full disk.
_READ_ONLY_POSTS = frozenset({CREATE_ARCHIVE, CREATE_PRESIGNED_URL})


def json_body(request: ObjstoreRequest, status: int, payload: Any) -> bytes:
    request.setResponseCode(status)
    if status >= 400 and isinstance(payload, dict):  # for the audit log and metrics
        note_error(request, str(payload.get("error", "")))
    if status == 503:
        request.setHeader("Retry-After", str(RETRY_AFTER_SECONDS))
    body = json.dumps(payload).encode()
    request.setHeader("Content-Type", "application/json")
    request.setHeader("Content-Length", str(len(body)))
    return body


def as_admin_error(error: S3Error) -> AdminError:
    """The admin error for an S3 error of authentication or of the body: the same code
    where the admin API has it, else the admin code of its status."""
    code = "PayloadTooLarge" if error.code == "EntityTooLarge" else error.code
    if code in ADMIN_ERRORS:
        return AdminError(code, error.message)
    message = f"{error.code}: {error.message}"
    if error.status == 403:
        return AdminError("AccessDenied", message)
    if 400 <= error.status < 500:
        return AdminError("BadRequest", message)
    if error.status == 503:
        return AdminError("ServiceUnavailable", message)
    return AdminError("InternalError", message)


def admin_answer(error: AdminError) -> EarlyAnswer:
    """`error` as the JSON document `json_body` would send, before the body is read."""
    body = json.dumps({"error": error.code, "message": error.message}).encode()
    headers = ((b"Retry-After", str(RETRY_AFTER_SECONDS).encode()),) if error.status == 503 else ()
    return EarlyAnswer(error.status, error.code, b"application/json", body, headers)


@dataclass(frozen=True, slots=True)
class AdminAdmission:
    """What the admission of an admin request with a body carries to its gate: the verified
    headers (None: a route that never passes the gate) and the actions already authorized
    (the route's, when it was known from the request line)."""

    verified: VerifiedHeaders | None
    authorized: tuple[str | None, ...] = ()

    @property
    def hash_body(self) -> bool:
        return self.verified is not None and self.verified.hash_body


@dataclass(frozen=True, slots=True)
class _DeclaredRoute:
    gated: bool
    action: str | None


_NO_ENDPOINT = "No such admin endpoint."
_NO_METHOD = "Method not allowed here."


class _AdminResource(GatekeeperResource):
    """The Klein app's resource, and the admin API's `Gatekeeper`."""


class AdminApi:
    app = Klein()

    def __init__(
        self,
        *,
        health: HealthState,
        authenticator: Authenticator,
        info: Callable[[], dict[str, Any]],
        rate_limits: RequestRateLimits | None = None,
        authorizer: Authorizer,
        space: SpaceGuard | None = None,
    ) -> None:
        self._health = health
        self._authenticator = authenticator
        self._info = info
        self._rate_limits = rate_limits or RequestRateLimits.disabled()
        self._authorizer = authorizer
        self._space = space
        self._mounts: dict[str, Any] = {}
        self._gate = self.authorize

    def resource(self) -> object:
        return _AdminResource(self.app.resource(), self)

    def mount(self, families: Iterable[str], api: Any) -> None:
        """Serve /admin/<family>/... from `api` (a Klein-app holder with `resource()`)."""
        for family in families:
            self._mounts[family] = api

    def admit(self, request: ObjstoreRequest) -> Deferred[Admitted]:
        """Authenticate a request with a body from its line and headers; a refusal is the
        admin JSON error."""
        return Deferred.fromCoroutine(self._admit_or_refuse(request))

    async def _admit_or_refuse(self, request: ObjstoreRequest) -> Admitted:
        try:
            return await self._admission(request)
        except AdminError as error:
            raise Refusal(admin_answer(error)) from None

    async def _admission(self, request: ObjstoreRequest) -> AdminAdmission:
        """The route (404, 405), then the gate's checks that need no body: rate limits,
        SigV4 and the route's action."""
        route = self._declared_route(request)
        if route is not None and not route.gated:
            return AdminAdmission(None)  # /health and the like: the handler decides
        verified = await self._authenticated(request)
        if verified.hash_body and (request.body_length is None
                                   or request.body_length > MEMORY_LIMIT_BYTES):
            raise AdminError(
                "PayloadTooLarge",
                f"A body over {MEMORY_LIMIT_BYTES} bytes, or of unknown length, needs a "
                "signed x-amz-content-sha256 header.")
        if route is None:  # not known from the request line: authorized after the body
            return AdminAdmission(verified)
        await self._check_action(verified.principal, route.action)
        return AdminAdmission(verified, (route.action,))

    def _declared_route(self, request: ObjstoreRequest) -> _DeclaredRoute | None:
        """The route a request is for, as Klein will find it; None when that can not be
        told here (a path that is not UTF-8, a redirect): the gate decides after the body."""
        try:
            path_info = "/" + "/".join(
                http.unquote(segment).decode("utf-8")
                for segment in request.path.split(b"/")[2:])  # below /admin
        except UnicodeDecodeError:
            return None
        method = request.method.decode("ascii", "replace")
        app: Any = self.app
        found = match_route(app, path_info, method)
        if found is not None and found[0] in ("mounted", "mounted_branch"):
            api = self._mounts.get(str(found[1].get("family")))
            if api is None:
                raise AdminError("NotFound", _NO_ENDPOINT)
            app = getattr(api, "app", None)
            found = match_route(app, path_info, method) if isinstance(app, Klein) else None
        if found is None:
            return None
        actions = declared_actions(app)
        return _DeclaredRoute(found[0] in actions, actions.get(found[0]))

    async def _authenticated(self, request: ObjstoreRequest) -> VerifiedHeaders:
        """Rate limits and SigV4 of the request line and headers."""
        if not self._rate_limits.allow_address(peer_address(request)):
            raise AdminError("SlowDown", _SLOW_DOWN)
        try:
            if request.early_error is not None:
                raise request.early_error
            verified = await self._authenticator.authenticate_headers(
                request, payload_header_required=False, signature_v2=False)
        except S3Error as error:
            raise as_admin_error(error) from None
        if not self._rate_limits.allow_credential(verified.principal.access_key):
            raise AdminError("SlowDown", _SLOW_DOWN)
        return verified

    async def authorize(self, request: ObjstoreRequest, action: str | None) -> Principal:
        """The gate: rate limits, SigV4, then `action` (None: authentication only); what
        the admission of a request with a body did already is not done again."""
        admitted = request.admitted
        if isinstance(admitted, AdminAdmission) and admitted.verified is not None:
            verified, authorized = admitted.verified, admitted.authorized
        else:
            verified, authorized = await self._authenticated(request), ()
        try:
            principal = await self._authenticator.verify_body(request, verified)
        except S3Error as error:
            raise as_admin_error(error) from None
        if action not in authorized:
            await self._check_action(principal, action)
        if self._space is not None and _writes(request, action) and self._space.refuses_write():
            raise AdminError("InsufficientStorage", DISK_FULL_MESSAGE)
        return principal

    async def _check_action(self, principal: Principal, action: str | None) -> None:
        if action is not None and not await self._authorizer.allowed(principal, action, "*"):
            raise AdminError("AccessDenied", f"This endpoint needs {action}.")

    @app.route("/health", methods=["GET", "HEAD"])
    def health(self, request: ObjstoreRequest) -> bytes:
        if request.args.get(b"verbose") == [b"1"]:
            return json_body(request, 200, self._health.verbose())
        status, word = self._health.status(writable=request.args.get(b"writable") == [b"1"])
        return json_body(request, status, {"status": word})

    @authorized_route(app, "/info", methods=["GET"], action=VIEW_SERVER_INFO)
    async def info(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        return json_body(request, 200, self._info())

    @app.route("/<string:family>", branch=True)
    def mounted(self, request: ObjstoreRequest, family: str) -> Any:
        api = self._mounts.get(family)
        if api is None:
            raise NotFound()
        # The mounted app routes on the whole path below /admin, family included.
        assert request.prepath is not None and request.postpath is not None
        request.postpath.insert(0, request.prepath.pop())
        return api.resource()

def admin_failure(request: ObjstoreRequest, failure: Failure) -> bytes:
    """The answer to an exception no handler turned into an admin error: a state of the
    server (a full disk, the database out of reach) as its own code, logged in one line;
    anything else is a bug, logged with its traceback."""
    error = admin_error_of(failure.value) if failure.value is not None else None
    if error is None:
        log.failure("unhandled error in the admin API", failure)
        error = AdminError("InternalError", "Internal error.")
    elif not failure.check(AdminError):
        log.warn("{method} {uri} answered {status}: {exc}", method=request.method,
                 uri=request.uri, status=error.status, exc=failure.value)
    return json_body(request, error.status, {"error": error.code, "message": error.message})


def install_json_errors(app: Klein, *, no_endpoint: str = _NO_ENDPOINT) -> None:
    """Every error of an app of the admin (or cluster) API as JSON {error, message}, never
    HTML: its own errors, Klein's 404 and 405, and anything else through `admin_failure`."""

    @app.handle_errors(AdminError)
    def admin_error(self: object, request: ObjstoreRequest, failure: Failure) -> bytes:
        error = failure.value
        assert isinstance(error, AdminError)
        return json_body(request, error.status, {"error": error.code, "message": error.message})

    @app.handle_errors(NotFound)
    def not_found(self: object, request: ObjstoreRequest, failure: Failure) -> bytes:
        return json_body(request, 404, {"error": "NotFound", "message": no_endpoint})

    @app.handle_errors(MethodNotAllowed)
    def not_allowed(self: object, request: ObjstoreRequest, failure: Failure) -> bytes:
        return json_body(request, 405, {"error": "MethodNotAllowed", "message": _NO_METHOD})

    @app.handle_errors(Exception)
    def unexpected(self: object, request: ObjstoreRequest, failure: Failure) -> bytes:
        if failure.check(CancelledError):  # the client went away
            return b""
        return admin_failure(request, failure)


install_json_errors(AdminApi.app)


def _writes(request: ObjstoreRequest, action: str | None) -> bool:
    return request.method in (b"PUT", b"POST") and action not in _READ_ONLY_POSTS


def match_route(app: Klein, path_info: str, method: str, *, no_endpoint: str = _NO_ENDPOINT
                ) -> tuple[str, Mapping[str, Any]] | None:
    """(endpoint, arguments) of the route of `app` a request goes to, before its body is
    read (admission); None for a redirect. No route: 404; wrong method: 405 (JSON)."""
    adapter = app.url_map.bind("objstore", path_info=path_info, default_method=method)
    try:
        rule, arguments = adapter.match(return_rule=True)
    except NotFound:
        raise AdminError("NotFound", no_endpoint) from None
    except MethodNotAllowed:
        raise AdminError("MethodNotAllowed", _NO_METHOD) from None
    except HTTPException:
        return None
    return str(rule.endpoint), arguments


def server_info(started_at: float, *, tls: bool, backend: str, workers: int = 1,
                worker_index: int = 0, kms_provider: str | None = None,
                kms_endpoint: str | None = None, replication: bool = False
                ) -> Callable[[], dict[str, Any]]:
    """GET /admin/info. `workers` and `worker` (which process answered) go beyond the
    spec's fields: they tell an operator the node's process layout. `kms_provider`: the
    provider of SSE-S3's master key (None: no encryption); `kms_endpoint`: Vault's URL (only
    with the vault provider). `replication`: the node runs bucket replication (its journal
    and worker: [replication] enabled)."""
    encryption = {} if kms_provider is None else {"kms_provider": kms_provider}
    if kms_provider == "vault" and kms_endpoint:
        encryption["kms_endpoint"] = kms_endpoint

    def info() -> dict[str, Any]:
        return {
            "version": __version__,
            "uptime_seconds": int(time.time() - started_at),
            "tls_enabled": tls,
            "encryption_enabled": kms_provider is not None,
            **encryption,
            "metadata_backend": backend,
            "replication_enabled": replication,
            "workers": workers,
            "worker": {"index": worker_index, "pid": os.getpid()},
        }

    return info
