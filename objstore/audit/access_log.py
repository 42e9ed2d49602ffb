"""The access log: one line per answered request (time, request id, principal, method, path,
status, bytes in and out, duration), off by default, to a file or to standard output, as
text or JSON (`[logging] access_log`, `access_log_format`).

The audit log is the durable, queryable record; this log is for operators' tools (tail,
grep, a log shipper). Lines are formatted on the reactor thread (`format_line`, pure) and
collected in memory; a timer hands each batch to the IO pool, which appends it with one
write on a file opened O_APPEND (so the lines of several worker processes never interleave
within a line). At most `MAX_PENDING` lines wait: past that, lines are dropped and counted
(`dropped`), never the request delayed. The query string is never logged (a presigned URL's
signature is in it); control characters in the path are escaped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.logger import Logger

log = Logger()

FLUSH_SECONDS = 0.5
MAX_PENDING = 100_000
STDOUT = "-"


@dataclass(frozen=True, slots=True)
class AccessEntry:
    ts: float
    request_id: str
    principal: str  # username, else the access key, else "-" (anonymous or refused early)
    source_ip: str
    method: str
    path: str  # without the query string
    status: int
    bytes_in: int
    bytes_out: int
    duration_ms: float


def _printable(text: str) -> str:
    """Control characters and spaces escaped, so that a line stays one line of fields."""
    out = []
    for ch in text:
        if ch == " ":
            out.append("%20")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _iso(ts: float) -> str:
    whole = int(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + \
        f".{int((ts - whole) * 1000):03d}Z"


def format_line(entry: AccessEntry, fmt: str) -> str:
    """One line (with its newline) in `fmt` ("text" or "json")."""
    if fmt == "json":
        return json.dumps({
            "time": _iso(entry.ts), "request_id": entry.request_id,
            "principal": entry.principal, "source_ip": entry.source_ip,
            "method": entry.method, "path": entry.path, "status": entry.status,
            "bytes_in": entry.bytes_in, "bytes_out": entry.bytes_out,
            "duration_ms": round(entry.duration_ms, 3),
        }, ensure_ascii=True, separators=(",", ":")) + "\n"
    return " ".join((
        _iso(entry.ts), _printable(entry.request_id) or "-", _printable(entry.principal) or "-",
        _printable(entry.source_ip) or "-", _printable(entry.method) or "-",
        _printable(entry.path) or "-", str(entry.status), str(entry.bytes_in),
        str(entry.bytes_out), f"{entry.duration_ms:.3f}ms",
    )) + "\n"


class AccessLog(Service):
    """Collects lines; every FLUSH_SECONDS the batch is appended on `run_in_thread`."""

    def __init__(self, destination: str, fmt: str, *,
                 run_in_thread: Callable[..., defer.Deferred[Any]],
                 clock: Any, max_pending: int = MAX_PENDING) -> None:
        self._destination = destination
        self._format = fmt
        self._run = run_in_thread
        self._clock = clock
        self._max_pending = max_pending
        self._pending: list[str] = []
        self._fd: int | None = None
        self._loop: task.LoopingCall | None = None
        self._writing: defer.Deferred[Any] | None = None
        self.dropped = 0
        self.written = 0

    def add(self, entry: AccessEntry) -> None:
        if len(self._pending) >= self._max_pending:
            self.dropped += 1
            return
        self._pending.append(format_line(entry, self._format))

    def startService(self) -> None:  # noqa: N802
        super().startService()
        if self._destination == STDOUT:
            self._fd = 1
        else:
            self._fd = os.open(self._destination, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                               0o640)
        self._loop = task.LoopingCall(self.flush)
        self._loop.clock = self._clock
        self._loop.start(FLUSH_SECONDS, now=False).addErrback(
            lambda failure: log.failure("the access log timer stopped", failure))

    def flush(self) -> defer.Deferred[Any] | None:
        """Hand the pending lines to a thread (one batch at a time)."""
        if not self._pending or self._fd is None or self._writing is not None:
            return self._writing
        data = "".join(self._pending).encode("utf-8", "backslashreplace")
        count = len(self._pending)
        self._pending = []
        fd = self._fd

        def done(result: Any) -> None:
            self._writing = None
            self.written += count

        def failed(failure: Any) -> None:
            self._writing = None
            self.dropped += count
            log.warn("the access log could not be written: {error}",
                     error=failure.getErrorMessage())

        self._writing = self._run(_write_all, fd, data)
        self._writing.addCallbacks(done, failed)
        return self._writing

    def stopService(self) -> defer.Deferred[None]:  # noqa: N802
        super().stopService()
        return defer.ensureDeferred(self._stop())

    async def _stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._writing is not None:
            await self._writing
        if self._pending and self._fd is not None:  # the last lines, before the fd goes
            pending = self.flush()
            if pending is not None:
                await pending
        if self._fd is not None and self._fd != 1:
            os.close(self._fd)
        self._fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


__all__ = ["STDOUT", "AccessEntry", "AccessLog", "format_line"]
