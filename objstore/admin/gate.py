"""Authorization of the admin API, declared with each route: `authorized_route` wraps
Klein's `app.route` so that a handler runs only for a caller who passed the admin gate with
the route's action, and receives that caller (the verified `Principal`). A handler can not
forget its check, and the action an endpoint needs is read where the endpoint is declared.

The gate itself (per-IP rate limit, SigV4, per-credential rate limit, then the svc:*
action on "*"; root passes) is `AdminApi.authorize`, handed to every family of routes as
`gate`. The actions are also kept by endpoint (`declared_actions`), so that a request with a
body is authorized before its body is read. Endpoints that must never pass it (GET
/admin/health, GET /admin/metrics) are declared with plain `app.route`.

This module owns the names of the admin actions; it must never authorize anything itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import wraps
from typing import Any, Protocol

from klein import Klein

from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal

VIEW_SERVER_INFO = "svc:ViewServerInfo"
MANAGE_USERS = "svc:ManageUsers"
MANAGE_TEAMS = "svc:ManageTeams"
MANAGE_GRANTS = "svc:ManageGrants"
MANAGE_CREDENTIALS = "svc:ManageCredentials"
CREATE_ARCHIVE = "svc:CreateArchive"
CREATE_PRESIGNED_URL = "svc:CreatePresignedUrl"
# Root, or a grant allowing every action (AdministratorAccess): the policy language has no
# action for settings, quotas, export or import.
ADMINISTRATOR = "*"
AUTHENTICATED = None  # any authenticated caller (GET /admin/me)

# Authenticate, then authorize the svc:* action (None: authentication only).
AdminGate = Callable[[ObjstoreRequest, "str | None"], Awaitable[Principal]]
# A further check of the caller the route declares beside its action.
CallerCheck = Callable[[Any, Principal], Awaitable[None]]
GatedHandler = Callable[..., Awaitable[bytes]]


# The action each gated route declares, by Klein app and endpoint (the handler's name): read
# to authorize a request with a body before the body is read. Keyed by the app's URL map,
# which the copies Klein binds to each instance share.
_DECLARED: dict[int, dict[str, str | None]] = {}


def declared_actions(app: Klein) -> Mapping[str, str | None]:
    """The gated endpoints of `app` and the action each needs (None: authentication only)."""
    return _DECLARED.get(id(app.url_map), {})


class Gated(Protocol):
    """A family of admin routes: it holds the gate its routes pass."""

    _gate: AdminGate


def authorized_route(
    app: Klein,
    path: str,
    *,
    methods: list[str],
    action: str | None,
    check: CallerCheck | None = None,
) -> Callable[[GatedHandler], GatedHandler]:
    """`app.route(path, methods=methods)` for `handler(self, request, caller, **url_args)`,
    run once the caller has passed the gate for `action` (and `check(self, caller)`, when
    given, has not raised)."""

    def decorator(handler: GatedHandler) -> GatedHandler:
        _DECLARED.setdefault(id(app.url_map), {})[handler.__name__] = action

        @app.route(path, methods=methods)
        @wraps(handler)
        async def gated(self: Gated, request: ObjstoreRequest, *args: Any, **kwargs: Any
                        ) -> bytes:
            caller = await self._gate(request, action)
            if check is not None:
                await check(self, caller)
            return await handler(self, request, caller, *args, **kwargs)

        return gated

    return decorator
