"""Bucket quota endpoints of the admin API (Klein, mounted by `AdminApi` under /admin):

  GET    /buckets/{bucket}/quota  -> 200 {bucket, max_bytes, max_objects,
                                         usage: {objects, bytes}}
  PUT    /buckets/{bucket}/quota  {max_bytes?, max_objects?} -> 200 (the GET shape)
  DELETE /buckets/{bucket}/quota  -> 204

A limit is a non-negative integer or null (unlimited); a field left out of a PUT is null,
so a PUT states the whole quota, and a PUT of two nulls removes it like DELETE. Usage is
counted as the quota counts it (every version, delete markers excluded). Errors: 400 for a
negative or non-integer limit, 404 for an unknown bucket.

Authorization: root, or a grant allowing the action `*` (AdministratorAccess): the policy
language has no bucket-administration action, and a quota is an operator's decision.
The rule that enforces the quota lives in `objstore.engine.quota`.
"""

from __future__ import annotations

from typing import Any

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import ADMINISTRATOR, AdminGate, authorized_route
from objstore.admin.views import JsonObject, no_content, read_json
from objstore.engine.quota import BucketQuota, NoSuchBucket, QuotaService, UsageFigures
from objstore.errors import AdminError
from objstore.http.caller import client_caller
from objstore.http.shield import ShieldedKlein
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal

FAMILIES = ("buckets",)
LIMIT_FIELDS = ("max_bytes", "max_objects")


def parse_quota(body: JsonObject) -> BucketQuota:
    unknown = sorted(set(body) - set(LIMIT_FIELDS) - {"bucket"})
    if unknown:
        raise AdminError("BadRequest", f"Unknown field {unknown[0]!r}; a quota has "
                         "max_bytes and max_objects.")
    return BucketQuota(_limit(body, "max_bytes"), _limit(body, "max_objects"))


def _limit(body: JsonObject, name: str) -> int | None:
    value: Any = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdminError("BadRequest", f"{name} must be a non-negative integer or null.")
    if value < 0:
        raise AdminError("BadRequest", f"{name} must not be negative.")
    return value


def quota_view(bucket: str, quota: BucketQuota, usage: UsageFigures) -> JsonObject:
    return {
        "bucket": bucket,
        "max_bytes": quota.max_bytes,
        "max_objects": quota.max_objects,
        "usage": {"objects": usage.objects, "bytes": usage.bytes},
    }


class QuotaRoutes:
    app = ShieldedKlein()  # changes complete even when the client leaves
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, quotas: QuotaService) -> None:
        self._gate = gate
        self._quotas = quotas

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/buckets/<bucket>/quota", methods=["GET"], action=ADMINISTRATOR)
    async def get_quota(self, request: ObjstoreRequest, _caller: Principal, bucket: str) -> bytes:
        return json_body(request, 200, await self._view(bucket))

    @authorized_route(app, "/buckets/<bucket>/quota", methods=["PUT"], action=ADMINISTRATOR)
    async def put_quota(self, request: ObjstoreRequest, caller: Principal, bucket: str) -> bytes:
        quota = parse_quota(read_json(request))
        try:
            await self._quotas.put(client_caller(request, caller), bucket, quota)
        except NoSuchBucket:
            raise _no_such_bucket(bucket) from None
        return json_body(request, 200, await self._view(bucket))

    @authorized_route(app, "/buckets/<bucket>/quota", methods=["DELETE"], action=ADMINISTRATOR)
    async def delete_quota(self, request: ObjstoreRequest, caller: Principal,
                           bucket: str) -> bytes:
        try:
            await self._quotas.delete(client_caller(request, caller), bucket)
        except NoSuchBucket:
            raise _no_such_bucket(bucket) from None
        return no_content(request)

    async def _view(self, bucket: str) -> JsonObject:
        try:
            quota, usage = await self._quotas.get(bucket)
        except NoSuchBucket:
            raise _no_such_bucket(bucket) from None
        return quota_view(bucket, quota, usage)


def _no_such_bucket(bucket: str) -> AdminError:
    return AdminError("NotFound", f"The bucket {bucket} does not exist.")


__all__ = ["FAMILIES", "QuotaRoutes", "parse_quota", "quota_view"]
