"""The root resource: virtual-host rewrite, then dispatch by one mount table (`MOUNTS`):
the admin API, the cluster protocol (a JSON 404 unless the cluster is enabled), the web
console's static files, else the S3 API. Request-level limits are checked here, before any
API sees the request. The single-segment mounts' names are reserved bucket names
(`engine/names.py` `RESERVED_BUCKET_NAMES`; `cluster` is not: a bucket of that name keeps
everything but its `v1/` keys); a virtual-hosted request is always S3's.

The same dispatch admits a request with a body before the body is read (`admit`, the
site's `Gatekeeper`): the API it is for decides from the request line and headers. It is
decided once per request and kept on it (`request.api_resource`) for the traversal that
follows the body.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_to_bytes

from twisted.internet.defer import Deferred
from twisted.web.resource import Resource

from objstore.audit.context import note_api
from objstore.config import ServerLimits
from objstore.errors import S3Error
from objstore.http import cors
from objstore.http.cors import CorsRule
from objstore.http.site import Admitted, Gatekeeper, ObjstoreRequest

# (mount name, the path segments it owns, decoded as twisted.web's traversal decodes them).
# The first match wins; a request no mount owns is S3's. The root consumes the first
# segment; the mount's resource sees the rest (the cluster API sees `v1/...`).
MOUNTS: tuple[tuple[str, tuple[bytes, ...]], ...] = (
    ("admin", (b"admin",)),
    ("cluster", (b"cluster", b"v1")),
    ("console", (b"console",)),
)
S3 = "s3"


def mount_of(method: bytes, path: bytes) -> str:
    """The name of the mount that owns a path-style request (`S3` when none does).

    A CreateBucket shape (PUT of a bare first segment) is S3's whatever the name, so
    `PUT /admin` and `PUT /console` get S3's InvalidBucketName (`engine/names.py`)."""
    segments = [unquote_to_bytes(s) for s in path[1:].split(b"/", 2)]
    if method == b"PUT" and (len(segments) == 1 or segments[1:] == [b""]):
        return S3
    for name, prefix in MOUNTS:
        if tuple(segments[: len(prefix)]) == prefix:
            return name
    return S3


class _JsonNotFound(Resource):
    isLeaf = True

    def __init__(self, message: bytes) -> None:
        super().__init__()
        self._body = b'{"error": "NotFound", "message": "' + message + b'"}'

    def render(self, request: Any) -> bytes:
        request.setResponseCode(404)
        request.setHeader(b"Content-Type", b"application/json")
        return self._body


class _Preflight(Resource):
    """A preflight to the admin API or the console, under the node-wide CORS setting: 200
    with the Access-Control-* headers, or a JSON 403 (400 without Origin or method)."""

    isLeaf = True

    def __init__(self, rules: tuple[CorsRule, ...], headers: dict[str, str]) -> None:
        super().__init__()
        self._rules, self._headers = rules, headers

    def render(self, request: Any) -> bytes:
        try:
            answer = cors.preflight(self._rules, self._headers)
        except S3Error as refused:
            request.setResponseCode(refused.status)
            request.setHeader(b"Content-Type", b"application/json")
            code = "BadRequest" if refused.status == 400 else "AccessDenied"
            return json.dumps({"error": code, "message": refused.message}).encode()
        for name, value in answer.items():
            request.setHeader(name, value)
        request.setHeader(b"Content-Length", b"0")
        return b""


class RootResource(Resource):
    def __init__(
        self, *, s3: Any, admin: Any, limits: ServerLimits, domains: tuple[str, ...],
        cluster: Any = None, console: Any = None, cors_rules: tuple[CorsRule, ...] = (),
    ) -> None:
        super().__init__()
        self._s3 = s3
        self._apis: dict[str, Any] = {
            S3: s3,
            "admin": admin,
            "cluster": cluster if cluster is not None else _JsonNotFound(
                b"Clustering is not enabled on this node."),
            "console": console if console is not None else _JsonNotFound(
                b"The web console is not served by this node."),
        }
        assert set(self._apis) == {S3, *(name for name, _ in MOUNTS)}
        self._limits = limits
        self._cors_rules = cors_rules  # the node-wide setting, for the admin API and console
        self._domains = tuple(d.lower() for d in domains)
        # The APIs that admit a request before its body, by identity (looked up per request).
        self._gatekeepers: dict[int, Gatekeeper] = {
            id(api): api for api in self._apis.values() if isinstance(api, Gatekeeper)}

    def admit(self, request: ObjstoreRequest) -> Deferred[Admitted] | None:
        if request.path is None:  # not through ObjstoreChannel: decided after the body
            return None
        gatekeeper = self._gatekeepers.get(id(self._api_of(request)))
        return gatekeeper.admit(request) if gatekeeper is not None else None

    def getChild(self, path: bytes, request: ObjstoreRequest) -> Any:  # noqa: N802
        api = self._api_of(request)
        if api is self._s3:
            # S3 sees the whole path: undo the traversal step that consumed `path`.
            assert request.postpath is not None and request.prepath is not None
            request.postpath.insert(0, request.prepath.pop())
            return api
        if api is self._apis["admin"] or api is self._apis["console"]:
            return self._with_node_cors(request, api)
        return api

    def _with_node_cors(self, request: ObjstoreRequest, api: Any) -> Any:
        """The node-wide CORS setting on the admin API and the console: a preflight is
        answered here; an actual response gets its Access-Control-* headers now (the API
        renders after, and keeps them)."""
        headers = {name.decode("latin-1").lower(): values[-1].decode("latin-1")
                   for name, values in request.requestHeaders.getAllRawHeaders()}
        if request.method == b"OPTIONS":
            return _Preflight(self._cors_rules, headers)
        origin = headers.get("origin")
        if origin and origin.isascii() and origin.isprintable():
            for name, value in cors.actual(self._cors_rules, origin,
                                           request.method.decode("ascii", "replace")).items():
                request.setHeader(name, value)
        return api

    def _api_of(self, request: ObjstoreRequest) -> Any:
        if request.api_resource is not None:
            return request.api_resource
        _check_request_limits(request, self._limits)
        bucket = self._vhost_bucket(request)
        if bucket is not None:
            request.vhost_bucket = bucket  # type: ignore[attr-defined]
            mount = S3
        else:
            mount = mount_of(request.method, request.path)
        if mount != S3:
            note_api(request, mount)
        api = self._apis[mount]
        request.api_resource = api
        return api

    def _vhost_bucket(self, request: ObjstoreRequest) -> str | None:
        if not self._domains:
            return None
        host = (request.getHeader(b"host") or b"").decode("latin-1").lower()
        host = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        for domain in self._domains:
            if host.endswith("." + domain):
                return host[: -len(domain) - 1]
        return None


def _check_request_limits(request: ObjstoreRequest, limits: ServerLimits) -> None:
    headers = list(request.requestHeaders.getAllRawHeaders())
    if sum(len(values) for _, values in headers) > limits.max_header_count:
        request.early_error = S3Error(
            "RequestHeaderSectionTooLarge",
            f"More than {limits.max_header_count} request headers.",
        )
        return
    if b"\x00" in request.uri or b"%00" in request.uri:
        request.early_error = S3Error("InvalidArgument", "Null bytes are not allowed.")
        return
    for name, values in headers:
        if b"\x00" in name or any(b"\x00" in v for v in values):
            request.early_error = S3Error("InvalidArgument", "Null bytes are not allowed.")
            return
