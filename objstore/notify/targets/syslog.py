"""The `syslog` target kind: sends each event as one RFC 5424 syslog message (standard
library sockets, on the target's own thread).

Transports, by `address`:
- `udp://host:port`: one datagram per event. UDP has no acknowledgement: a delivery is
  "accepted" once the datagram was sent (an ICMP refusal shows up on the next send).
- `tcp://host:port`: octet-counted framing (RFC 6587); accepted once written to the socket.
- `unix:///path` or `/path`: a local socket (datagram, as /dev/log is, or stream).

Message: `<PRI>1 TIMESTAMP HOSTNAME objstore - <event name> - <event document>`, PRI from
`facility` and `severity`.

Keys: address, facility (kern, user, mail, daemon, auth, syslog, lpr, news, uucp, cron,
authpriv, ftp, local0 .. local7; default local0), severity (emerg .. debug; default info),
timeout_seconds.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from objstore.notify.targets.base import Event, Target
from objstore.notify.targets.table import TableReader
from objstore.notify.targets.threaded import BlockingTarget

FACILITIES = {
    "kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6,
    "news": 7, "uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11,
    **{f"local{n}": 16 + n for n in range(8)},
}
SEVERITIES = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warning": 4, "notice": 5,
              "info": 6, "debug": 7}


@dataclass(frozen=True, slots=True)
class SyslogSettings:
    name: str
    transport: str  # "udp", "tcp" or "unix"
    host: str
    port: int
    path: str
    priority: int
    timeout_seconds: float


class SyslogKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> SyslogSettings:
        read = TableReader(name, table)
        address = read.string("address")
        host, port, path = "", 0, ""
        if address.startswith("/") or address.startswith("unix://"):
            transport = "unix"
            path = address.removeprefix("unix://")
            if not path.startswith("/"):
                raise read.error("address", f"a unix socket needs an absolute path, got "
                                            f"{address!r}")
        else:
            parts = read.url("address", ("udp", "tcp"), default_port=514)
            transport, host, port = parts.scheme, parts.hostname or "", parts.port or 514
            if parts.path not in ("", "/") or parts.query:
                raise read.error("address", f"takes only host and port, got {address!r}")
        facility = read.choice("facility", FACILITIES, "local0")
        severity = read.choice("severity", SEVERITIES, "info")
        settings = SyslogSettings(
            name=name, transport=transport, host=host, port=port, path=path,
            priority=FACILITIES[facility] * 8 + SEVERITIES[severity],
            timeout_seconds=read.seconds())
        read.finish()
        return settings

    def build(self, settings: SyslogSettings) -> Target:
        return BlockingTarget(settings.name, "syslog", lambda: SyslogSession(settings),
                              timeout_seconds=settings.timeout_seconds)


def syslog_message(priority: int, event: Event, hostname: str, now: datetime) -> bytes:
    """One RFC 5424 message carrying the event document as its MSG."""
    stamp = now.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    msgid = "".join(c for c in event.event_name if 33 <= ord(c) <= 126)[:32] or "-"
    host = "".join(c for c in hostname if 33 <= ord(c) <= 126)[:255] or "-"
    header = f"<{priority}>1 {stamp} {host} objstore - {msgid} - "
    return header.encode("ascii") + event.body


class SyslogSession:
    def __init__(self, settings: SyslogSettings) -> None:
        self._settings = settings
        self._hostname = socket.gethostname()
        self._stream = settings.transport == "tcp"
        if settings.transport == "unix":
            self._sock = self._unix_socket(settings.path)
        elif settings.transport == "udp":
            self._sock = _udp(settings)
        else:
            self._sock = socket.create_connection((settings.host, settings.port),
                                                  timeout=settings.timeout_seconds)
        self._sock.settimeout(settings.timeout_seconds)

    def _unix_socket(self, path: str) -> socket.socket:
        """Datagram first (the usual /dev/log), stream if the socket is one."""
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.connect(path)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EPROTOTYPE:  # the socket at `path` is a stream socket
                raise
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self._settings.timeout_seconds)
            sock.connect(path)
        except BaseException:
            sock.close()
            raise
        self._stream = True
        return sock

    def send(self, event: Event) -> None:
        message = syslog_message(self._settings.priority, event, self._hostname,
                                 datetime.now(UTC))
        if self._stream:
            self._sock.sendall(str(len(message)).encode("ascii") + b" " + message)
        else:
            self._sock.send(message)

    def close(self) -> None:
        self._sock.close()


def _udp(settings: SyslogSettings) -> socket.socket:
    """A connected UDP socket (so that an ICMP port-unreachable fails a later send)."""
    info = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_DGRAM)[0]
    sock = socket.socket(info[0], socket.SOCK_DGRAM)
    try:
        sock.connect(info[4])
    except BaseException:
        sock.close()
        raise
    return sock


KIND = SyslogKind()

__all__ = ["KIND", "SyslogSettings", "syslog_message"]
