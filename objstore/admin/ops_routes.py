"""Operational endpoints of the admin API (Klein, mounted by `AdminApi` under /admin):
GET /stats (storage totals and the data volume's disk figures) and POST /presign (a SigV4
presigned URL signed with the caller's own credential).

A presigned URL carries no rights of its own: the S3 API evaluates the caller's policies
when it is used, so presigning needs only svc:CreatePresignedUrl. Disk figures come from
`os.statvfs` on the IO pool; the secret of the caller's credential is read from the store
and never leaves this process except as a signature.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from klein import Klein

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import CREATE_PRESIGNED_URL, VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.views import (
    JsonObject,
    iso,
    optional_int,
    optional_str,
    read_json,
    required_str,
)
from objstore.engine.names import bucket_name_problem
from objstore.errors import AdminError
from objstore.http import sigv4
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

FAMILIES = ("stats", "presign")

PRESIGN_METHODS = ("GET", "PUT", "HEAD", "DELETE")
DEFAULT_EXPIRES_SECONDS = 3600


def disk_figures(path: str) -> JsonObject:
    """Total and available bytes of the file system holding `path`; {} when unknown."""
    try:
        figures = os.statvfs(path)
    except OSError:
        return {}
    return {
        "disk_total_bytes": figures.f_blocks * figures.f_frsize,
        "disk_available_bytes": figures.f_bavail * figures.f_frsize,
    }


@dataclass(frozen=True)
class PresignRequest:
    bucket: str
    key: str
    method: str
    expires_seconds: int
    base_url: str | None  # scheme://host[:port] from `endpoint`, None: the request's own


def parse_presign(body: JsonObject) -> PresignRequest:
    bucket = required_str(body, "bucket")
    key = required_str(body, "key")
    if not bucket or bucket_name_problem(bucket):
        raise AdminError("BadRequest", f"bucket {bucket!r} is not a valid bucket name.")
    if not key:
        raise AdminError("BadRequest", "key must not be empty.")
    method = (optional_str(body, "method") or "GET").upper()
    if method not in PRESIGN_METHODS:
        raise AdminError("BadRequest", f"method must be one of {', '.join(PRESIGN_METHODS)}.")
    expires = optional_int(body, "expires")
    expires = DEFAULT_EXPIRES_SECONDS if expires is None else expires
    if not 1 <= expires <= sigv4.MAX_PRESIGN_EXPIRES:
        raise AdminError("BadRequest",
                         f"expires must be within 1..{sigv4.MAX_PRESIGN_EXPIRES} seconds.")
    endpoint = optional_str(body, "endpoint")
    return PresignRequest(bucket, key, method, expires,
                          None if endpoint is None else base_url_of(endpoint))


def base_url_of(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AdminError("BadRequest", "endpoint must be an http:// or https:// base URL.")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise AdminError("BadRequest", "endpoint must be scheme://host[:port] only.")
    return f"{parts.scheme}://{parts.netloc}"


def request_base_url(request: ObjstoreRequest) -> str:
    """scheme://host as this request reached us (the Host header, which signatures cover)."""
    scheme = "https" if request.isSecure() else "http"
    host = request.getHeader(b"host")
    if host:
        return f"{scheme}://{host.decode('latin-1')}"
    address: Any = request.getHost()
    return f"{scheme}://{address.host}:{address.port}"


class OpsRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(
        self,
        *,
        gate: AdminGate,
        meta: MetaStore,
        io: Runner,
        data_dir: str,
        region: str,
        clock: Callable[[], float],
    ) -> None:
        self._gate = gate
        self._meta = meta
        self._io = io
        self._data_dir = data_dir
        self._region = region
        self._clock = clock

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/stats", methods=["GET"], action=VIEW_SERVER_INFO)
    async def stats(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        bucket_count, object_count, total_bytes = await self._meta.storage_totals()
        disk = await self._io.run(disk_figures, self._data_dir)
        return json_body(request, 200, {
            "bucket_count": bucket_count,
            "object_count": object_count,
            "total_size_bytes": total_bytes,
            **disk,
        })

    @authorized_route(app, "/presign", methods=["POST"], action=CREATE_PRESIGNED_URL)
    async def presign(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        wanted = parse_presign(read_json(request))
        credential = await self._meta.get_credential(caller.access_key)
        if credential is None or not credential.active:  # deleted since it authenticated
            raise AdminError("AccessDenied", "The calling credential is no longer active.")
        base = wanted.base_url or request_base_url(request)
        key = sigv4.uri_encode(wanted.key, keep_slash=True)
        path = f"/{sigv4.uri_encode(wanted.bucket)}/{key}"
        # X-Amz-Date has whole seconds: expires_at is exact only from a whole second.
        now = datetime.datetime.fromtimestamp(int(self._clock()), datetime.UTC)
        url = sigv4.presign_url(wanted.method, base + path, credential.access_key_id,
                                credential.secret_access_key, self._region, now,
                                wanted.expires_seconds)
        expires_at = iso(now.timestamp() + wanted.expires_seconds)
        return json_body(request, 200, {"url": url, "expires_at": expires_at})
