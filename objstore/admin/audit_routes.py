"""GET /admin/audit (Klein, mounted by `AdminApi`): the node's audit log, newest first.

Needs svc:ViewServerInfo. Query parameters: bucket, operation, user (a username or a user
id), since and until (ISO 8601; since inclusive, until exclusive; no offset means UTC),
limit (default 100, at most 1000), cursor (the opaque `next_cursor` of the previous page)
and node (absent or this node, a peer's node id, or "all": cluster/node_views.py). The
response is {node, entries, next_cursor} (with node=all also `sources`); next_cursor is
null on the last page. Every response names the answering node. Records still queued for
writing (at most a second old) are not yet visible.

`audit_page` is this node's own answer to a filter, wherever it was asked (here, or by a
peer through POST /cluster/v1/admin/audit).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from typing import Any

from klein import Klein

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.view_params import ViewParams, parse_limit, parse_time, query_params
from objstore.admin.views import JsonObject, iso
from objstore.cluster.node_views import AUDIT, NodeViews
from objstore.errors import AdminError
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.json_input import parse_json
from objstore.meta.async_store import MetaStore
from objstore.meta.audit_queries import AuditFilter, AuditRecord

FAMILIES = ("audit",)
DEFAULT_LIMIT = AUDIT.default_limit


# -- cursor ----------------------------------------------------------------------------


def encode_cursor(record: AuditRecord) -> str:
    raw = json.dumps([record.ts, record.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[float, int]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        ts, row_id = parse_json(raw)
        if isinstance(row_id, bool) or not isinstance(row_id, int):
            raise ValueError("id")
        return float(ts), row_id
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise AdminError("BadRequest", "cursor is not a cursor this endpoint returned.") from None


def parse_audit_filter(params: ViewParams) -> AuditFilter:
    cursor = params.get("cursor")
    return AuditFilter(
        bucket=params.get("bucket") or None,
        operation=params.get("operation") or None,
        user=params.get("user") or None,
        since=parse_time(params, "since"),
        until=parse_time(params, "until"),
        limit=parse_limit(params, DEFAULT_LIMIT, AUDIT.max_limit),
        before=decode_cursor(cursor) if cursor else None,
    )


async def audit_page(meta: MetaStore, params: ViewParams) -> dict[str, Any]:
    """One page of this node's audit log: {entries, next_cursor, cursors} (`cursors`: the
    cursor after each entry, for node=all)."""
    wanted = parse_audit_filter(params)
    # One more row than asked tells whether another page exists.
    rows = await meta.query_audit(dataclasses.replace(wanted, limit=wanted.limit + 1))
    page = rows[: wanted.limit]
    more = len(rows) > wanted.limit
    return {
        "entries": [entry_view(r) for r in page],
        "next_cursor": encode_cursor(page[-1]) if more else None,
        "cursors": [encode_cursor(r) for r in page],
    }


def entry_view(record: AuditRecord) -> JsonObject:
    return {
        "id": record.id,
        "time": iso(record.ts),
        "node_id": record.node_id,
        "request_id": record.request_id or None,
        "operation": record.operation,
        "user_id": record.user_id or None,
        "username": record.username or None,
        "access_key": record.access_key or None,
        "bucket": record.bucket or None,
        "key": record.key or None,
        "source_ip": record.source_ip or None,
        "status": record.status,
        "error_code": record.error_code or None,
        "duration_ms": record.duration_ms,
        "bytes_in": record.bytes_in,
        "bytes_out": record.bytes_out,
        "user_agent": record.user_agent or None,
        "details": dict(record.details),
    }


class AuditRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, meta: MetaStore, node_id: str,
                 views: NodeViews | None = None) -> None:
        """`views`: the node's per-node views (a cluster node's reach its peers); by
        default this node alone."""
        self._gate = gate
        self._views = views if views is not None else NodeViews(
            node_id=node_id, local={AUDIT.name: lambda params: audit_page(meta, params)})

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/audit", methods=["GET"], action=VIEW_SERVER_INFO)
    async def audit(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        return json_body(request, 200, await self._views.answer(AUDIT.name,
                                                                query_params(request)))
