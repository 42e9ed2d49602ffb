"""A TCP relay for partitioning real daemons on loopback without a packet filter, and a
cluster whose every peer link goes through one.

`Relay()` listens on 127.0.0.1 (`port`, `url`) and forwards each connection to
`target_port` (set once the daemon behind it has its port; until then connections are
closed at once). `cut()` closes every relayed connection and closes new ones as soon as
they are accepted (the peer sees its connection reset: unreachable); `heal()` forwards
again; `close()` stops it. A node whose peers list relays instead of the peers' ports is
cut from them while the test client still reaches it directly.

`relayed_cluster(...)` starts a cluster (harness.start_cluster) whose link (from, to)
goes through relay `relays[from, to]`; `isolate(relays, name)` cuts every link of one
node, `heal_all(relays)` heals them all.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence

import pytest

from tests.cluster.harness import Node, start_cluster, wait_until_trusted


class Relay:
    def __init__(self) -> None:
        self.target_port: int | None = None
        self._cut = False
        self._closed = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut or self.target_port is None
                target = self.target_port
            if refused or target is None:
                _close(inbound)
                continue
            try:
                outbound = socket.create_connection(("127.0.0.1", target), timeout=5)
            except OSError:
                _close(inbound)
                continue
            outbound.settimeout(None)
            with self._lock:
                if self._cut:
                    _close(inbound)
                    _close(outbound)
                    continue
                self._open.update((inbound, outbound))
            for source, sink in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        with self._lock:
            self._open.discard(source)
            self._open.discard(sink)
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


Links = dict[tuple[str, str], Relay]
"""The relays of a cluster's peer links, by (from node, to node)."""


@contextlib.contextmanager
def relayed_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                    names: Sequence[str], cluster_keys: Mapping[str, str],
                    deadline: float,
                    environments: Mapping[str, Mapping[str, str]] | None = None,
                    ) -> Iterator[tuple[dict[str, Node], Links]]:
    """Nodes `names` whose every peer link (from, to) goes through a relay, each with
    `cluster_keys` in its [cluster] section (and `environments` as start_cluster's);
    yields the nodes, once each trusts all the others (within `deadline` seconds each),
    and the relays. The relays close at the end."""
    relays = {(source, target): Relay() for source in names for target in names
              if source != target}
    overrides = {name: dict(cluster_keys, peers="[" + ", ".join(
        f'"{relays[name, other].url}"' for other in names if other != name) + "]")
        for name in names}
    with contextlib.ExitStack() as stack:
        for relay in relays.values():
            stack.callback(relay.close)
        started = stack.enter_context(start_cluster(request, tmp_path_factory, names,
                                                    cluster_overrides=overrides,
                                                    environments=environments))
        for (_source, target), relay in relays.items():
            relay.target_port = started[target].daemon.port
        wait_until_trusted(started, deadline)
        yield started, relays


def isolate(relays: Links, name: str) -> None:
    """Cut every link from or to node `name`."""
    for link, relay in relays.items():
        if name in link:
            relay.cut()


def heal_all(relays: Links) -> None:
    for relay in relays.values():
        relay.heal()
