"""The per-node views behind a load balancer (spec "Per-node views"): one query of a
node-local family (the audit log, the metrics history) answered here, by one peer, or by
every eligible node at once, according to its `node` parameter.

`NodeViews.answer(family, params)`:

- `node` absent or this node's id: this node's own answer.
- a peer's id: proxied to POST /cluster/v1/admin/<family> (cluster/admin_proxy_routes.py)
  with the filter as the JSON body, through `ClusterClient.view_query`. Unknown node 404;
  known but not eligible 503; no answer (refused, timed out) 502 BadGateway; the peer's
  own 4xx forwarded with its status and message; any other answer of the peer 502.
- "all": the same query to every eligible peer and to this node in parallel, merged by
  `view_merge.merge_sources` (newest first, each row labelled with its node, a `sources`
  array, pagination per source page with a composite cursor). A source that fails is an
  error in `sources`; so is a known peer that is not eligible (dead, untrusted, drifted),
  which is not asked: a node that is down shows in every node=all answer. A malformed
  query (this node's own 400) fails the whole request.

Every answer carries `node`, the node that answered: this node, or the peer a query was
proxied to. On a single node (no membership) `node=all` is this node alone and any other
id is unknown.

`FAMILIES` is the table of families: a new node-local view (notification events, the
replication journal) is one line there and its local answer in `wiring.node_view_sources`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred, FirstError, gatherResults

from objstore.admin.view_params import ViewParams, parse_limit
from objstore.cluster.membership import Membership
from objstore.cluster.view_merge import (
    PeerTarget,
    SourceAnswer,
    ViewFamily,
    Where,
    decode_sources_cursor,
    merge_sources,
    resolve_target,
)
from objstore.errors import ADMIN_ERRORS, AdminError
from objstore.json_input import parse_json
from objstore.meta.audit_queries import MAX_PAGE
from objstore.meta.metrics_queries import MAX_SAMPLES
from objstore.meta.notification_queries import MAX_PAGE as MAX_EVENTS

AUDIT = ViewFamily("audit", "entries", paged=True, default_limit=100, max_limit=MAX_PAGE)
METRICS_HISTORY = ViewFamily("metrics-history", "samples", paged=False, default_limit=1000,
                             max_limit=MAX_SAMPLES)
NOTIFICATION_EVENTS = ViewFamily("notification-events", "events", paged=True,
                                 default_limit=100, max_limit=MAX_EVENTS)
REPLICATION_JOURNAL = ViewFamily("replication-journal", "entries", paged=True,
                                 default_limit=100, max_limit=MAX_PAGE)
# One line per node-local family (the path segment of its proxy route is its name).
FAMILIES: dict[str, ViewFamily] = {family.name: family for family in (
    AUDIT, METRICS_HISTORY, NOTIFICATION_EVENTS, REPLICATION_JOURNAL)}

UNUSABLE = ""  # the address of a known peer that is not eligible: not asked

# A family's answer on this node: {rows_key: [...], "next_cursor"?, "cursors"?} without
# `node`; `cursors` (one per row, paged families) lets node=all resume a source mid-page.
LocalView = Callable[[ViewParams], Awaitable[dict[str, Any]]]


class ViewClient(Protocol):
    """What the views ask of the cluster client (`ClusterClient.view_query`)."""

    async def view_query(self, base_url: str, family: str, params: ViewParams) -> Any:
        """The peer's answer (`status`, `body`); raises when there is none."""


class NodeViews:
    def __init__(self, *, node_id: str, local: Mapping[str, LocalView],
                 membership: Membership | None = None,
                 client: ViewClient | None = None) -> None:
        self.node_id = node_id
        self._local = local
        self._membership = membership
        self._client = client

    async def local(self, family: str, params: ViewParams) -> dict[str, Any]:
        """This node's own answer with its row cursors (what a proxied query answers)."""
        view = self._local.get(family)
        if view is None or family not in FAMILIES:
            raise AdminError("NotFound", f"This node has no view {family!r}.")
        return {"node": self.node_id, **await view(without_node(params))}

    async def answer(self, family: str, params: ViewParams) -> dict[str, Any]:
        """The answer of GET /admin/<family> for `params` (the query, `node` included)."""
        peers = self._membership.peers.values() if self._membership is not None else ()
        target = resolve_target(params.get("node"), self.node_id, peers)
        query = without_node(params)
        if target is Where.LOCAL:
            body = await self.local(family, query)
            body.pop("cursors", None)
            return body
        if isinstance(target, PeerTarget):
            return await self._proxied(family, target, query)
        return await self._everywhere(FAMILIES[family], query)

    async def _proxied(self, family: str, target: PeerTarget,
                       query: ViewParams) -> dict[str, Any]:
        body = await self._peer_answer(family, target, query)
        body.pop("cursors", None)
        body["node"] = target.node_id
        return body

    async def _peer_answer(self, family: str, target: PeerTarget,
                           query: ViewParams) -> dict[str, Any]:
        """The peer's whole answer (row cursors included), or the AdminError to answer."""
        if self._client is None:
            raise AdminError("ServiceUnavailable", "This node cannot reach its peers.")
        try:
            exchange = await self._client.view_query(target.address, family, query)
        except Exception as error:  # noqa: BLE001 (no answer: refused, timed out, TLS)
            raise AdminError("BadGateway", f"Node {target.node_id!r} did not answer: "
                             f"{type(error).__name__}.") from None
        return peer_body(target.node_id, exchange.status, exchange.body)

    async def _everywhere(self, family: ViewFamily, query: ViewParams) -> dict[str, Any]:
        limit = parse_limit(query, family.default_limit, family.max_limit)
        cursor = query.get("cursor") if family.paged else None
        cursors = decode_sources_cursor(cursor) if cursor else None
        peers = self._membership.eligible_peers() if self._membership is not None else ()
        sources = [(self.node_id, None), *((p.node_id or "", p.address) for p in peers)]
        sources += [(node_id, UNUSABLE) for node_id in self._ineligible_ids(sources)]
        if cursors is not None:
            sources = [source for source in sources if source[0] in cursors]
        asked = [Deferred.fromCoroutine(self._source(family, node_id, address, query,
                                                     cursors))
                 for node_id, address in sources]
        try:
            answers: Sequence[SourceAnswer] = await gatherResults(asked, consumeErrors=True)
        except FirstError as error:  # this node's own refusal (peers' are source errors)
            error.subFailure.raiseException()
        return {"node": self.node_id,
                **merge_sources(answers, family, limit=limit, cursors=cursors)}

    def _ineligible_ids(self, asked: Sequence[tuple[str, str | None]]) -> list[str]:
        """Known peers that cannot be asked (dead, untrusted, drifted): reported as
        sources with an error, so a node that is down shows in every node=all answer."""
        if self._membership is None:
            return []
        seen = {node_id for node_id, _ in asked}
        known = {p.node_id for p in self._membership.peers.values()
                 if p.node_id is not None and not p.is_self}
        return sorted(known - seen)

    async def _source(self, family: ViewFamily, node_id: str, address: str | None,
                      query: ViewParams, cursors: Mapping[str, str | None] | None
                      ) -> SourceAnswer:
        asked = dict(query)
        asked.pop("cursor", None)
        if cursors is not None:
            resume = cursors.get(node_id)
            if resume is None:  # exhausted on an earlier page
                return SourceAnswer(node_id, {family.rows_key: [], "next_cursor": None})
            if resume:
                asked["cursor"] = resume
        if address is UNUSABLE:
            return SourceAnswer(node_id, error="ServiceUnavailable: the node is known but "
                                "not eligible (see GET /admin/cluster)", status=503)
        if address is None:  # this node: a malformed query fails the whole request
            return SourceAnswer(node_id, await self.local(family.name, asked))
        try:
            body = await self._peer_answer(family.name, PeerTarget(node_id, address), asked)
        except AdminError as error:
            return SourceAnswer(node_id, error=f"{error.code}: {error.message}",
                                status=error.status)
        return SourceAnswer(node_id, body)


def without_node(params: ViewParams) -> dict[str, str]:
    return {name: value for name, value in params.items() if name != "node"}


_CODE_OF_STATUS = {status: code for code, status in reversed(ADMIN_ERRORS.items())}


def peer_body(node_id: str, status: int, body: bytes) -> dict[str, Any]:
    """A peer's answer to a proxied view query: its JSON object, or the error to answer
    (its own 4xx with its status and message; anything else 502)."""
    try:
        document = parse_json(body)
    except (ValueError, UnicodeDecodeError):
        document = None
    if status == 200 and isinstance(document, dict):
        return document
    message = document.get("message") if isinstance(document, dict) else None
    code = document.get("error") if isinstance(document, dict) else None
    if 400 <= status < 500 and isinstance(message, str):
        if not (isinstance(code, str) and ADMIN_ERRORS.get(code) == status):
            code = _CODE_OF_STATUS.get(status)
        if code is not None:
            raise AdminError(code, message)
    raise AdminError("BadGateway", f"Node {node_id!r} answered HTTP {status}"
                     + (f": {message}" if isinstance(message, str) else "."))
