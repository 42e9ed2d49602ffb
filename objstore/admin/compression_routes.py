"""Bucket compression endpoints of the admin API (Klein, mounted by `AdminApi` under /admin):

  GET    /buckets/{bucket}/compression  -> 200 {bucket, algorithm, level}
                                           (both null when the bucket compresses nothing)
  PUT    /buckets/{bucket}/compression  {algorithm: "zstd", level?: 1..19 (3)} -> 200 (GET)
  DELETE /buckets/{bucket}/compression  -> 204 (new objects are stored uncompressed)

Errors: 400 for an unknown algorithm, a level out of range or an unknown field, 404 for an
unknown bucket. Authorization as the quota routes: root, or a grant allowing `*`. The
setting and what it does: objstore.engine.compression.
"""

from __future__ import annotations

from objstore.admin.api import json_body
from objstore.admin.gate import ADMINISTRATOR, AdminGate, authorized_route
from objstore.admin.quota_routes import QuotaRoutes
from objstore.admin.views import JsonObject, no_content, read_json
from objstore.engine.compression import CompressionService, CompressionSetting, parse_setting
from objstore.engine.quota import NoSuchBucket, QuotaService
from objstore.errors import AdminError
from objstore.http.caller import client_caller
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal

FAMILIES = ("buckets",)
_PATH = "/buckets/<bucket>/compression"


def compression_view(bucket: str, setting: CompressionSetting | None) -> JsonObject:
    return {"bucket": bucket,
            "algorithm": None if setting is None else setting.algorithm,
            "level": None if setting is None else setting.level}


class BucketRoutes(QuotaRoutes):
    """The `buckets` family of the admin API: one Klein app per family, so the compression
    routes are added to the quota routes' app, and this class (never `QuotaRoutes` alone)
    is what the service mounts."""

    app = QuotaRoutes.app

    def __init__(self, *, gate: AdminGate, quotas: QuotaService,
                 compression: CompressionService) -> None:
        super().__init__(gate=gate, quotas=quotas)
        self._compression = compression

    @authorized_route(app, _PATH, methods=["GET"], action=ADMINISTRATOR)
    async def get_compression(self, request: ObjstoreRequest, _caller: Principal,
                              bucket: str) -> bytes:
        return json_body(request, 200, await self._compression_view(bucket))

    @authorized_route(app, _PATH, methods=["PUT"], action=ADMINISTRATOR)
    async def put_compression(self, request: ObjstoreRequest, caller: Principal,
                              bucket: str) -> bytes:
        setting = parse_setting(read_json(request))
        try:
            await self._compression.put(client_caller(request, caller), bucket, setting)
        except NoSuchBucket:
            raise _no_such_bucket(bucket) from None
        return json_body(request, 200, await self._compression_view(bucket))

    @authorized_route(app, _PATH, methods=["DELETE"], action=ADMINISTRATOR)
    async def delete_compression(self, request: ObjstoreRequest, caller: Principal,
                                 bucket: str) -> bytes:
        try:
            await self._compression.delete(client_caller(request, caller), bucket)
        except NoSuchBucket:
            raise _no_such_bucket(bucket) from None
        return no_content(request)

    async def _compression_view(self, bucket: str) -> JsonObject:
        try:
            return compression_view(bucket, await self._compression.get(bucket))
        except NoSuchBucket:
            raise _no_such_bucket(bucket) from None


def _no_such_bucket(bucket: str) -> AdminError:
    return AdminError("NotFound", f"The bucket {bucket} does not exist.")


__all__ = ["FAMILIES", "BucketRoutes", "compression_view"]
