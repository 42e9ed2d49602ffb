"""The membership loop: every [cluster] probe_interval_seconds, discovery proposes peer
addresses, every known peer is pinged with a fresh nonce (in parallel), and each answer
goes to `Membership.observe`; its events are reported once per transition, and peers
without an authenticated answer for peer_prune_days are pruned (membership.py: kept,
marked pruned, still probed; forgotten once discovery stops proposing them).

Discovery only proposes base URLs; trust comes from the probe (nonce MAC), never from
being found. Kinds ([cluster] discovery):

    static  the [cluster] peers list
    dns     [cluster] dns_name re-resolved at every tick, plus the static peers: a name
            starting with "_" is an SRV name (_objstore._tcp.example.com: each target and
            port), any other name is resolved to its A/AAAA addresses, reached on the
            scheme and port of [cluster] advertise_url (default: the listener's scheme,
            https under [server.tls], and 9000)
    mdns    `cluster/mdns.py` MdnsDiscovery (python-zeroconf bridged to the reactor): the
            nodes heard on the local network, plus the static peers; it announces this
            node too. A discovery that is also a service (mdns) is a child of the
            prober: it runs in the probing worker only.

A tick never dies (objstore/timers.py safe_timer) and never stops on one peer: a
discovery that fails leaves the known peers probed; a probe that raises is a failure.
This module keeps no state of its own beyond the `Membership` it is given.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from twisted.application.service import IService, MultiService
from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import Logger

from objstore.cluster.auth import new_nonce
from objstore.cluster.membership import Membership, PeerEvent, PeerState, ProbeResult
from objstore.config import Cluster
from objstore.threads import Runner
from objstore.timers import ReactorClock, safe_timer

log = Logger()

DEFAULT_PORT = 9000
Probe = Callable[[str, str], Awaitable[ProbeResult]]  # (base_url, nonce) -> result
EventSink = Callable[[PeerState, PeerEvent], None]
_WARNINGS = frozenset({PeerEvent.DEAD, PeerEvent.UNTRUSTED, PeerEvent.CONFIG_DRIFT,
                       PeerEvent.LEGACY, PeerEvent.LOOP, PeerEvent.CLOCK_SKEW})


# -- discovery ------------------------------------------------------------------------------


class Resolver(Protocol):
    async def addresses(self, name: str) -> list[str]:
        """The A and AAAA addresses of `name`."""

    async def services(self, name: str) -> list[tuple[str, int]]:
        """The (target, port) of each SRV record of `name`."""


class Discovery(Protocol):
    async def propose(self) -> list[str]:
        """Base URLs of possible peers (without trailing slash)."""


@dataclass(frozen=True)
class StaticDiscovery:
    peers: tuple[str, ...]

    async def propose(self) -> list[str]:
        return [peer.rstrip("/") for peer in self.peers]


@dataclass(frozen=True)
class DnsDiscovery:
    """[cluster] dns_name, resolved anew at each call, and the static peers."""

    name: str
    resolver: Resolver
    scheme: str = "http"
    port: int = DEFAULT_PORT
    static: tuple[str, ...] = ()

    async def propose(self) -> list[str]:
        found = await StaticDiscovery(self.static).propose()
        if self.name.startswith("_"):
            for target, port in await self.resolver.services(self.name):
                found.append(base_url(self.scheme, target.rstrip("."), port))
        else:
            for address in await self.resolver.addresses(self.name):
                found.append(base_url(self.scheme, address, self.port))
        return list(dict.fromkeys(found))


def base_url(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


@dataclass
class SystemResolver:
    """A/AAAA through the system's resolver (getaddrinfo, on `runner`'s thread: it
    blocks); SRV through twisted.names (the resolver of /etc/resolv.conf)."""

    runner: Runner
    _names: Any = field(default=None, repr=False)

    async def addresses(self, name: str) -> list[str]:
        infos = await self.runner.run(socket.getaddrinfo, name, None,
                                      type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    async def services(self, name: str) -> list[tuple[str, int]]:
        if self._names is None:
            from twisted.names import client  # noqa: PLC0415 (only dns discovery needs it)
            self._names = client.createResolver()
        answers, _authority, _additional = await self._names.lookupService(name)
        return [(str(record.payload.target), int(record.payload.port))
                for record in answers if hasattr(record.payload, "port")]


def discovery_for(cluster: Cluster, resolver: Resolver, *,
                  mdns: Callable[[], Discovery] | None = None,
                  listener_tls: bool = False) -> Discovery:
    """The discovery [cluster] discovery names (`mdns` builds the mDNS one). DNS peers
    are reached on advertise_url's scheme, else on the listener's (`listener_tls`: https,
    as the peers' listeners serve TLS like this one's)."""
    if cluster.discovery == "dns":
        advertised = urlsplit(cluster.advertise_url) if cluster.advertise_url else None
        own = "https" if listener_tls else "http"
        scheme = advertised.scheme if advertised and advertised.scheme else own
        port = (advertised.port if advertised and advertised.port else DEFAULT_PORT)
        return DnsDiscovery(cluster.dns_name, resolver, scheme, port, cluster.peers)
    if cluster.discovery == "mdns":
        if mdns is not None:
            return mdns()
        log.warn("[cluster] discovery = mdns without an mDNS discovery: only the static "
                 "peers are probed")
    return StaticDiscovery(cluster.peers)


# -- the loop ---------------------------------------------------------------------------------


def log_event(peer: PeerState, event: PeerEvent) -> None:
    """One log line per transition of a peer."""
    emit = log.warn if event in _WARNINGS else log.info
    emit("cluster peer {address} ({node_id}): {event}", address=peer.address,
         node_id=peer.node_id or "unknown", event=event.value)


class ClusterProber(MultiService):
    """Probes every known peer each probe_interval_seconds, on its timer."""

    def __init__(self, *, membership: Membership, discovery: Discovery, probe: Probe,
                 cluster: Cluster, clock: ReactorClock, on_event: EventSink = log_event,
                 nonce: Callable[[], str] = new_nonce,
                 after_tick: Callable[[], None] | None = None) -> None:
        """`after_tick`: called once the membership took in a tick's answers (the worker
        leader's rule, cluster/leadership.py)."""
        super().__init__()
        self.membership = membership
        self._discovery = discovery
        self._probe = probe
        self._cluster = cluster
        self._clock = clock
        self._on_event = on_event
        self._nonce = nonce
        self._after_tick = after_tick
        # Called with each peer the membership prunes, after it is gone (anti-entropy
        # forgets its cursor).
        self.prune_listeners: list[Callable[[PeerState], object]] = []
        if IService.providedBy(discovery):  # registers and browses while probing
            discovery.setServiceParent(self)  # type: ignore[attr-defined]
        safe_timer(cluster.probe_interval_seconds, self.tick, clock=clock,
                   what="cluster probe").setServiceParent(self)

    async def tick(self) -> None:
        await self._discover()
        addresses = sorted(self.membership.peers)
        results: Sequence[ProbeResult] = await gatherResults(
            [Deferred.fromCoroutine(self._probe_one(address)) for address in addresses])
        now = self._clock.seconds()
        for address, result in zip(addresses, results, strict=True):
            for event in self.membership.observe(address, result, now=now):
                self._on_event(self.membership.peers[address], event)
        for gone in self.membership.prune(now=now,
                                          prune_seconds=self._cluster.peer_prune_total_seconds):
            log.warn("cluster peer {address} ({node_id}) pruned: no authenticated answer "
                     "for peer_prune_days; not eligible, no longer blocking the tombstone "
                     "purge, back at its first authenticated answer", address=gone.address,
                     node_id=gone.node_id or "unknown")
            for listener in self.prune_listeners:
                listener(gone)
        if self._after_tick is not None:
            self._after_tick()

    async def _discover(self) -> None:
        try:
            proposed = await self._discovery.propose()
        except Exception as exc:  # noqa: BLE001 (the known peers are still probed)
            log.warn("cluster discovery failed: {exc}", exc=exc)
            return
        for forgotten in self.membership.propose(proposed, now=self._clock.seconds()):
            log.info("cluster peer {address} ({node_id}) forgotten: pruned and no longer "
                     "found by discovery", address=forgotten.address,
                     node_id=forgotten.node_id or "unknown")

    async def _probe_one(self, address: str) -> ProbeResult:
        try:
            return await self._probe(address, self._nonce())
        except Exception:  # noqa: BLE001 (a probe that raises is a failed probe)
            log.failure("probing cluster peer {address} failed", address=address)
            return ProbeResult(status=None)
