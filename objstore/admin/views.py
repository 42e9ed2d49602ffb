"""JSON in and out of the admin API: request bodies, query parameters, typed fields, the
response shape of every IAM resource, and the JSON error handlers a mounted admin app
installs.

Shapes follow the contract: secrets appear only in the creation response of a credential;
counts only in list and get responses; timestamps are ISO 8601 with an offset. Request
bodies are small JSON objects that the listener already holds in memory (anything larger
than the in-memory spool is refused with 413 before it is read), so nothing here blocks.
"""

from __future__ import annotations

from typing import Any

from objstore.errors import AdminError
from objstore.http.site import ObjstoreRequest
from objstore.iam.authorizer import compile_grants
from objstore.iam.containment import administrator_equivalent
from objstore.iam.identity import Principal
from objstore.json_input import parse_json
from objstore.meta.iam_records import (
    EffectiveGrant,
    GrantRecord,
    TeamRecord,
    TeamSummary,
    UserSummary,
)
from objstore.meta.records import CredentialRecord, UserRecord
from objstore.utc_dates import iso_milliseconds

JsonObject = dict[str, Any]

# ISO 8601 with an explicit UTC offset, millisecond precision (cut, not rounded).
iso = iso_milliseconds


# -- request bodies ----------------------------------------------------------------------


def read_json(request: ObjstoreRequest) -> JsonObject:
    """The request body as a JSON object; an empty body is {}."""
    spool = request.spool
    if spool is None or spool.length == 0:
        return {}
    if not spool.in_memory:
        raise AdminError("PayloadTooLarge", "The request body is too large for this endpoint.")
    try:
        value = parse_json(spool.memory_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise AdminError("BadRequest", f"The request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise AdminError("BadRequest", "The request body must be a JSON object.")
    return value


def query_param(request: ObjstoreRequest, name: str) -> str | None:
    """The first value of query parameter `name`, or None."""
    values = (request.args or {}).get(name.encode())
    if not values:
        return None
    return bytes(values[0]).decode("utf-8", "replace")


def optional_str(body: JsonObject, name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise AdminError("BadRequest", f"{name} must be a string.")
    return value


def required_str(body: JsonObject, name: str) -> str:
    value = optional_str(body, name)
    if value is None:
        raise AdminError("BadRequest", f"{name} is required.")
    return value


def optional_bool(body: JsonObject, name: str) -> bool | None:
    value = body.get(name)
    if value is None or isinstance(value, bool):
        return value
    raise AdminError("BadRequest", f"{name} must be true or false.")


def optional_int(body: JsonObject, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdminError("BadRequest", f"{name} must be an integer.")
    return value


# -- responses ---------------------------------------------------------------------------


def no_content(request: ObjstoreRequest) -> bytes:
    request.setResponseCode(204)
    return b""


def user_view(user: UserRecord) -> JsonObject:
    return {
        "user_id": user.user_id,
        "username": user.username,
        "description": user.description,
        "is_root": user.is_root,
        "created_at": iso(user.created_at),
    }


def user_summary_view(summary: UserSummary) -> JsonObject:
    return {
        **user_view(summary.user),
        "credential_count": summary.credential_count,
        "team_count": summary.team_count,
        "grant_count": summary.grant_count,
    }


def member_view(user: UserRecord) -> JsonObject:
    return {
        "user_id": user.user_id,
        "username": user.username,
        "description": user.description,
        "is_root": user.is_root,
    }


def identity_view(principal: Principal, actions: list[str]) -> JsonObject:
    return {
        "user": {
            "user_id": principal.user_id,
            "username": principal.username,
            "is_root": principal.is_root,
        },
        "effective_actions": actions,
    }


def credential_view(
    credential: CredentialRecord, *, with_user: bool = True, with_secret: bool = False
) -> JsonObject:
    view: JsonObject = {"access_key_id": credential.access_key_id}
    if with_secret:  # the creation response only
        view["secret_access_key"] = credential.secret_access_key
    view.update(
        description=credential.description,
        created_at=iso(credential.created_at),
        active=credential.active,
    )
    if with_user:
        view["user_id"] = credential.user_id
    return view


def team_view(team: TeamRecord) -> JsonObject:
    return {
        "team_id": team.team_id,
        "name": team.name,
        "description": team.description,
        "created_at": iso(team.created_at),
    }


def team_summary_view(summary: TeamSummary) -> JsonObject:
    return {
        **team_view(summary.team),
        "member_count": summary.member_count,
        "grant_count": summary.grant_count,
    }


def team_ref_view(team: TeamRecord) -> JsonObject:
    return {"team_id": team.team_id, "name": team.name, "description": team.description}


def grant_view(grant: GrantRecord) -> JsonObject:
    return {
        "grant_id": grant.grant_id,
        "name": grant.name,
        "description": grant.description,
        "document": grant.document,
        "created_at": iso(grant.created_at),
        "updated_at": iso(grant.updated_at or grant.created_at),
    }


def grant_list_view(grant: GrantRecord) -> JsonObject:
    return {
        "grant_id": grant.grant_id,
        "name": grant.name,
        "description": grant.description,
        "created_at": iso(grant.created_at),
    }


def grant_ref_view(grant: GrantRecord) -> JsonObject:
    return {"grant_id": grant.grant_id, "name": grant.name, "description": grant.description}


def effective_view(entry: EffectiveGrant) -> JsonObject:
    """A grant that applies to a user, why, and whether it alone makes the user an
    administrator (everything AdministratorAccess allows; not part of the contract's shape,
    added to it)."""
    return {
        **grant_ref_view(entry.grant),
        "source": entry.source,
        "administrator_equivalent": administrator_equivalent(compile_grants([entry])),
    }


# -- errors ------------------------------------------------------------------------------


