"""mDNS discovery with a fake zeroconf: what a node announces, what it proposes from what
it hears (TXT url, else address and port; never itself; the static peers too), the
browser thread's handler handing plain data to the reactor, start and stop through the
runner. No socket, no multicast (tests/cluster/test_mdns.py is the real one)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from objstore.cluster.mdns import (
    SERVICE_TYPE,
    Announcement,
    Found,
    MdnsDiscovery,
    announcement_for,
    found_from_info,
    proposed_url,
    valid_base_url,
)
from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.prober import ClusterProber
from objstore.config import Cluster, Server
from objstore.threads import InlinePool

OWN = Announcement(node_id="node-a", url="http://10.0.0.1:9000", addresses=("10.0.0.1",),
                   port=9000)


def result_of(coroutine: Any) -> Any:
    found: list[Any] = []
    Deferred.fromCoroutine(coroutine).addCallback(found.append)
    assert found, "did not finish synchronously"
    return found[0]


@dataclass
class FakeInfo:
    properties: dict[bytes, bytes | None]
    addresses: list[str]
    port: int

    def parsed_addresses(self) -> list[str]:
        return self.addresses


@dataclass
class FakeZeroconf:
    infos: dict[str, FakeInfo] = field(default_factory=dict)
    registered: list[Any] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def register_service(self, info: Any, *, allow_name_change: bool = False) -> None:
        assert allow_name_change  # a name taken by another cluster's node is renamed
        self.registered.append(info)

    def unregister_all_services(self) -> None:
        self.calls.append("unregister")

    def close(self) -> None:
        self.calls.append("close")

    def get_service_info(self, type_: str, name: str, timeout: int = 3000) -> Any:
        assert type_ == SERVICE_TYPE
        return self.infos.get(name)


@dataclass
class FakeBrowser:
    zc: Any
    handler: Any
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class State:
    def __init__(self, name: str) -> None:
        self.name = name


ADDED, UPDATED, REMOVED = State("Added"), State("Updated"), State("Removed")


def discovery(zc: FakeZeroconf, crossed: list[Any], browsers: list[FakeBrowser]
              ) -> MdnsDiscovery:
    def call_from_thread(fn: Any, *args: Any) -> None:
        crossed.append(args)  # only plain data crosses
        fn(*args)

    def browser(zc_: Any, handler: Any) -> FakeBrowser:
        browsers.append(FakeBrowser(zc_, handler))
        return browsers[-1]

    return MdnsDiscovery(announcement=lambda: OWN, static=("http://static:9000/",),
                         scheme="http", call_from_thread=call_from_thread,
                         runner=InlinePool(), zeroconf=lambda: zc, browser=browser,
                         service_info=lambda announcement: ("info", announcement))


def test_start_registers_browses_and_stop_unregisters() -> None:
    zc, crossed, browsers = FakeZeroconf(), [], []
    mdns = discovery(zc, crossed, browsers)
    mdns.startService()
    assert zc.registered == [("info", OWN)]
    assert len(browsers) == 1 and browsers[0].handler == mdns.on_change
    mdns.stopService()
    assert browsers[0].cancelled and zc.calls == ["unregister", "close"]


def test_found_nodes_are_proposed_with_the_static_peers() -> None:
    zc, crossed, browsers = FakeZeroconf(), [], []
    zc.infos = {
        f"node-b.{SERVICE_TYPE}": FakeInfo({b"node_id": b"node-b",
                                            b"url": b"http://10.0.0.2:9100/"},
                                           ["10.0.0.2"], 9100),
        f"node-c.{SERVICE_TYPE}": FakeInfo({b"node_id": b"node-c"}, ["10.0.0.3"], 9000),
        f"node-a.{SERVICE_TYPE}": FakeInfo({b"node_id": b"node-a", b"url": OWN.url.encode()},
                                           ["10.0.0.1"], 9000),
    }
    mdns = discovery(zc, crossed, browsers)
    mdns.startService()
    handler = browsers[0].handler
    for name in zc.infos:
        handler(zeroconf=zc, service_type=SERVICE_TYPE, name=name, state_change=ADDED)
    handler(zeroconf=zc, service_type=SERVICE_TYPE, name=f"gone.{SERVICE_TYPE}",
            state_change=UPDATED)  # no info: nothing crosses
    assert all(isinstance(args[0], Found) for args in crossed)
    assert result_of(mdns.propose()) == ["http://static:9000", "http://10.0.0.2:9100",
                                         "http://10.0.0.3:9000"]  # never itself
    handler(zeroconf=zc, service_type=SERVICE_TYPE, name=f"node-b.{SERVICE_TYPE}",
            state_change=REMOVED)
    assert result_of(mdns.propose()) == ["http://static:9000", "http://10.0.0.3:9000"]
    mdns.stopService()


def test_a_failing_start_leaves_the_static_peers() -> None:
    def broken() -> Any:
        raise OSError("no multicast here")

    mdns = MdnsDiscovery(announcement=lambda: OWN, static=("http://static:9000",),
                         scheme="http", call_from_thread=lambda fn, *a: fn(*a),
                         runner=InlinePool(), zeroconf=broken)
    mdns.startService()
    assert result_of(mdns.propose()) == ["http://static:9000"]
    mdns.stopService()


@pytest.mark.parametrize("url, valid", [
    ("http://10.0.0.2:9000", "http://10.0.0.2:9000"), ("https://n.example/", "https://n.example"),
    ("ftp://x:1", None), ("http://u:p@x:1", None), ("http://x:1/path", None),
    ("http://x:99999", None), ("http://x:1?q=1", None), ("", None), (None, None),
])
def test_only_base_urls_are_taken(url: str | None, valid: str | None) -> None:
    assert valid_base_url(url) == valid


def test_without_a_txt_url_the_address_and_port_are_probed() -> None:
    found = found_from_info("x", {b"node_id": b"n", b"url": b"\xff"}, ["fe80::1"], 9000)
    assert found.url is None and found.node_id == "n"
    assert proposed_url(found, scheme="https") == "https://[fe80::1]:9000"
    assert proposed_url(replace(found, addresses=()), scheme="http") is None


def test_the_announcement() -> None:
    advertised = Cluster(advertise_url="https://10.1.2.3:9443/")
    assert announcement_for(advertised, Server(), "n", lambda: "unused") == Announcement(
        "n", "https://10.1.2.3:9443", ("10.1.2.3",), 9443)
    derived = Server(host="0.0.0.0", port=9100)
    assert announcement_for(Cluster(), derived, "n", lambda: "192.168.1.5") == Announcement(
        "n", "http://192.168.1.5:9100", ("192.168.1.5",), 9100)
    assert OWN.properties() == {"node_id": "node-a", "url": OWN.url, "protocol": "1"}


def test_the_prober_runs_its_discovery_as_a_child() -> None:
    zc, crossed, browsers = FakeZeroconf(), [], []
    mdns = discovery(zc, crossed, browsers)
    asked: list[str] = []

    async def probe(address: str, nonce: str) -> ProbeResult:
        asked.append(address)
        return ProbeResult(status=None)

    membership = Membership("self")
    prober = ClusterProber(membership=membership, discovery=mdns, probe=probe,
                           cluster=Cluster(enabled=True, probe_interval_seconds=1.0),
                           clock=Clock())
    assert mdns.parent is prober
    prober.startService()
    assert zc.registered and asked == ["http://static:9000"]
    prober.stopService()
    assert zc.calls == ["unregister", "close"]
