"""The `Caller` of an engine change asked for by an S3 or admin request: the verified
principal, the request id (the `x-amz-request-id` the client got) and the client's
address. The only place a request becomes a Caller, so every API names callers alike."""

from __future__ import annotations

from twisted.web.server import Request

from objstore.engine.changes import Caller, Origin
from objstore.http.ratelimit import peer_address
from objstore.iam.identity import Principal


def client_caller(request: Request, principal: Principal, operation: str = "") -> Caller:
    """`operation`: the route's operation name (PutObject, CompleteMultipartUpload, ...),
    so a sink can tell a put from a copy or a completed upload."""
    # Plain twisted.web requests (in-memory resource tests) have no request id.
    request_id = str(getattr(request, "request_id", ""))
    return Caller(principal, origin=Origin.CLIENT, request_id=request_id,
                  source_address=peer_address(request), operation=operation)


__all__ = ["client_caller"]
