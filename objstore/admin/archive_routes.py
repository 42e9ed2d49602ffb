"""POST /admin/archive (Klein, mounted by `AdminApi`): a streamed tar.gz of named objects.

Everything that can fail cleanly fails before the first byte: the body (400), the caller's
rights (svc:CreateArchive, then s3:GetObject on every object: 403), the bucket and every key
(404). Only then do the 200 and the headers go out and the archive streams, with memory
bounded by one chunk (see `objstore.engine.archive`).

What left the server is audited: the request's own entry (admin:CreateArchive) names the
bucket, and every object whose bytes went out gets an `Archive::GetObject` entry (bucket,
key, version, size; the caller, address and request id of the archive), recorded chunk by
chunk as the archive streams. An archive of many small objects must not push the requests'
entries out of the bounded audit queue: past `AUDIT_BACKLOG` queued entries, the stream
waits for the queue to be written before it goes on.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from klein import Klein

from objstore.admin.api import install_json_errors
from objstore.admin.gate import CREATE_ARCHIVE, AdminGate, authorized_route
from objstore.admin.views import read_json, required_str
from objstore.engine.archive import ArchiveService, check_keys
from objstore.errors import AdminError
from objstore.http.ratelimit import peer_address
from objstore.http.site import ObjstoreRequest
from objstore.iam.authorizer import Authorizer, object_arn
from objstore.iam.identity import Principal
from objstore.meta.records import ObjectRecord

GET_OBJECT = "s3:GetObject"
ARCHIVED_OBJECT = "Archive::GetObject"  # the audit entry of each object an archive sent
AUDIT_BACKLOG = 2000  # queued audit entries past which the stream waits for a flush
FAMILIES = ("archive",)


class ArchiveAudit(Protocol):
    """What of the audit log (`objstore.audit.log.AuditLog`) an archive records through."""

    @property
    def depth(self) -> int: ...

    def record(
        self, operation: str, *, bucket: str = "", key: str = "", status: int = 200,
        user: str = "system", error_code: str = "", **extra: object,
    ) -> None: ...

    async def flush(self) -> int: ...
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def archive_file_name(bucket: str) -> str:
    """`<bucket>.tar.gz`, with anything but letters, digits, `.`, `_` and `-` replaced, so
    the Content-Disposition value needs no quoting rules."""
    return (_UNSAFE_FILE_CHARS.sub("_", bucket).strip(".") or "archive") + ".tar.gz"


class ArchiveRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, archives: ArchiveService,
                 authorizer: Authorizer, audit: ArchiveAudit | None = None) -> None:
        self._gate = gate
        self._archives = archives
        self._authorizer = authorizer
        self._audit = audit

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/archive", methods=["POST"], action=CREATE_ARCHIVE)
    async def archive(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        body = read_json(request)
        bucket = required_str(body, "bucket")
        if not bucket:
            raise AdminError("BadRequest", "bucket must not be empty.")
        keys = check_keys(body.get("keys"))
        request.audit.bucket = bucket  # the request's own entry names what it read
        await self._authorize_reads(caller, bucket, keys)
        plan = await self._archives.plan(bucket, keys)
        request.setResponseCode(200)
        request.setHeader("Content-Type", "application/gzip")
        request.setHeader("Content-Disposition",
                          f'attachment; filename="{archive_file_name(bucket)}"')
        producer = self._archives.producer(plan, request, lambda: _abort(request),
                                           sent=self._sent_objects(request, caller))
        await producer.start()
        return b""

    def _sent_objects(self, request: ObjstoreRequest, caller: Principal
                      ) -> Callable[[Sequence[ObjectRecord]], Awaitable[None]] | None:
        """What records an `Archive::GetObject` entry per object sent, like a GetObject by
        the archive's caller."""
        audit = self._audit
        if audit is None:
            return None
        request_id, source_ip = request.request_id, peer_address(request)

        async def sent(records: Sequence[ObjectRecord]) -> None:
            for record in records:
                audit.record(ARCHIVED_OBJECT, bucket=record.bucket, key=record.key,
                             user=caller.username, user_id=caller.user_id,
                             access_key=caller.access_key, source_ip=source_ip,
                             request_id=request_id, bytes_out=record.size,
                             version_id=record.version_id)
            if audit.depth > AUDIT_BACKLOG:
                await audit.flush()  # returns at once when a flush is already running

        return sent

    async def _authorize_reads(self, caller: Principal, bucket: str, keys: list[str]) -> None:
        for key in keys:
            if not await self._authorizer.allowed(caller, GET_OBJECT, object_arn(bucket, key)):
                raise AdminError("AccessDenied", f"{GET_OBJECT} is not allowed on {bucket}/{key}.")


def _abort(request: Any) -> None:
    channel = request.channel
    if channel is not None and channel.transport is not None:
        channel.transport.abortConnection()
