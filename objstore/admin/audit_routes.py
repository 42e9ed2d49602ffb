"""GET /admin/audit (Klein, mounted by `AdminApi`): the node's audit log, newest first.

Needs svc:ViewServerInfo. Query parameters: bucket, operation, user (a username or a user
id), since and until (ISO 8601; since inclusive, until exclusive; no offset means UTC),
limit (default 100, at most 1000), cursor (the opaque `next_cursor` of the previous page)
and node. The response is {node, entries, next_cursor}; next_cursor is null on the last
page. Every response names the answering node; `node` other than this node's id or "all"
is a node this single node does not know (404) until clustering proxies per-node views.
Records still queued for writing (at most a second old) are not yet visible.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import json
from typing import Any

from klein import Klein

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.views import JsonObject, iso, query_param
from objstore.errors import AdminError
from objstore.http.client_bytes import decimal
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.audit_queries import MAX_PAGE, AuditFilter, AuditRecord

FAMILIES = ("audit",)
DEFAULT_LIMIT = 100


# -- query parameters shared by the per-node views ---------------------------------------


def parse_time(request: ObjstoreRequest, name: str) -> float | None:
    text = query_param(request, name)
    if text is None or text == "":
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise AdminError("BadRequest", f"{name} must be an ISO 8601 timestamp.") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def parse_limit(request: ObjstoreRequest, default: int, maximum: int) -> int:
    text = query_param(request, "limit")
    if text is None or text == "":
        return default
    limit = decimal(text)  # the one rule for numbers from clients
    if limit is None or not 1 <= limit <= maximum:
        raise AdminError("BadRequest", f"limit must be an integer within 1..{maximum}.")
    return limit


def check_node(request: ObjstoreRequest, node_id: str) -> bool:
    """True for node=all (answer with a sources array), False for this node; 404 for any
    other node (no peers are known without clustering)."""
    wanted = query_param(request, "node")
    if wanted is None or wanted in ("", node_id):
        return False
    if wanted == "all":
        return True
    raise AdminError("NotFound", f"Unknown node {wanted!r}.")


# -- cursor ----------------------------------------------------------------------------


def encode_cursor(record: AuditRecord) -> str:
    raw = json.dumps([record.ts, record.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[float, int]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        ts, row_id = json.loads(raw)
        if isinstance(row_id, bool) or not isinstance(row_id, int):
            raise ValueError("id")
        return float(ts), row_id
    except (ValueError, TypeError, OverflowError, binascii.Error):
        raise AdminError("BadRequest", "cursor is not a cursor this endpoint returned.") from None


def parse_audit_filter(request: ObjstoreRequest) -> AuditFilter:
    cursor = query_param(request, "cursor")
    return AuditFilter(
        bucket=query_param(request, "bucket") or None,
        operation=query_param(request, "operation") or None,
        user=query_param(request, "user") or None,
        since=parse_time(request, "since"),
        until=parse_time(request, "until"),
        limit=parse_limit(request, DEFAULT_LIMIT, MAX_PAGE),
        before=decode_cursor(cursor) if cursor else None,
    )


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

    def __init__(self, *, gate: AdminGate, meta: MetaStore, node_id: str) -> None:
        self._gate = gate
        self._meta = meta
        self._node_id = node_id

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/audit", methods=["GET"], action=VIEW_SERVER_INFO)
    async def audit(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        everywhere = check_node(request, self._node_id)
        wanted = parse_audit_filter(request)
        # One more row than asked tells whether another page exists.
        rows = await self._meta.query_audit(dataclasses.replace(wanted, limit=wanted.limit + 1))
        page = rows[: wanted.limit]
        more = len(rows) > wanted.limit
        body: dict[str, Any] = {
            "node": self._node_id,
            "entries": [entry_view(r) for r in page],
            "next_cursor": encode_cursor(page[-1]) if more else None,
        }
        if everywhere:
            body["sources"] = [{"node_id": self._node_id, "total": len(page)}]
        return json_body(request, 200, body)

