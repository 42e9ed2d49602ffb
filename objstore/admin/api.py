"""The admin JSON API under /admin (Klein).

GET /admin/health answers without authentication; every other endpoint is SigV4-signed
exactly like S3 requests. Errors are JSON {"error", "message"}; never HTML.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from klein import Klein
from twisted.logger import Logger
from twisted.python.failure import Failure
from werkzeug.exceptions import MethodNotAllowed, NotFound

from objstore import __version__
from objstore.errors import RETRY_AFTER_SECONDS, AdminError, S3Error
from objstore.http.authn import Authenticator
from objstore.http.health import HealthState
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal

log = Logger()


def json_body(request: ObjstoreRequest, status: int, payload: Any) -> bytes:
    request.setResponseCode(status)
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
    ) -> None:
        self._health = health
        self._authenticator = authenticator
        self._info = info

    def resource(self) -> object:
        return self.app.resource()

    async def _admin(self, request: ObjstoreRequest) -> Principal:
        try:
            principal = await self._authenticator.authenticate(request)
        except S3Error as error:
            raise AdminError("AccessDenied", f"{error.code}: {error.message}") from None
        if not principal.is_root:
            raise AdminError("AccessDenied", "This endpoint needs an administrator.")
        return principal

    @app.route("/health", methods=["GET", "HEAD"])
    def health(self, request: ObjstoreRequest) -> bytes:
        status, word = self._health.status()
        if request.args.get(b"verbose") == [b"1"]:
            return json_body(request, 200, {"status": word})
        return json_body(request, status, {"status": word})

    @app.route("/info", methods=["GET"])
    async def info(self, request: ObjstoreRequest) -> bytes:
        await self._admin(request)
        return json_body(request, 200, self._info())

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
        log.failure("unhandled error in the admin API", failure)
        return json_body(request, 500, {"error": "InternalError", "message": "Internal error."})


def server_info(started_at: float, *, tls: bool, backend: str) -> Callable[[], dict[str, Any]]:
    def info() -> dict[str, Any]:
        return {
            "version": __version__,
            "uptime_seconds": int(time.time() - started_at),
            "tls_enabled": tls,
            "encryption_enabled": False,
            "metadata_backend": backend,
            "replication_enabled": False,
        }

    return info
