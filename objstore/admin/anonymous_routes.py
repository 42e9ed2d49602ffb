"""Public links of a bucket in the admin API (Klein, mounted by `AdminApi` under /admin):

  GET /buckets/{bucket}/anonymous -> 200 {bucket, rules: [{prefix, access}],
                                          public_prefixes: [prefix, ...]}
  PUT /buckets/{bucket}/anonymous {prefix?: "", access: none|download|upload|public}
                                  -> 200 (as GET)

`rules` are the links `objstore anonymous set` made; `public_prefixes` are the key
prefixes anyone may read under any statement of the bucket policy (what a console shows;
"" is the whole bucket). Errors: 400 for an unknown access level, a wildcard in the
prefix or an unknown field, 404 for an unknown bucket, 409 while the bucket's public access
block has BlockPublicPolicy. Authorization as the quota routes: root, or a grant allowing
`*`. The rules: objstore.iam.anonymous_access.
"""

from __future__ import annotations

from objstore.admin.api import json_body
from objstore.admin.compression_routes import BucketRoutes
from objstore.admin.gate import ADMINISTRATOR, AdminGate, authorized_route
from objstore.admin.views import read_json
from objstore.engine.anonymous import AnonymousAccessService
from objstore.engine.compression import CompressionService
from objstore.engine.quota import QuotaService
from objstore.errors import AdminError
from objstore.http.caller import client_caller
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal

_PATH = "/buckets/<bucket>/anonymous"


class AccessBucketRoutes(BucketRoutes):
    """The `buckets` family with the public-link routes added to its one Klein app."""

    app = BucketRoutes.app

    def __init__(self, *, gate: AdminGate, quotas: QuotaService,
                 compression: CompressionService, anonymous: AnonymousAccessService) -> None:
        super().__init__(gate=gate, quotas=quotas, compression=compression)
        self._anonymous = anonymous

    @authorized_route(app, _PATH, methods=["GET"], action=ADMINISTRATOR)
    async def get_anonymous(self, request: ObjstoreRequest, _caller: Principal,
                            bucket: str) -> bytes:
        return json_body(request, 200, await self._anonymous.view(bucket))

    @authorized_route(app, _PATH, methods=["PUT"], action=ADMINISTRATOR)
    async def put_anonymous(self, request: ObjstoreRequest, caller: Principal,
                            bucket: str) -> bytes:
        body = read_json(request)
        unknown = set(body) - {"prefix", "access"}
        if unknown:
            raise AdminError("BadRequest", f"Unknown field {sorted(unknown)[0]!r}.")
        prefix, access = body.get("prefix", ""), body.get("access")
        if not isinstance(prefix, str) or not isinstance(access, str):
            raise AdminError("BadRequest", "prefix and access must be strings.")
        view = await self._anonymous.set(client_caller(request, caller), bucket, prefix,
                                         access)
        return json_body(request, 200, view)


__all__ = ["AccessBucketRoutes"]
