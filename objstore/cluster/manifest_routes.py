"""POST /cluster/v1/manifest: a page of this node's changed-since manifest for a peer's
anti-entropy pull (cluster auth, JSON body at most 2 MiB).

The handler is declared in `ClusterApi` with `cluster_route` (one line there), so it runs
only for a verified peer; it reads `{since, limit}` (manifest_wire.py), asks the metadata
store for the page (`MetaStore.changed_since`, on the reader pool) and answers it encoded
(rows as `wire.encode_row`, deletions as `wire.encode_delete`), under PAGE_BYTES. A node
built without a manifest source answers 503.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from objstore.cluster.manifest_wire import decode_request, encode_page
from objstore.cluster.wire import WireError
from objstore.errors import AdminError
from objstore.http.site import ObjstoreRequest
from objstore.meta.manifest_queries import ManifestPage

# (since, limit) -> the page: `MetaStore.changed_since`.
ManifestSource = Callable[[int, int], Awaitable[ManifestPage]]


class ManifestHost(Protocol):
    """What the handler needs of `ClusterApi`."""

    manifest_source: ManifestSource | None

    async def _json_bytes(self, request: ObjstoreRequest) -> bytes: ...


async def manifest(api: ManifestHost, request: ObjstoreRequest, peer: object) -> bytes:
    """The handler (`peer`: the verified sender, unused: every eligible peer may pull)."""
    if api.manifest_source is None:
        raise AdminError("ServiceUnavailable", "This node serves no manifest.")
    spool = request.spool
    body = await api._json_bytes(request) if spool is not None and spool.length else b""
    try:
        asked = decode_request(body)
    except WireError as error:
        raise AdminError("BadRequest", f"Not a manifest request: {error}") from None
    answer = encode_page(await api.manifest_source(asked.since, asked.limit))
    request.setResponseCode(200)
    request.setHeader("Content-Type", "application/json")
    request.setHeader("Content-Length", str(len(answer)))
    return answer
