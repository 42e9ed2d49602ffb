"""The admin JSON API under /admin (Klein).

GET /admin/health answers without authentication; every other endpoint is SigV4-signed
exactly like S3 requests. Errors are JSON {"error", "message"}; never HTML.

Signed endpoints pass the gate, `authorize`, which applies the same rate limits as the S3
API (per client IP before authentication, per access key after it), then authorizes: root
users pass, others need the svc:* action of the endpoint (403 AccessDenied). Every such
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
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from klein import Klein
from twisted.logger import Logger
from twisted.python.failure import Failure
from werkzeug.exceptions import MethodNotAllowed, NotFound

from objstore import __version__
from objstore.admin.gate import (
    CREATE_ARCHIVE,
    CREATE_PRESIGNED_URL,
    VIEW_SERVER_INFO,
    authorized_route,
)
from objstore.audit.context import note_error
from objstore.errors import (
    DISK_FULL_MESSAGE,
    RETRY_AFTER_SECONDS,
    AdminError,
    S3Error,
    admin_error_of,
)
from objstore.http.authn import Authenticator
from objstore.http.health import HealthState
from objstore.http.ratelimit import RequestRateLimits, peer_address
from objstore.http.site import ObjstoreRequest
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
        return self.app.resource()

    def mount(self, families: Iterable[str], api: Any) -> None:
        """Serve /admin/<family>/... from `api` (a Klein-app holder with `resource()`)."""
        for family in families:
            self._mounts[family] = api

    async def authorize(self, request: ObjstoreRequest, action: str | None) -> Principal:
        """The gate: rate limits, SigV4, then `action` (None: authentication only)."""
        if not self._rate_limits.allow_address(peer_address(request)):
            raise AdminError("SlowDown", _SLOW_DOWN)
        try:
            principal = await self._authenticator.authenticate(request)
        except S3Error as error:
            raise AdminError("AccessDenied", f"{error.code}: {error.message}") from None
        if not self._rate_limits.allow_credential(principal.access_key):
            raise AdminError("SlowDown", _SLOW_DOWN)
        if action is not None and not await self._authorizer.allowed(principal, action, "*"):
            raise AdminError("AccessDenied", f"This endpoint needs {action}.")
        if self._space is not None and _writes(request, action) and self._space.refuses_write():
            raise AdminError("InsufficientStorage", DISK_FULL_MESSAGE)
        return principal

    @app.route("/health", methods=["GET", "HEAD"])
    def health(self, request: ObjstoreRequest) -> bytes:
        status, word = self._health.status()
        if request.args.get(b"verbose") == [b"1"]:
            return json_body(request, 200, {"status": word})
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

    @app.handle_errors(AdminError)
    def admin_error(self, request: ObjstoreRequest, failure: Failure) -> bytes:
        error = failure.value
        assert isinstance(error, AdminError)
        return json_body(request, error.status, {"error": error.code, "message": error.message})

    @app.handle_errors(NotFound)
    def not_found(self, request: ObjstoreRequest, failure: Failure) -> bytes:
        return json_body(request, 404, {"error": "NotFound", "message": "No such admin endpoint."})

    @app.handle_errors(MethodNotAllowed)
    def not_allowed(self, request: ObjstoreRequest, failure: Failure) -> bytes:
        return json_body(
            request, 405, {"error": "MethodNotAllowed", "message": "Method not allowed here."}
        )

    @app.handle_errors(Exception)
    def unexpected(self, request: ObjstoreRequest, failure: Failure) -> bytes:
        return admin_failure(request, failure)


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


def _writes(request: ObjstoreRequest, action: str | None) -> bool:
    return request.method in (b"PUT", b"POST") and action not in _READ_ONLY_POSTS


def server_info(started_at: float, *, tls: bool, backend: str, workers: int = 1,
                worker_index: int = 0) -> Callable[[], dict[str, Any]]:
    """GET /admin/info. `workers` and `worker` (which process answered) go beyond the
    spec's fields: they tell an operator the node's process layout."""

    def info() -> dict[str, Any]:
        return {
            "version": __version__,
            "uptime_seconds": int(time.time() - started_at),
            "tls_enabled": tls,
            "encryption_enabled": False,
            "metadata_backend": backend,
            "replication_enabled": False,
            "workers": workers,
            "worker": {"index": worker_index, "pid": os.getpid()},
        }

    return info
