"""The membership loop on a Clock with a fake probe: discovery (static, DNS A/AAAA and SRV
re-resolved at every tick), events once per transition, failures that never stop the
timer, pruning. No socket, no sleep."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from objstore.cluster.membership import Membership, PeerEvent, PeerState, ProbeResult
from objstore.cluster.prober import (
    ClusterProber,
    DnsDiscovery,
    StaticDiscovery,
    SystemResolver,
    base_url,
    discovery_for,
)
from objstore.config import Cluster
from objstore.threads import InlinePool

NOW = 1_700_000_000.0
A, B = "http://a.test:9000", "http://b.test:9000"
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, peers=(A, B),
                  probe_interval_seconds=5.0, peer_prune_days=1.0)


def authenticated(node_id: str) -> ProbeResult:
    return ProbeResult(status=200, mac_ok=True, fingerprint_ok=True, node_id=node_id,
                       disk_total=10, disk_available=5, max_seq=1)


FAILED = ProbeResult(status=None)


@dataclass
class FakeProbe:
    """Answers per address (the last one repeats); records the (address, nonce) asked."""

    answers: dict[str, list[ProbeResult | Exception]]
    asked: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(self, address: str, nonce: str) -> ProbeResult:
        self.asked.append((address, nonce))
        queue = self.answers.get(address, [FAILED])
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


@dataclass
class FakeResolver:
    a: list[list[str]] = field(default_factory=list)
    srv: list[list[tuple[str, int]]] = field(default_factory=list)
    calls: int = 0

    async def addresses(self, name: str) -> list[str]:
        self.calls += 1
        return self.a.pop(0) if len(self.a) > 1 else self.a[0]

    async def services(self, name: str) -> list[tuple[str, int]]:
        self.calls += 1
        return self.srv.pop(0) if len(self.srv) > 1 else self.srv[0]


class Prober:
    def __init__(self, probe: FakeProbe, discovery: Any = None,
                 cluster: Cluster = CLUSTER) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.events: list[tuple[str, PeerEvent]] = []
        self.membership = Membership("node-self")
        nonces = iter(f"nonce-{i:012d}" for i in range(10_000))
        self.service = ClusterProber(
            membership=self.membership, discovery=discovery or StaticDiscovery(cluster.peers),
            probe=probe, cluster=cluster, clock=self.clock, on_event=self._note,
            nonce=lambda: next(nonces))

    def _note(self, peer: PeerState, event: PeerEvent) -> None:
        self.events.append((peer.address, event))

    def start(self) -> None:
        self.service.startService()  # the first tick runs at once

    def ticks(self, count: int) -> None:
        for _ in range(count):
            self.clock.advance(CLUSTER.probe_interval_seconds)


def test_every_peer_is_probed_each_tick_with_a_fresh_nonce() -> None:
    probe = FakeProbe({A: [authenticated("node-a")], B: [authenticated("node-b")]})
    prober = Prober(probe)
    prober.start()
    prober.ticks(2)
    assert sorted({a for a, _ in probe.asked}) == [A, B] and len(probe.asked) == 6
    assert len({nonce for _, nonce in probe.asked}) == 6
    assert [p.node_id for p in prober.membership.eligible_peers()] == ["node-a", "node-b"]


def test_events_are_reported_once_per_transition() -> None:
    probe = FakeProbe({A: [authenticated("node-a"), FAILED], B: [FAILED]})
    prober = Prober(probe)
    prober.start()
    prober.ticks(5)
    a_events = [e for address, e in prober.events if address == A]
    assert a_events == [PeerEvent.ALIVE, PeerEvent.AUTHENTICATED, PeerEvent.DEAD]
    assert not [e for address, e in prober.events if address == B]  # never alive
    peer = prober.membership.peers[A]
    assert not peer.alive and peer.last_seen == NOW  # dead peers keep last_seen


def test_a_probe_that_raises_is_a_failure_and_the_timer_goes_on() -> None:
    probe = FakeProbe({A: [RuntimeError("bug"), authenticated("node-a")], B: [FAILED]})
    prober = Prober(probe)
    prober.start()
    assert prober.membership.peers[A].consecutive_failures == 1
    prober.ticks(1)
    assert prober.membership.peers[A].authenticated


def test_a_failing_discovery_still_probes_the_known_peers() -> None:
    class Flaky:
        calls = 0

        async def propose(self) -> list[str]:
            self.calls += 1
            if self.calls > 1:
                raise OSError("resolver down")
            return [A]

    probe = FakeProbe({A: [authenticated("node-a")]})
    prober = Prober(probe, Flaky())
    prober.start()
    prober.ticks(2)
    assert [a for a, _ in probe.asked] == [A, A, A]


def test_dns_names_are_resolved_again_at_every_tick() -> None:
    resolver = FakeResolver(a=[["10.0.0.1"], ["10.0.0.1", "fd00::2"]])
    discovery = DnsDiscovery("nodes.example", resolver, "http", 9000)
    prober = Prober(FakeProbe({}), discovery)
    prober.start()
    assert sorted(prober.membership.peers) == ["http://10.0.0.1:9000"]
    prober.ticks(1)
    assert resolver.calls == 2
    assert sorted(prober.membership.peers) == ["http://10.0.0.1:9000", "http://[fd00::2]:9000"]


def result_of(coroutine: Any) -> Any:
    found: list[Any] = []
    Deferred.fromCoroutine(coroutine).addBoth(found.append)
    return found[0]


def test_srv_records_give_targets_and_ports() -> None:
    resolver = FakeResolver(srv=[[("n1.example.", 9001), ("n2.example.", 9002)]])
    discovery = DnsDiscovery("_objstore._tcp.example", resolver, "https", 9000,
                             static=("https://n1.example:9001/",))
    assert result_of(discovery.propose()) == ["https://n1.example:9001",
                                              "https://n2.example:9002"]


def test_discovery_follows_the_config() -> None:
    resolver = FakeResolver(a=[["10.0.0.7"]])
    dns = discovery_for(replace(CLUSTER, discovery="dns", dns_name="nodes",
                                advertise_url="https://me.example:9443", peers=()),
                        resolver)
    assert result_of(dns.propose()) == ["https://10.0.0.7:9443"]
    # without advertise_url: the listener's scheme (a TLS listener: https), port 9000
    unadvertised = replace(CLUSTER, discovery="dns", dns_name="nodes", peers=())
    assert result_of(discovery_for(unadvertised, resolver).propose()) == [
        "http://10.0.0.7:9000"]
    assert result_of(discovery_for(unadvertised, resolver, listener_tls=True).propose()) == [
        "https://10.0.0.7:9000"]
    static = discovery_for(CLUSTER, resolver)
    assert result_of(static.propose()) == [A, B]
    mdns = discovery_for(replace(CLUSTER, discovery="mdns"), resolver)
    assert result_of(mdns.propose()) == [A, B]  # without an mDNS discovery: static only
    built = StaticDiscovery(("http://m.test:9000",))
    assert discovery_for(replace(CLUSTER, discovery="mdns"), resolver, mdns=lambda: built) is built


def test_the_system_resolver_resolves_literals_on_its_runner() -> None:
    resolver = SystemResolver(InlinePool())
    assert result_of(resolver.addresses("127.0.0.1")) == ["127.0.0.1"]
    assert base_url("http", "::1", 9000) == "http://[::1]:9000"


def test_unseen_peers_are_pruned() -> None:
    class Once:
        calls = 0

        async def propose(self) -> list[str]:
            self.calls += 1
            return [A] if self.calls == 1 else []

    probe = FakeProbe({A: [authenticated("node-a"), FAILED]})
    prober = Prober(probe, Once())
    pruned: list[PeerState] = []
    prober.service.prune_listeners.append(pruned.append)
    prober.start()
    assert A in prober.membership.peers
    day = 24 * 3600.0
    prober.clock.advance(day - 10)  # one tick (the timer runs late on a jumped clock)
    assert A in prober.membership.peers and pruned == []
    prober.clock.advance(20)  # pruned: kept, marked (discovery proposes nothing now)
    assert prober.membership.peers[A].pruned
    assert [(p.address, p.node_id) for p in pruned] == [(A, "node-a")]
    prober.ticks(1)  # pruned and no longer proposed: forgotten
    assert A not in prober.membership.peers
    assert [(p.address, p.node_id) for p in pruned] == [(A, "node-a")]  # once


def test_a_pruned_peer_discovery_still_proposes_stays_pruned_and_returns_when_it_answers(
        ) -> None:
    answers = [authenticated("node-a"), FAILED]
    probe = FakeProbe({A: answers})
    prober = Prober(probe)
    pruned: list[PeerState] = []
    prober.service.prune_listeners.append(pruned.append)
    prober.start()
    seen = prober.membership.peers[A].last_seen
    prober.clock.advance(24 * 3600.0 + 10)
    prober.ticks(3)  # re-proposed at every tick: still pruned, its last_seen kept
    peer = prober.membership.peers[A]
    assert peer.pruned and peer.last_seen == seen
    assert sorted(p.address for p in pruned) == [A, B]  # each once (b never answered)
    assert prober.membership.eligible_peers() == ()
    answers[:] = [authenticated("node-a")]
    prober.ticks(1)
    assert not prober.membership.peers[A].pruned
    assert [p.node_id for p in prober.membership.eligible_peers()] == ["node-a"]


def test_the_timer_stops_with_the_service() -> None:
    probe = FakeProbe({A: [authenticated("node-a")], B: [FAILED]})
    prober = Prober(probe)
    prober.start()
    asked = len(probe.asked)
    prober.service.stopService()
    prober.ticks(3)
    assert len(probe.asked) == asked

