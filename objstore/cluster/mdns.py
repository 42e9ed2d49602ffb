"""mDNS discovery ([cluster] discovery = "mdns"): this node announces itself on the local
network and proposes the nodes it hears, with python-zeroconf bridged to the reactor
(TWISTED-NOTES g).

Service type `_objstore._tcp.local.`; each node registers the instance
`<node_id>._objstore._tcp.local.` with its port and addresses and the TXT properties
`node_id`, `url` (the base URL peers use: [cluster] advertise_url, or derived from the
listener) and `protocol`. Found nodes are proposed by their TXT `url` (http:// or
https://, no path), else by their first address and port on this node's scheme; this
node's own announcement is never proposed. The static peers are proposed as well.

Discovery only proposes: trust comes from the probe's authentication, never from being
found, so a forged announcement costs one failed probe.

Threads: `Zeroconf()`, `register_service` and `unregister_all_services`/`close` block (for
the announcement, seconds) and run on `runner` (the reactor's thread pool), never on the
reactor thread. `ServiceBrowser` calls `on_change` in its own thread: it reads the
service's info there (`get_service_info`, blocking, allowed on that thread) and hands
plain data (strings) to the reactor with `call_from_thread`; the found set is touched
only on the reactor thread. Only the probing worker of a node (worker 0) builds one.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol
from urllib.parse import urlsplit

from twisted.application.service import Service
from twisted.internet import threads
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.cluster.prober import DEFAULT_PORT, base_url
from objstore.cluster.wire import PROTOCOL_VERSION
from objstore.config import Cluster, Config, Server

log = Logger()

SERVICE_TYPE = "_objstore._tcp.local."
INFO_TIMEOUT_MS = 3000
_WILDCARDS = ("", "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class Announcement:
    """What this node registers."""

    node_id: str
    url: str  # base URL, no trailing slash
    addresses: tuple[str, ...]
    port: int

    @property
    def instance(self) -> str:
        return f"{self.node_id}.{SERVICE_TYPE}"

    def properties(self) -> dict[str, str]:
        return {"node_id": self.node_id, "url": self.url, "protocol": str(PROTOCOL_VERSION)}


@dataclass(frozen=True, slots=True)
class Found:
    """A service instance heard on the network, as plain data (it crosses threads)."""

    name: str
    node_id: str | None
    url: str | None  # the TXT url
    addresses: tuple[str, ...]
    port: int | None


# -- pure ---------------------------------------------------------------------------------


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) and value else None


def found_from_info(name: str, properties: Mapping[Any, Any], addresses: list[str],
                    port: int | None) -> Found:
    """A `Found` from a ServiceInfo's parts (TXT keys and values may be bytes)."""
    txt = {_text(key): _text(value) for key, value in properties.items()}
    return Found(name=name, node_id=txt.get("node_id"), url=txt.get("url"),
                 addresses=tuple(addresses), port=port)


def valid_base_url(url: str | None) -> str | None:
    """`url` as a base URL (http:// or https://, a host, no path, query or credentials);
    None otherwise."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username \
            or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        return None
    return url.rstrip("/")


def proposed_url(found: Found, *, scheme: str) -> str | None:
    """Where to probe a found node: its TXT url, else its first address and port."""
    url = valid_base_url(found.url)
    if url is not None:
        return url
    if found.addresses and found.port:
        return base_url(scheme, found.addresses[0], found.port)
    return None


def announcement_for(cluster: Cluster, server: Server, node_id: str,
                     host_address: Callable[[], str]) -> Announcement:
    """What this node announces: [cluster] advertise_url, or the listener's scheme, host
    and port (`host_address()`, blocking, names this machine when it listens on every
    address)."""
    advertised = cluster.advertise_url
    if advertised:
        parts = urlsplit(advertised)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else DEFAULT_PORT)
        url = advertised.rstrip("/")
    else:
        scheme = "https" if server.tls is not None else "http"
        host = server.host if server.host not in _WILDCARDS else host_address()
        port = server.port
        url = base_url(scheme, host, port)
    address = host if _is_address(host) else _resolve(host)
    return Announcement(node_id=node_id, url=url, addresses=(address,) if address else (),
                        port=port)


def _is_address(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return True
    return False


def _resolve(host: str) -> str | None:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return None


def this_host_address() -> str:
    """This machine's address as its own name resolves (blocking)."""
    return _resolve(socket.gethostname()) or "127.0.0.1"


# -- the bridge -------------------------------------------------------------------------------


class ZeroconfLike(Protocol):
    def register_service(self, info: Any, *, allow_name_change: bool = ...) -> None: ...
    def unregister_all_services(self) -> None: ...
    def close(self) -> None: ...
    def get_service_info(self, type_: str, name: str, timeout: int = ...) -> Any: ...


class Runner(Protocol):
    def run(self, fn: Callable[..., Any], *args: Any) -> Deferred[Any]: ...


class ReactorThreads:
    """Blocking zeroconf calls on the reactor's thread pool."""

    def run(self, fn: Callable[..., Any], *args: Any) -> Deferred[Any]:
        return threads.deferToThread(fn, *args)


def _zeroconf() -> ZeroconfLike:
    from zeroconf import Zeroconf  # noqa: PLC0415 (only mdns discovery needs it)

    return Zeroconf()


def _browser(zc: ZeroconfLike, handler: Callable[..., None]) -> Any:
    from zeroconf import ServiceBrowser  # noqa: PLC0415

    return ServiceBrowser(zc, SERVICE_TYPE, handlers=[handler])  # type: ignore[arg-type]


def _service_info(announcement: Announcement) -> Any:
    from zeroconf import ServiceInfo  # noqa: PLC0415

    return ServiceInfo(SERVICE_TYPE, announcement.instance,
                       parsed_addresses=list(announcement.addresses), port=announcement.port,
                       properties=announcement.properties(),
                       server=f"{announcement.node_id}.local.")


class MdnsDiscovery(Service):
    """A `Discovery` (prober.py) and a service: registers at start, browses while
    running, unregisters at stop. `propose` answers the static peers and the nodes heard."""

    def __init__(self, *, announcement: Callable[[], Announcement], static: tuple[str, ...],
                 scheme: str, call_from_thread: Callable[..., Any],
                 runner: Runner | None = None,
                 zeroconf: Callable[[], ZeroconfLike] = _zeroconf,
                 browser: Callable[[ZeroconfLike, Callable[..., None]], Any] = _browser,
                 service_info: Callable[[Announcement], Any] = _service_info) -> None:
        self._announcement = announcement
        self._static = tuple(peer.rstrip("/") for peer in static)
        self._scheme = scheme
        self._call_from_thread = call_from_thread
        self._runner = runner or ReactorThreads()
        self._new_zeroconf = zeroconf
        self._new_browser = browser
        self._service_info = service_info
        self._zc: ZeroconfLike | None = None
        self._browser: Any = None
        self._own: Announcement | None = None
        self.found: dict[str, str] = {}  # instance name -> base URL (reactor thread only)

    @classmethod
    def for_node(cls, config: Config, node_id: str, reactor: Any) -> MdnsDiscovery:
        scheme = urlsplit(config.cluster.advertise_url).scheme or (
            "https" if config.server.tls is not None else "http")
        return cls(announcement=lambda: announcement_for(config.cluster, config.server, node_id,
                                                         this_host_address),
                   static=config.cluster.peers, scheme=scheme,
                   call_from_thread=reactor.callFromThread)

    def startService(self) -> Deferred[None]:  # noqa: N802 (Twisted's name)
        super().startService()
        return Deferred.fromCoroutine(self._start())

    async def _start(self) -> None:
        try:
            self._own = await self._runner.run(self._announcement)
            self._zc = await self._runner.run(self._new_zeroconf)
            assert self._own is not None and self._zc is not None
            # Another cluster on the network may use the same node id: zeroconf then renames
            # our instance (the TXT node_id stays), rather than refusing to announce.
            await self._runner.run(partial(self._zc.register_service,
                                           self._service_info(self._own),
                                           allow_name_change=True))
            self._browser = self._new_browser(self._zc, self.on_change)
        except Exception:  # noqa: BLE001 (the static peers are still proposed)
            log.failure("mDNS discovery could not start: only the static peers are probed")
            return
        log.info("mDNS: announcing {url} as {name}", url=self._own.url,
                 name=self._own.instance)

    def stopService(self) -> Deferred[None]:  # noqa: N802
        super().stopService()
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        browser, zc, self._browser, self._zc = self._browser, self._zc, None, None
        if browser is not None:
            await self._runner.run(browser.cancel)
        if zc is not None:
            try:
                await self._runner.run(zc.unregister_all_services)
            finally:
                await self._runner.run(zc.close)

    # -- the browser's thread -------------------------------------------------------------

    def on_change(self, zeroconf: ZeroconfLike, service_type: str, name: str,
                  state_change: Any) -> None:
        """ServiceBrowser's handler (keyword arguments, in the browser thread)."""
        if getattr(state_change, "name", str(state_change)) == "Removed":
            self._call_from_thread(self.gone, name)
            return
        info = zeroconf.get_service_info(service_type, name, timeout=INFO_TIMEOUT_MS)
        if info is None:
            return
        found = found_from_info(name, dict(info.properties or {}),
                                list(info.parsed_addresses()), info.port)
        self._call_from_thread(self.seen, found)

    # -- the reactor thread ---------------------------------------------------------------

    def seen(self, found: Found) -> None:
        own = self._own
        if own is not None and (found.name == own.instance or found.node_id == own.node_id):
            return
        url = proposed_url(found, scheme=self._scheme)
        if url is not None and self.found.get(found.name) != url:
            log.info("mDNS: found {node_id} at {url}", node_id=found.node_id or "unknown",
                     url=url)
            self.found[found.name] = url

    def gone(self, name: str) -> None:
        self.found.pop(name, None)

    async def propose(self) -> list[str]:
        return list(dict.fromkeys([*self._static, *self.found.values()]))
