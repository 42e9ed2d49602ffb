"""The replication admin routes (Klein, mounted by `AdminApi`):

- GET /admin/replication/journal: this node's journal newest first (the
  `replication-journal` per-node family: node=<id>|all, cluster/node_views.py). Filters
  bucket, key, status (PENDING, COMPLETED, FAILED, SKIPPED); limit (default 100, at most
  1000) and cursor (the `next_cursor` of the previous page). svc:ViewServerInfo.
- POST /admin/replication/credentials/{name} {"access_key_id", "secret_access_key"}:
  store (or replace) a credential a rule's <CredentialRef> names; the answer never holds
  the secret. DELETE removes it (404 when unknown). GET /admin/replication/credentials
  lists names and access key ids. Administrator only.
- POST /admin/replication/retry/{id}: a journal entry (FAILED, or PENDING and backing
  off) due again now with its attempts from zero. Administrator only.
- POST /admin/replication/existing/{bucket}: journal every current version of the
  bucket that a rule with ExistingObjectReplication covers (objects written before the
  rule). Administrator only.

`journal_page` is this node's answer to a filter (here or asked by a peer).
"""

from __future__ import annotations

from typing import Any

from klein import Klein

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import ADMINISTRATOR, VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.view_params import ViewParams, parse_limit, query_params
from objstore.admin.views import JsonObject, iso, no_content, read_json
from objstore.cluster.node_views import REPLICATION_JOURNAL, NodeViews
from objstore.errors import AdminError
from objstore.http.caller import client_caller
from objstore.http.client_bytes import signed_decimal
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.replication_queries import JournalEntry, JournalFilter
from objstore.replication.existing import ExistingObjects
from objstore.replication.service import ReplicationConfigService

FAMILIES = ("replication",)
STATUSES = ("PENDING", "COMPLETED", "FAILED", "SKIPPED")


def _id(text: str | None, what: str) -> int:
    value = signed_decimal(text or "")
    if value is None or value < 1 or value > 2**62:
        raise AdminError("BadRequest", f"{what} is not a journal entry id.")
    return value


def parse_journal_filter(params: ViewParams) -> JournalFilter:
    status = params.get("status") or None
    if status is not None and status.upper() not in STATUSES:
        raise AdminError("BadRequest", f"status must be one of {', '.join(STATUSES)}.")
    cursor = params.get("cursor")
    return JournalFilter(
        bucket=params.get("bucket") or None, key=params.get("key") or None,
        status=status.upper() if status else None,
        before_id=_id(cursor, "cursor") if cursor else None,
        limit=parse_limit(params, REPLICATION_JOURNAL.default_limit,
                          REPLICATION_JOURNAL.max_limit))


def entry_view(entry: JournalEntry) -> JsonObject:
    return {
        "id": entry.id, "time": iso(entry.created_at), "updated_at": iso(entry.updated_at),
        "kind": entry.kind, "operation": entry.operation or None, "bucket": entry.bucket,
        "key": entry.key, "version_id": entry.version_id, "size": entry.size,
        "etag": entry.etag or None, "rule_id": entry.rule_id,
        "destination": {"endpoint": entry.endpoint, "bucket": entry.dest_bucket,
                        "region": entry.region, "credential_ref": entry.credential_ref,
                        "storage_class": entry.storage_class},
        "status": entry.status, "attempts": entry.attempts,
        "next_attempt_at": iso(entry.next_attempt_at) if entry.status == "PENDING" else None,
        "last_error": entry.last_error,
    }


async def journal_page(meta: MetaStore, params: ViewParams) -> dict[str, Any]:
    """One page of this node's journal: {entries, total, next_cursor, cursors}."""
    wanted = parse_journal_filter(params)
    limit = wanted.limit
    rows, total = await meta.journal_list(JournalFilter(
        bucket=wanted.bucket, key=wanted.key, status=wanted.status,
        before_id=wanted.before_id, limit=limit + 1))
    page = rows[:limit]
    return {
        "entries": [entry_view(e) for e in page], "total": total,
        "next_cursor": str(page[-1].id) if len(rows) > limit else None,
        "cursors": [str(e.id) for e in page],
    }


class ReplicationRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, meta: MetaStore, node_id: str,
                 replication: ReplicationConfigService, existing: ExistingObjects,
                 views: NodeViews | None = None) -> None:
        self._gate = gate
        self._meta = meta
        self._replication = replication
        self._existing = existing
        self._views = views if views is not None else NodeViews(
            node_id=node_id,
            local={REPLICATION_JOURNAL.name: lambda params: journal_page(meta, params)})

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/replication/journal", methods=["GET"], action=VIEW_SERVER_INFO)
    async def journal(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        return json_body(request, 200, await self._views.answer(REPLICATION_JOURNAL.name,
                                                                query_params(request)))

    @authorized_route(app, "/replication/credentials", methods=["GET"], action=ADMINISTRATOR)
    async def list_credentials(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        known = await self._replication.credentials()
        return json_body(request, 200, {"credentials": [
            {"name": name, "access_key_id": entry["access_key_id"]}
            for name, entry in sorted(known.items())]})

    @authorized_route(app, "/replication/credentials/<name>", methods=["POST"],
                      action=ADMINISTRATOR)
    async def put_credential(self, request: ObjstoreRequest, caller: Principal,
                             name: str) -> bytes:
        body = read_json(request)
        await self._replication.put_credential(client_caller(request, caller), name, body)
        return json_body(request, 200, {"name": name,
                                        "access_key_id": body["access_key_id"]})

    @authorized_route(app, "/replication/credentials/<name>", methods=["DELETE"],
                      action=ADMINISTRATOR)
    async def delete_credential(self, request: ObjstoreRequest, caller: Principal,
                                name: str) -> bytes:
        await self._replication.delete_credential(client_caller(request, caller), name)
        return no_content(request)

    @authorized_route(app, "/replication/retry/<entry_id>", methods=["POST"],
                      action=ADMINISTRATOR)
    async def retry(self, request: ObjstoreRequest, _caller: Principal,
                    entry_id: str) -> bytes:
        entry = await self._meta.journal_retry(_id(entry_id, "The path"),
                                               self._existing.now())
        if entry is None:
            raise AdminError("NotFound", f"No journal entry {entry_id} on this node.")
        return json_body(request, 200, entry_view(entry))

    @authorized_route(app, "/replication/existing/<bucket>", methods=["POST"],
                      action=ADMINISTRATOR)
    async def existing(self, request: ObjstoreRequest, _caller: Principal,
                       bucket: str) -> bytes:
        added = await self._existing.journal_bucket(bucket)
        return json_body(request, 200, {"bucket": bucket, "journaled": added})


__all__ = ["FAMILIES", "ReplicationRoutes", "entry_view", "journal_page"]
