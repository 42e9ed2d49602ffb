"""The per-node views behind a load balancer, as data (spec "Per-node views"): which node a
query's `node` parameter names, and how the answers of several nodes merge for node=all.

- `resolve_target(wanted, self_id, peers)`: absent or this node's id -> LOCAL; "all" ->
  ALL; the id of an eligible peer -> that peer (`PeerTarget`, the address to proxy to);
  a node known to the membership but not eligible -> 503 ServiceUnavailable; any other
  -> 404 NotFound.
- `merge_sources(answers, family, limit=, cursors=)`: the rows of every source, each
  labelled with its source's node_id, newest first by parsed timestamp (ties: the order of
  the sources, then each source's own order), the newest `limit` kept; a `sources` array
  with per source a `total` (the rows it answered) or an `error`. Pagination is per source
  page: each source answers its own page of `limit` rows, and the composite `next_cursor`
  resumes each source right after its last row kept (a source none of whose rows was kept
  resumes where it was; an exhausted one is not asked again, nor is a source that failed:
  its error is in that page's `sources`, and a client paging to the end gets there).
- The composite cursor is opaque to clients: base64url of {"sources": {node_id: cursor or
  null}}; "" is a source's first page, null an exhausted source. A source missing from it
  (a node that joined after the first page) is left out of the following pages.

Pure: no Twisted, no I/O, no clock.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import enum
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from objstore.cluster.membership import PeerState, eligible
from objstore.errors import AdminError
from objstore.json_input import parse_json

ALL_NODES = "all"


class Where(enum.Enum):
    LOCAL = "local"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class PeerTarget:
    node_id: str
    address: str


@dataclass(frozen=True, slots=True)
class ViewFamily:
    """One node-local view: the path segment of its proxy route (POST
    /cluster/v1/admin/<name>), the key of its rows in an answer, whether it pages with a
    cursor, its page size (default and largest) and the timestamp field of its rows."""

    name: str
    rows_key: str
    paged: bool
    default_limit: int
    max_limit: int
    time_field: str = "time"


@dataclass(frozen=True, slots=True)
class SourceAnswer:
    """What one node answered for node=all: its JSON body, or why there is none."""

    node_id: str
    body: Mapping[str, Any] | None = None
    error: str | None = None
    status: int | None = None  # the HTTP status of a refusal, None when no answer


def resolve_target(wanted: str | None, self_id: str,
                   peers: Iterable[PeerState]) -> Where | PeerTarget:
    if wanted is None or wanted in ("", self_id):
        return Where.LOCAL
    if wanted == ALL_NODES:
        return Where.ALL
    known = [peer for peer in peers if peer.node_id == wanted]
    if not known:
        raise AdminError("NotFound", f"Unknown node {wanted!r}.")
    usable = [peer for peer in known if eligible(peer)]
    if not usable:
        raise AdminError("ServiceUnavailable", f"Node {wanted!r} is known but not eligible "
                         "(not alive, not authenticated or configuration drift): see "
                         "GET /admin/cluster.")
    chosen = max(usable, key=lambda peer: peer.last_seen or 0.0)
    return PeerTarget(wanted, chosen.address)


# -- the composite cursor -------------------------------------------------------------------


def encode_sources_cursor(cursors: Mapping[str, str | None]) -> str:
    raw = json.dumps({"sources": dict(sorted(cursors.items()))}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_sources_cursor(text: str) -> dict[str, str | None]:
    """The per-source cursors of a node=all cursor; 400 for anything else."""
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        document = parse_json(raw)
        sources = document["sources"]
        if not isinstance(sources, dict) or not all(
                isinstance(node, str) and (value is None or isinstance(value, str))
                for node, value in sources.items()):
            raise ValueError("sources")
    except (ValueError, TypeError, KeyError, binascii.Error):
        raise AdminError("BadRequest", "cursor is not a cursor this endpoint returned "
                         "for node=all.") from None
    return dict(sources)


# -- the merge ------------------------------------------------------------------------------


def row_time(row: Mapping[str, Any], field: str) -> float:
    """A row's timestamp (ISO 8601; no offset means UTC); -inf when it has none."""
    text = row.get(field)
    if not isinstance(text, str):
        return -math.inf
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return -math.inf
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _rows(answer: SourceAnswer, family: ViewFamily) -> list[dict[str, Any]]:
    rows = answer.body.get(family.rows_key) if answer.body is not None else None
    if not isinstance(rows, list):
        return []
    return [{**row, "node_id": answer.node_id} for row in rows if isinstance(row, dict)]


def merge_sources(answers: Sequence[SourceAnswer], family: ViewFamily, *, limit: int,
                  cursors: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The node=all answer (without `node`) of the sources' answers, in source order.
    `cursors`: the per-source cursors the sources were asked with (None: first page)."""
    incoming = cursors or {}
    valid = [(answer, _rows(answer, family)) for answer in answers if answer.error is None]
    ranked = sorted(
        ((row_time(row, family.time_field), source_index, row_index, row)
         for source_index, (_answer, rows) in enumerate(valid)
         for row_index, row in enumerate(rows)),
        key=lambda item: (-item[0], item[1], item[2]))
    kept = ranked[:limit]
    kept_per_source = [0] * len(valid)
    for _time, source_index, _row_index, _row in kept:
        kept_per_source[source_index] += 1
    document: dict[str, Any] = {family.rows_key: [row for *_, row in kept],
                                "sources": _sources(answers, valid)}
    if family.paged:
        following: dict[str, str | None] = {answer.node_id: None for answer in answers}
        for (answer, rows), count in zip(valid, kept_per_source, strict=True):
            following[answer.node_id] = _resume(answer, len(rows), count,
                                                incoming.get(answer.node_id, ""))
        done = all(value is None for value in following.values())
        document["next_cursor"] = None if done else encode_sources_cursor(following)
    return document


def _sources(answers: Sequence[SourceAnswer],
             valid: Sequence[tuple[SourceAnswer, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    totals = {answer.node_id: len(rows) for answer, rows in valid}
    entries: list[dict[str, Any]] = []
    for answer in answers:
        if answer.error is None:
            entries.append({"node_id": answer.node_id, "total": totals[answer.node_id]})
        else:
            entries.append({"node_id": answer.node_id, "error": answer.error,
                            "status": answer.status})
    return entries


def _resume(answer: SourceAnswer, answered: int, kept: int, asked_with: str | None
            ) -> str | None:
    """Where a source's next page starts: after its last row kept."""
    assert answer.body is not None
    if kept == answered:
        following = answer.body.get("next_cursor")
        return following if isinstance(following, str) else None
    if kept == 0:
        return asked_with
    row_cursors = answer.body.get("cursors")
    if isinstance(row_cursors, list) and len(row_cursors) == answered \
            and isinstance(row_cursors[kept - 1], str):
        return str(row_cursors[kept - 1])
    return asked_with  # a source without row cursors is asked for the same page again
