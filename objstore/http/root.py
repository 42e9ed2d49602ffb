"""The root resource: virtual-host rewrite, then dispatch by path prefix to the admin API,
the (reserved) cluster protocol, or the S3 API. Request-level limits are checked here,
before any API sees the request."""

from __future__ import annotations

from typing import Any

from twisted.web.resource import Resource

from objstore.audit.context import note_api
from objstore.config import ServerLimits
from objstore.errors import S3Error
from objstore.http.site import ObjstoreRequest


class _JsonNotFound(Resource):
    isLeaf = True

    def render(self, request: Any) -> bytes:
        request.setResponseCode(404)
        request.setHeader(b"Content-Type", b"application/json")
        return b'{"error": "NotFound", "message": "Clustering is not enabled on this node."}'


class RootResource(Resource):
    def __init__(
        self, *, s3: Any, admin: Any, limits: ServerLimits, domains: tuple[str, ...]
    ) -> None:
        super().__init__()
        self._s3 = s3
        self._admin = admin
        self._cluster = _JsonNotFound()
        self._limits = limits
        self._domains = tuple(d.lower() for d in domains)

    def getChild(self, path: bytes, request: ObjstoreRequest) -> Any:  # noqa: N802
        _check_request_limits(request, self._limits)
        assert request.postpath is not None and request.prepath is not None
        bucket = self._vhost_bucket(request)
        if bucket is not None:
            request.vhost_bucket = bucket  # type: ignore[attr-defined]
        elif path == b"admin":
            note_api(request, "admin")
            return self._admin
        elif path == b"cluster" and request.postpath[:1] == [b"v1"]:
            note_api(request, "cluster")
            return self._cluster
        # S3 sees the whole path: undo the traversal step that consumed `path`.
        request.postpath.insert(0, request.prepath.pop())
        return self._s3

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
