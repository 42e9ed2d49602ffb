"""The query parameters of the per-node views (GET /admin/audit, /admin/metrics/history):
read once from the request into a plain mapping, so the same filter can be answered here,
sent to a peer as the JSON body of POST /cluster/v1/admin/<family>, or fanned out for
node=all, and parsed by one set of rules wherever it is answered.

Pure: no Twisted, no I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from objstore.admin.views import query_param
from objstore.errors import AdminError
from objstore.http.client_bytes import decimal
from objstore.http.site import ObjstoreRequest

ViewParams = Mapping[str, str]


def query_params(request: ObjstoreRequest) -> dict[str, str]:
    """The first value of every query parameter, as text."""
    found: dict[str, str] = {}
    for raw in (request.args or {}):
        name = bytes(raw).decode("utf-8", "replace")
        value = query_param(request, name)
        if value is not None:
            found.setdefault(name, value)
    return found


def json_params(document: object) -> dict[str, str]:
    """The filter of a proxied view query (a JSON object): its text values; others are
    ignored (rule 14: unknown or mistyped fields do not break an older or newer peer)."""
    if not isinstance(document, dict):
        raise AdminError("BadRequest", "A view query is a JSON object of text values.")
    return {name: value for name, value in document.items()
            if isinstance(name, str) and isinstance(value, str)}


def parse_time(params: ViewParams, name: str) -> float | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise AdminError("BadRequest", f"{name} must be an ISO 8601 timestamp.") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def parse_limit(params: ViewParams, default: int, maximum: int) -> int:
    text = params.get("limit")
    if text is None or text == "":
        return default
    limit = decimal(text)  # the one rule for numbers from clients
    if limit is None or not 1 <= limit <= maximum:
        raise AdminError("BadRequest", f"limit must be an integer within 1..{maximum}.")
    return limit
