"""POST /admin/archive (Klein, mounted by `AdminApi`): a streamed tar.gz of named objects.

Everything that can fail cleanly fails before the first byte: the body (400), the caller's
rights (svc:CreateArchive, then s3:GetObject on every object: 403), the bucket and every key
(404). Only then do the 200 and the headers go out and the archive streams, with memory
bounded by one chunk (see `objstore.engine.archive`).
"""

from __future__ import annotations

import re
from typing import Any

from klein import Klein

from objstore.admin.gate import CREATE_ARCHIVE, AdminGate, authorized_route
from objstore.admin.views import install_json_errors, read_json, required_str
from objstore.engine.archive import ArchiveService, check_keys
from objstore.errors import AdminError
from objstore.http.site import ObjstoreRequest
from objstore.iam.authorizer import Authorizer, object_arn
from objstore.iam.identity import Principal

GET_OBJECT = "s3:GetObject"
FAMILIES = ("archive",)
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def archive_file_name(bucket: str) -> str:
    """`<bucket>.tar.gz`, with anything but letters, digits, `.`, `_` and `-` replaced, so
    the Content-Disposition value needs no quoting rules."""
    return (_UNSAFE_FILE_CHARS.sub("_", bucket).strip(".") or "archive") + ".tar.gz"


class ArchiveRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, archives: ArchiveService,
                 authorizer: Authorizer) -> None:
        self._gate = gate
        self._archives = archives
        self._authorizer = authorizer

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/archive", methods=["POST"], action=CREATE_ARCHIVE)
    async def archive(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        body = read_json(request)
        bucket = required_str(body, "bucket")
        if not bucket:
            raise AdminError("BadRequest", "bucket must not be empty.")
        keys = check_keys(body.get("keys"))
        await self._authorize_reads(caller, bucket, keys)
        plan = await self._archives.plan(bucket, keys)
        request.setResponseCode(200)
        request.setHeader("Content-Type", "application/gzip")
        request.setHeader("Content-Disposition",
                          f'attachment; filename="{archive_file_name(bucket)}"')
        producer = self._archives.producer(plan, request, lambda: _abort(request))
        await producer.start()
        return b""

    async def _authorize_reads(self, caller: Principal, bucket: str, keys: list[str]) -> None:
        for key in keys:
            if not await self._authorizer.allowed(caller, GET_OBJECT, object_arn(bucket, key)):
                raise AdminError("AccessDenied", f"{GET_OBJECT} is not allowed on {bucket}/{key}.")


def _abort(request: Any) -> None:
    channel = request.channel
    if channel is not None and channel.transport is not None:
        channel.transport.abortConnection()
