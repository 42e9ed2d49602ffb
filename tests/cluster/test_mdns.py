"""mDNS discovery between real daemons: two nodes with `discovery = "mdns"` and no static
peers find each other on the local network (multicast), then authenticate each other by
the ping as any discovered peer. Each run uses a secret of its own, so nodes of another
run announcing on the same network are found but never trusted. Skipped (with the reason)
where multicast does not reach this machine's own sockets."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator

import pytest

from tests.cluster.harness import Node, peers_of, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b")
PROBE_TYPE = "_objstore-test._tcp.local."


def multicast_works() -> str | None:
    """None when an mDNS announcement of one zeroconf instance is heard by another in this
    process; otherwise why not."""
    try:
        from zeroconf import ServiceBrowser, ServiceInfo, Zeroconf  # noqa: PLC0415
    except ImportError as exc:
        return f"python-zeroconf is not installed: {exc}"
    heard = threading.Event()
    try:
        speaker, listener = Zeroconf(), Zeroconf()
    except OSError as exc:
        return f"no multicast socket: {exc}"
    browser = None
    try:
        name = f"probe-{secrets.token_hex(4)}.{PROBE_TYPE}"
        speaker.register_service(ServiceInfo(PROBE_TYPE, name, parsed_addresses=["127.0.0.1"],
                                             port=9, server="probe.local."))

        def handler(**_: object) -> None:
            heard.set()

        browser = ServiceBrowser(listener, PROBE_TYPE, handlers=[handler])
        if not heard.wait(5.0):
            return "an mDNS announcement was not heard within 5 s (multicast blocked)"
        return None
    except Exception as exc:  # noqa: BLE001 (any failure: no usable multicast)
        return f"mDNS does not work here: {exc}"
    finally:
        if browser is not None:
            browser.cancel()
        speaker.close()
        listener.close()


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    reason = multicast_works()
    if reason is not None:
        pytest.skip(reason)
    secret = f'"mdns-{secrets.token_hex(16)}"'
    overrides = {name: {"discovery": '"mdns"', "peers": "[]", "secret": secret}
                 for name in NAMES}
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        yield started


def test_nodes_find_each_other_by_mdns_and_authenticate(nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        other = next(n for n in nodes.values() if n is not node)
        wait_for(f"node {name} finds and trusts {other.node_id}",
                 lambda node=node, other=other: any(
                     p["node_id"] == other.node_id and p["eligible"]
                     for p in peers_of(node)), deadline=30.0)
        found = next(p for p in peers_of(node) if p["node_id"] == other.node_id)
        assert found["address"] == other.daemon.endpoint  # announced from its listener
    for node in nodes.values():  # its own announcement is never proposed (no loop entry)
        document = node.admin.get("/cluster").json
        assert [n["state"] for n in document["nodes"]].count("self") == 1
    for node in nodes.values():
        assert node.admin.get("/cluster").json["gate"] == "open"
