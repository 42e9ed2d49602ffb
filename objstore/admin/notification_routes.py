"""/admin/notifications (Klein, mounted by `AdminApi`):

- GET /admin/notifications/events (svc:ViewServerInfo): this node's queued, delivered and
  failed notification deliveries, newest first. Query: bucket, status (pending |
  delivered | failed), target (a target name or an ad-hoc webhook URL), limit (default
  100, at most 1000), cursor (the `next_cursor` of the previous page), node (absent or
  this node, a peer's id, or "all": cluster/node_views.py). Answer {node, events,
  next_cursor}; each event carries its attempts and every attempt's error.
- POST /admin/notifications/test-webhook (administrators): sends a test event
  (`s3:TestEvent`, as AWS sends when a configuration is stored) to {"target": name} or
  to {"url": ..., "auth_token"?: ..., "tls_verify"?: bool}; answers 200 {delivered,
  error?, target}: a target that refuses is a result, not an admin error.

`events_page` is this node's answer to a filter, wherever it was asked (here, or by a peer
through POST /cluster/v1/admin/notification-events).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from klein import Klein

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import ADMINISTRATOR, VIEW_SERVER_INFO, AdminGate, authorized_route
from objstore.admin.view_params import ViewParams, parse_limit, query_params
from objstore.admin.views import JsonObject, iso, read_json
from objstore.cluster.node_views import NOTIFICATION_EVENTS, NodeViews
from objstore.errors import AdminError
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.notification_queries import STATUSES, NotificationEvent, NotificationFilter
from objstore.notify.records import event_time
from objstore.notify.targets.base import DeliveryError, Event, Target
from objstore.notify.targets.webhook import WebhookSettings, check_url

FAMILIES = ("notifications",)


def parse_events_filter(params: ViewParams) -> NotificationFilter:
    status = params.get("status") or ""
    if status and status not in STATUSES:
        raise AdminError("BadRequest", f"status must be one of {', '.join(STATUSES)}.")
    cursor = params.get("cursor")
    before = None
    if cursor:
        if not cursor.isdigit() or len(cursor) > 19:
            raise AdminError("BadRequest", "cursor is not a cursor this endpoint returned.")
        before = int(cursor)
    return NotificationFilter(bucket=params.get("bucket") or "", status=status,
                              target=params.get("target") or "", before_id=before,
                              limit=parse_limit(params, NOTIFICATION_EVENTS.default_limit,
                                                NOTIFICATION_EVENTS.max_limit))


async def events_page(meta: MetaStore, params: ViewParams) -> dict[str, Any]:
    """One page: {events, next_cursor, cursors} (`cursors`: after each event, node=all)."""
    wanted = parse_events_filter(params)
    rows = await meta.query_notification_events(dataclasses.replace(wanted,
                                                                    limit=wanted.limit + 1))
    page = rows[: wanted.limit]
    more = len(rows) > wanted.limit
    return {"events": [event_view(r) for r in page],
            "next_cursor": str(page[-1].id) if more else None,
            "cursors": [str(r.id) for r in page]}


def event_view(row: NotificationEvent) -> JsonObject:
    try:
        body: Any = json.loads(row.body)
    except ValueError:
        body = None
    return {
        "id": row.id,
        "time": iso(row.created_at),
        "sequencer": f"{row.seq:016X}",
        "target": row.target,
        "bucket": row.bucket,
        "key": row.key,
        "event_name": row.event_name,
        "status": row.status,
        "attempts": row.attempts,
        "errors": [{"time": iso(float(e.get("at", 0))), "attempt": e.get("attempt"),
                    "error": e.get("error")} for e in row.errors if isinstance(e, dict)],
        "next_attempt_at": iso(row.next_attempt_at) if row.status == "pending" else None,
        "updated_at": iso(row.updated_at),
        "event": body,
    }


def test_event(bucket: str, now: float) -> Event:
    body = json.dumps({"Service": "objstore", "Event": "s3:TestEvent",
                       "Time": event_time(now), "Bucket": bucket,
                       "RequestId": "", "HostId": ""}).encode()
    return Event(body=body, event_name="s3:TestEvent", bucket=bucket, key="",
                 event_time=event_time(now), deleted=False)


class NotificationRoutes:
    app = Klein()
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, meta: MetaStore, node_id: str,
                 views: NodeViews | None = None,
                 target: Callable[[str], Target | None] = lambda name: None,
                 webhook: Callable[[WebhookSettings], Target] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        """`target(name)`: a configured target; `webhook(settings)`: a one-off webhook."""
        self._gate = gate
        self._views = views if views is not None else NodeViews(
            node_id=node_id,
            local={NOTIFICATION_EVENTS.name: lambda params: events_page(meta, params)})
        self._target = target
        self._webhook = webhook
        self._clock = clock

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/notifications/events", methods=["GET"], action=VIEW_SERVER_INFO)
    async def events(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        return json_body(request, 200, await self._views.answer(NOTIFICATION_EVENTS.name,
                                                                query_params(request)))

    @authorized_route(app, "/notifications/test-webhook", methods=["POST"],
                      action=ADMINISTRATOR)
    async def test_webhook(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        body = read_json(request)
        target, temporary = self._chosen(body)
        now = self._clock() if self._clock is not None else 0.0
        answer: JsonObject = {"target": target.name, "delivered": True}
        try:
            await target.deliver(test_event(str(body.get("bucket") or "test"), now))
        except DeliveryError as refused:
            answer = {**answer, "delivered": False, "error": str(refused)}
        finally:
            if temporary:
                await target.close()
        return json_body(request, 200, answer)

    def _chosen(self, body: JsonObject) -> tuple[Target, bool]:
        name, url = body.get("target"), body.get("url")
        if (name is None) == (url is None):
            raise AdminError("BadRequest", "Give either target (a configured target's "
                             "name) or url.")
        if name is not None:
            found = self._target(name) if isinstance(name, str) else None
            if found is None:
                raise AdminError("NotFound", f"No notification target named {name!r}.")
            return found, False
        problem = check_url(url)
        if problem or self._webhook is None:
            raise AdminError("BadRequest", f"url {problem or 'cannot be used here'}.")
        token = body.get("auth_token", "")
        verify = body.get("tls_verify", True)
        if not isinstance(token, str) or not isinstance(verify, bool):
            raise AdminError("BadRequest", "auth_token must be a string and tls_verify a "
                             "boolean.")
        return self._webhook(WebhookSettings(name=str(url), url=str(url), auth_token=token,
                                             tls_verify=verify)), True


__all__ = ["FAMILIES", "NotificationRoutes", "event_view", "events_page"]
