"""GET /admin/export and POST /admin/import (Klein, mounted by `AdminApi`).

An export exposes every user, grant, credential (secrets on request) and bucket setting, and
an import can create credentials and change every grant, so both are for root users and
for callers whose grants allow the action `*` (AdministratorAccess) with no Deny on any
svc:Manage* action; anyone else gets 403 AccessDenied. Within that, a non-root caller's
export shows only the secrets of users it covers, and its import changes only what the IAM
engine lets it change (no more than the caller holds).

Query parameters: `sections=users,grants` (both endpoints; default all), `include_secrets=
true` (export), `mode=skip|overwrite|dry_run` and `dry_run=true` (import). The import body
is an export document; bodies above the in-memory spool are read and parsed on the IO pool,
up to MAX_IMPORT_BYTES.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import (
    ADMINISTRATOR,
    MANAGE_CREDENTIALS,
    MANAGE_GRANTS,
    MANAGE_TEAMS,
    MANAGE_USERS,
    VIEW_SERVER_INFO,
    AdminGate,
    authorized_route,
)
from objstore.admin.views import query_param, read_json
from objstore.engine.transfer import SKIP, TransferService, parse_sections
from objstore.errors import AdminError
from objstore.http.caller import client_caller
from objstore.http.shield import ShieldedKlein
from objstore.http.site import ObjstoreRequest
from objstore.iam.authorizer import Authorizer
from objstore.iam.identity import Principal
from objstore.json_input import parse_json
from objstore.threads import Runner

if TYPE_CHECKING:
    pass

FAMILIES = ("export", "import")
MANAGE_ACTIONS = (MANAGE_USERS, MANAGE_TEAMS, MANAGE_GRANTS, MANAGE_CREDENTIALS,
                  VIEW_SERVER_INFO)
MAX_IMPORT_BYTES = 64 * 1024 * 1024
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


def query_flag(request: ObjstoreRequest, name: str) -> bool:
    value = (query_param(request, name) or "").lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise AdminError("BadRequest", f"{name} must be true or false.")


def parse_large_json(data: bytes) -> Any:
    """(IO thread) A large import document."""
    try:
        return parse_json(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AdminError("BadRequest", f"The request body is not valid JSON: {exc}") from None


class TransferRoutes:
    app = ShieldedKlein()  # changes complete even when the client leaves
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, transfer: TransferService, authorizer: Authorizer,
                 io: Runner) -> None:
        self._gate = gate
        self._transfer = transfer
        self._authorizer = authorizer
        self._io = io

    def resource(self) -> object:
        return self.app.resource()

    async def _every_manage_action(self, caller: Principal) -> None:
        for action in MANAGE_ACTIONS:
            if not await self._authorizer.allowed(caller, action, "*"):
                raise AdminError("AccessDenied", f"Export and import need every svc:* action; "
                                                 f"{action} is denied.")

    @authorized_route(app, "/export", methods=["GET"], action=ADMINISTRATOR,
                      check=_every_manage_action)
    async def export(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        sections = parse_sections(query_param(request, "sections"))
        include_secrets = query_flag(request, "include_secrets")
        document = await self._transfer.export(client_caller(request, caller), sections,
                                               include_secrets=include_secrets)
        if include_secrets:
            request.setHeader("Cache-Control", "no-store")
        return json_body(request, 200, document)

    @authorized_route(app, "/import", methods=["POST"], action=ADMINISTRATOR,
                      check=_every_manage_action)
    async def import_document(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        sections = parse_sections(query_param(request, "sections"))
        mode = query_param(request, "mode") or SKIP
        dry_run = query_flag(request, "dry_run")
        document = await self._read_document(request)
        report = await self._transfer.import_document(
            client_caller(request, caller), document, mode=mode, dry_run=dry_run, sections=sections)
        return json_body(request, 200, report)

    async def _read_document(self, request: ObjstoreRequest) -> Any:
        spool = request.spool
        if spool is None or spool.in_memory:
            return read_json(request)
        if spool.length > MAX_IMPORT_BYTES:
            raise AdminError("PayloadTooLarge",
                             f"An import document is at most {MAX_IMPORT_BYTES} bytes.")
        spool.seek(0)
        data = await self._io.run(spool.read, spool.length)
        return await self._io.run(parse_large_json, data)
