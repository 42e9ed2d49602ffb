"""The parsed form of one S3 request, and the response a handler returns.

The target and the query were read once, before authentication (`routes.RequestLine`);
the call carries them and the route's operation name (the name the audit log records and
an event would carry). Headers stay in Twisted's own parsed `Headers`: `header(name)` reads
them there, so nothing is copied per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from objstore.engine.changes import Caller
from objstore.engine.objects import REPLICA_VERSION_DETAIL
from objstore.http.caller import client_caller
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.replication.service import REPLICA, REPLICA_DETAIL

VERSION_HEADER = "x-objstore-replication-version-id"  # sent by replication/worker.py

if TYPE_CHECKING:
    from objstore.s3.api import S3Services


@dataclass
class S3Call:
    request: ObjstoreRequest
    principal: Principal
    services: S3Services
    bucket: str
    key: str
    query: dict[str, str]
    operation: str = ""  # the route's operation name (GetObject, CopyObject, ...)
    caller: Caller = field(init=False)  # who asks: what the engine's writes take

    def __post_init__(self) -> None:
        self.caller = client_caller(self.request, self.principal, self.operation)
        if (self.header("x-amz-replication-status") or "").upper() == REPLICA:
            # A replication source's write (PUT, DELETE, tagging): born REPLICA, journals
            # nothing here (replication/service.py), so two-way setups never loop.
            details = {REPLICA_DETAIL: REPLICA}
            carried = self.header(VERSION_HEADER)
            if carried:  # the source's version id, kept on a versioned bucket
                details[REPLICA_VERSION_DETAIL] = carried
            self.caller = replace(self.caller, details=details)

    def header(self, name: str) -> str | None:
        return self.request.header(name)

    def body(self) -> bytes:
        content = self.request.content
        if content is None:
            return b""
        content.seek(0)
        data: bytes = content.read()
        return data


@dataclass
class S3Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str | None = None
    stream: Any = None  # a producer with start() -> Deferred; the handler set Content-Length
