"""Cluster membership: what one probe of a peer means, each peer's state, the one
eligibility predicate and the worker leader.

A probe is GET /cluster/v1/ping with a fresh nonce. Its outcome (`ProbeResult`, filled by
the cluster client after it checked the nonce MAC and the fingerprint with
`objstore.cluster.auth`) gets a verdict (the spec's table):

    200, valid nonce MAC        authenticated (config_ok: the fingerprints match)
    200, MAC missing or wrong   alive but untrusted
    403                         the peer refuses our secret: alive, config_ok = false
    404                         a legacy peer: alive, excluded, one warning per transition
    409                         the probed address is this node (a loop); so is an
                                authenticated 200 naming this node
    no answer, any other status a failure

A peer is dead after 2 consecutive failures and alive again at the first success; between
the two its last live view is kept. "authenticated" means authenticated by the current live
view: it is cleared when the peer dies and set again only by a successful probe, so a
returning peer is re-authenticated before it is trusted. last_seen is the last answer of
any verdict but a failure (and the probe latency is that answer's round trip); the
protocol version is that of the last authenticated ping (rule 14, gate.py). Discovery
only proposes addresses; trust comes from authentication, never from being found.

Pruning (`prune_due`): a peer that gave no authenticated answer for [cluster]
peer_prune_days (`Cluster.peer_prune_total_seconds`; counted from discovery when it never
gave one) is pruned: a dead static or DNS peer, and just as well an mDNS node of another
cluster that answers 403 to every probe. A pruned peer stays in the view, marked
`pruned`, with its last_seen: never eligible, no longer blocking the tombstone purge
(views.py), still probed, and back (`PeerEvent.RETURNED`) at its first authenticated
answer. Discovery proposing it again changes nothing (`propose` keeps a known address's
state); a pruned address discovery no longer proposes is forgotten. The prober
records the pruned peers across restarts (cluster/pruned_peers.py).

`eligible` is THE predicate (authenticated AND config_ok): fan-out, quorum, the size gate,
the capacity guard, anti-entropy and proxied admin queries all ask it, through
`Membership.eligible_peers`, which also counts a node reachable under two addresses once.

State changes return events (`PeerEvent`) for the caller to log once per transition. Pure:
no I/O, no Twisted, no clock (callers pass `now`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TypeVar

T = TypeVar("T")

DEAD_AFTER_FAILURES = 2
CLOCK_OFFSET_WARNING_SECONDS = 1.0


class Verdict(enum.Enum):
    AUTHENTICATED = "authenticated"
    UNTRUSTED = "untrusted"
    REJECTED = "rejected"  # 403
    LEGACY = "legacy"  # 404
    SELF = "self"  # 409, or a 200 naming this node
    FAILED = "failed"


class PeerEvent(enum.Enum):
    ALIVE = "alive"
    DEAD = "dead"
    AUTHENTICATED = "authenticated"
    UNTRUSTED = "untrusted"  # answered without a valid nonce MAC
    CONFIG_DRIFT = "config_drift"  # config_ok became false
    LEGACY = "legacy"  # answered 404 to ping
    LOOP = "loop"  # the address is this node
    CLOCK_SKEW = "clock_skew"  # offset past CLOCK_OFFSET_WARNING_SECONDS
    RETURNED = "returned"  # a pruned peer answered an authenticated probe


@dataclass(frozen=True, slots=True)
class ProbeResult:
    status: int | None  # None: no HTTP answer (refused, timed out, TLS failure)
    mac_ok: bool = False  # the nonce MAC verified under one of our secrets
    fingerprint_ok: bool = False  # the peer's config_fingerprint matches ours
    node_id: str | None = None  # from the ping body, or public health after 403/404
    disk_total: int | None = None
    disk_available: int | None = None
    max_seq: int | None = None
    clock_offset_seconds: float | None = None  # see `clock_offset`
    protocol: int | None = None  # the ping's `protocol` (None: not reported)
    latency_seconds: float | None = None  # from sending the ping to its answer


def clock_offset(sent_at: float, received_at: float, peer_time: float) -> float:
    """The peer's clock minus ours, taking its answer as given halfway through the probe."""
    return peer_time - (sent_at + received_at) / 2


def classify(result: ProbeResult, self_id: str) -> Verdict:
    # A 200 naming this node counts only when authenticated: an impostor must not be able
    # to make a real peer's address look like a loop.
    if result.status == 409 or (result.status == 200 and result.mac_ok
                                and result.node_id == self_id):
        return Verdict.SELF
    if result.status == 200:
        return Verdict.AUTHENTICATED if result.mac_ok else Verdict.UNTRUSTED
    if result.status == 403:
        return Verdict.REJECTED
    if result.status == 404:
        return Verdict.LEGACY
    return Verdict.FAILED


@dataclass(frozen=True, slots=True)
class PeerState:
    address: str
    first_seen: float  # when discovery first proposed it
    node_id: str | None = None
    alive: bool = False
    authenticated: bool = False
    config_ok: bool | None = None  # None: not known yet
    last_verdict: Verdict | None = None  # of the last answer (failures keep it)
    consecutive_failures: int = 0
    last_seen: float | None = None
    disk_total: int | None = None
    disk_available: int | None = None
    max_seq: int | None = None
    clock_offset_seconds: float | None = None
    protocol: int | None = None  # of the last authenticated ping (rule 14)
    probe_latency_seconds: float | None = None  # of the last answered probe
    last_authenticated: float | None = None  # of the last authenticated answer
    pruned: bool = False  # no authenticated answer for peer_prune_days (`prune_due`)

    @property
    def legacy(self) -> bool:
        return self.last_verdict is Verdict.LEGACY

    @property
    def is_self(self) -> bool:
        return self.last_verdict is Verdict.SELF


def eligible(peer: PeerState) -> bool:
    """THE eligibility predicate: authenticated AND config_ok (a pruned peer is neither:
    its first authenticated answer un-prunes it)."""
    return peer.authenticated and peer.config_ok is True and not peer.pruned


def observe(peer: PeerState, result: ProbeResult, *, now: float,
            self_id: str) -> tuple[PeerState, tuple[PeerEvent, ...]]:
    """The peer's state after one probe, and the transitions worth a log line."""
    verdict = classify(result, self_id)
    after = _failed(peer) if verdict is Verdict.FAILED else _answered(peer, result, verdict,
                                                                       now)
    return after, transitions(peer, after, verdict)


def _failed(peer: PeerState) -> PeerState:
    failures = peer.consecutive_failures + 1
    if failures < DEAD_AFTER_FAILURES:
        return replace(peer, consecutive_failures=failures)  # the last live view stands
    return replace(peer, consecutive_failures=failures, alive=False, authenticated=False)


def _answered(peer: PeerState, result: ProbeResult, verdict: Verdict,
              now: float) -> PeerState:
    authenticated = verdict is Verdict.AUTHENTICATED
    config_ok = {Verdict.AUTHENTICATED: result.fingerprint_ok, Verdict.REJECTED: False
                 }.get(verdict, peer.config_ok)
    return replace(
        peer, alive=verdict is not Verdict.SELF, authenticated=authenticated,
        config_ok=config_ok, last_verdict=verdict, consecutive_failures=0, last_seen=now,
        last_authenticated=now if authenticated else peer.last_authenticated,
        pruned=peer.pruned and not authenticated,
        node_id=result.node_id or peer.node_id,
        disk_total=_fresh(result.disk_total, peer.disk_total, authenticated),
        disk_available=_fresh(result.disk_available, peer.disk_available, authenticated),
        max_seq=_fresh(result.max_seq, peer.max_seq, authenticated),
        clock_offset_seconds=_fresh(result.clock_offset_seconds, peer.clock_offset_seconds,
                                    authenticated),
        protocol=_fresh(result.protocol, peer.protocol, authenticated),
        # Measured here, not reported: any answer's timing is this node's own figure.
        probe_latency_seconds=(result.latency_seconds if result.latency_seconds is not None
                               else peer.probe_latency_seconds))


def _fresh(reported: T | None, known: T | None, trusted: bool) -> T | None:
    # Figures are taken only from an authenticated answer: an impostor can not make the
    # cluster look full (capacity guard) or rewind a cursor.
    return reported if trusted and reported is not None else known


def transitions(before: PeerState, after: PeerState,
                verdict: Verdict) -> tuple[PeerEvent, ...]:
    """One event per change of state, never one per probe."""
    events = [event for event, was, now in (
        (PeerEvent.ALIVE, before.alive, after.alive),
        (PeerEvent.AUTHENTICATED, before.authenticated, after.authenticated),
        (PeerEvent.LEGACY, before.legacy, after.legacy),
        (PeerEvent.LOOP, before.is_self, after.is_self),
        (PeerEvent.CONFIG_DRIFT, before.config_ok is False, after.config_ok is False),
        (PeerEvent.CLOCK_SKEW, _skewed(before), _skewed(after)),
    ) if now and not was]
    if before.alive and not after.alive and not after.is_self:
        events.append(PeerEvent.DEAD)
    if verdict is Verdict.UNTRUSTED and before.last_verdict is not Verdict.UNTRUSTED:
        events.append(PeerEvent.UNTRUSTED)
    if before.pruned and not after.pruned:
        events.append(PeerEvent.RETURNED)
    return tuple(events)


def _skewed(peer: PeerState) -> bool:
    offset = peer.clock_offset_seconds
    return offset is not None and abs(offset) > CLOCK_OFFSET_WARNING_SECONDS


def prune_due(peer: PeerState, *, now: float, prune_seconds: float) -> bool:
    """No authenticated answer (dead, or alive but refusing us: 403, 404, no MAC) for
    longer than [cluster] peer_prune_days, counted from discovery when it never gave one.
    A loop entry (this node) is never pruned, nor a peer already pruned."""
    if peer.authenticated or peer.pruned or peer.is_self:
        return False
    since = peer.last_authenticated if peer.last_authenticated is not None else peer.first_seen
    return now - since > prune_seconds


def worker_leader(self_id: str, eligible_ids: Iterable[str]) -> str:
    """The node that runs cluster-wide singletons: the lowest node_id among the eligible
    nodes, this one included (so a single node always leads)."""
    return min({self_id, *eligible_ids})


@dataclass
class Membership:
    """This node's view of its peers, keyed by the address discovery proposed."""

    self_id: str
    peers: dict[str, PeerState] = field(default_factory=dict)

    def propose(self, addresses: Iterable[str], *, now: float) -> tuple[PeerState, ...]:
        """What discovery found now: new addresses join (a known one keeps its state,
        pruned or not); pruned peers it no longer proposes are forgotten (returned)."""
        proposed = set(addresses)
        for address in sorted(proposed):
            self.peers.setdefault(address, PeerState(address=address, first_seen=now))
        forgotten = tuple(p for p in self.peers.values()
                          if p.pruned and p.address not in proposed)
        for peer in forgotten:
            del self.peers[peer.address]
        return forgotten

    def observe(self, address: str, result: ProbeResult, *,
                now: float) -> tuple[PeerEvent, ...]:
        peer = self.peers.get(address) or PeerState(address=address, first_seen=now)
        self.peers[address], events = observe(peer, result, now=now, self_id=self.self_id)
        return events

    def prune(self, *, now: float, prune_seconds: float) -> tuple[PeerState, ...]:
        """Mark the peers `prune_due`; returns them (each once: a pruned peer is not due)."""
        gone = tuple(replace(p, pruned=True) for p in self.peers.values()
                     if prune_due(p, now=now, prune_seconds=prune_seconds))
        for peer in gone:
            self.peers[peer.address] = peer
        return gone

    def restore_pruned(self, remembered: Iterable[PeerState]) -> None:
        """Peers pruned before a restart (cluster/pruned_peers.py): each is known again,
        pruned, unless this view already heard an authenticated answer from it."""
        for peer in remembered:
            known = self.peers.get(peer.address)
            if known is None:
                self.peers[peer.address] = replace(peer, pruned=True, alive=False,
                                                   authenticated=False)
            elif known.last_authenticated is None:
                self.peers[peer.address] = replace(
                    known, pruned=True, node_id=known.node_id or peer.node_id,
                    first_seen=min(known.first_seen, peer.first_seen),
                    last_seen=known.last_seen or peer.last_seen,
                    last_authenticated=peer.last_authenticated)

    def eligible_peers(self) -> tuple[PeerState, ...]:
        """One eligible peer per node id (the most recently seen), never this node."""
        chosen: dict[str, PeerState] = {}
        for peer in self.peers.values():
            node_id = peer.node_id
            if not eligible(peer) or node_id is None or node_id == self.self_id:
                continue
            held = chosen.get(node_id)
            if held is None or (peer.last_seen or 0.0) > (held.last_seen or 0.0):
                chosen[node_id] = peer
        return tuple(chosen[node_id] for node_id in sorted(chosen))

    def eligible_node_count(self) -> int:
        """Eligible nodes, this one included: what the write gate counts."""
        return 1 + len(self.eligible_peers())

    def live_node_count(self) -> int:
        """Live nodes (trusted or not), this one included, each node id once."""
        ids = {p.node_id or p.address for p in self.peers.values()
               if p.alive and not p.pruned and p.node_id != self.self_id}
        return 1 + len(ids)

    def worker_leader(self) -> str:
        return worker_leader(self.self_id, (p.node_id or "" for p in self.eligible_peers()))
