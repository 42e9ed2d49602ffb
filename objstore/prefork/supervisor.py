"""The parent process of a node with several workers.

It owns the listening socket (bound before any worker starts, so a port in use fails the
start at once), the node's runtime directory (shared counters, key locks, metrics files),
and the workers: N processes of `python -m objstore.prefork.child` that adopt the socket.
The kernel spreads accepted connections across them. A worker that exits while the node is
running is restarted (after a back-off when it keeps dying); SIGTERM to the parent closes
its copy of the socket and sends SIGTERM to every worker, which drain as a single-process
node does, and the parent exits when the last one has. Worker output (their log) is relayed
into the parent's log line by line.

The parent never touches the database after start-up preparation, and never serves a
request: it must stay small and must not die.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.application import service
from twisted.application.internet import backoffPolicy
from twisted.internet import defer, error, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.prefork import METRICS_DIR
from objstore.prefork.runtime_dirs import make_runtime_dir, sweep_stale_runtime_dirs

log = Logger()

LISTEN_BACKLOG = 1024
RESTART_DELAY_SECONDS = 0.5  # first restart; doubles while a worker keeps dying young
RESTART_DELAY_MAX_SECONDS = 30.0
STABLE_AFTER_SECONDS = 30.0  # a worker that ran this long resets the back-off
KILL_MARGIN_SECONDS = 30.0  # past the drain timeout, a worker still alive is killed


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening, non-blocking TCP socket (what adoptStreamPort requires)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


# Twisted's own back-off (as ClientService uses): 0.5 s, doubling, at most 30 s; no jitter,
# since each worker slot restarts on its own schedule anyway.
RESTART_BACKOFF = backoffPolicy(initialDelay=RESTART_DELAY_SECONDS,
                                maxDelay=RESTART_DELAY_MAX_SECONDS, factor=2.0,
                                jitter=lambda: 0.0)


def young_deaths(previous: int, ran_seconds: float) -> int:
    """How many times in a row a worker has now died young (0: it ran stably first)."""
    return 0 if ran_seconds >= STABLE_AFTER_SECONDS else previous + 1


def restart_delay(deaths_in_a_row: int) -> float:
    """The wait before restarting a worker that has died young `deaths_in_a_row` times."""
    return float(RESTART_BACKOFF(max(deaths_in_a_row - 1, 0)))


class LineRelay(protocol.ProcessProtocol):
    """Relays a worker's output into the parent's log and reports its exit."""

    def __init__(self, index: int, ended: Callable[[WorkerSlot, Failure], None],
                 slot: WorkerSlot) -> None:
        self._index = index
        self._ended = ended
        self._slot = slot
        self._partial = {1: b"", 2: b""}

    def childDataReceived(self, childFD: int, data: bytes) -> None:  # noqa: N802, N803
        buffered = self._partial.get(childFD, b"") + data
        *lines, self._partial[childFD] = buffered.split(b"\n")
        for line in lines:
            self._emit(line)

    def _emit(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip("\r")
        if text:
            log.info("{text}", text=text)

    def processEnded(self, reason: Failure) -> None:  # noqa: N802
        for rest in self._partial.values():
            if rest:
                self._emit(rest)
        self._ended(self._slot, reason)


@dataclass
class WorkerSlot:
    index: int
    transport: Any = None
    pid: int | None = None
    started_at: float = 0.0
    restart_delay_seconds: float = 0.0
    young_deaths: int = 0
    pending_restart: Any = None
    exited: defer.Deferred[None] = field(default_factory=defer.Deferred)


class WorkerSupervisor(service.Service):
    def __init__(
        self,
        reactor: Any,
        *,
        workers: int,
        host: str,
        port: int,
        config_path: str | None,
        drain_timeout_seconds: float,
        bind_error: Callable[[OSError], BaseException],
        on_worker_exit: Callable[[str, int], None] | None = None,
        python: str = sys.executable,
        listen_socket: socket.socket | None = None,
    ) -> None:
        self._bind_error = bind_error
        self._reactor = reactor
        self._count = workers
        self._host = host
        self._port = port
        self._config_path = config_path
        self._drain = drain_timeout_seconds
        self._on_worker_exit = on_worker_exit
        self._python = python
        self._socket: socket.socket | None = listen_socket  # bound by the caller, or at start
        self.runtime_dir: str | None = None
        self._slots = [WorkerSlot(index) for index in range(workers)]
        self._stopping = False
        self._started_at = time.time()

    @property
    def address(self) -> tuple[str, int]:
        assert self._socket is not None
        host, port = self._socket.getsockname()[:2]
        return host, port

    @property
    def pids(self) -> list[int]:
        return [slot.pid for slot in self._slots
                if slot.transport is not None and slot.pid is not None]

    def privilegedStartService(self) -> None:  # noqa: N802 (Twisted's name)
        if self._socket is None:
            try:
                self._socket = listening_socket(self._host, self._port)
            except OSError as exc:
                raise self._bind_error(exc) from None
        if self.runtime_dir is None:
            for stale in sweep_stale_runtime_dirs():
                log.info("removed the runtime directory {dir} of a node that was killed",
                         dir=stale)
            self.runtime_dir = make_runtime_dir()
            os.makedirs(os.path.join(self.runtime_dir, METRICS_DIR))
        super().privilegedStartService()

    def startService(self) -> None:  # noqa: N802
        self.privilegedStartService()
        super().startService()
        host, port = self.address
        log.info("supervising {n} worker processes on {host}:{port} (runtime {dir})",
                 n=self._count, host=host, port=port, dir=self.runtime_dir)
        for slot in self._slots:
            self._spawn(slot)

    def _argv(self, index: int) -> list[str]:
        assert self._socket is not None and self.runtime_dir is not None
        argv = [self._python, "-m", "objstore.prefork.child",
                "--index", str(index), "--listen-fd", str(self._socket.fileno()),
                "--runtime-dir", self.runtime_dir, "--parent-pid", str(os.getpid()),
                "--started-at", repr(self._started_at)]
        if self._config_path:
            argv += ["--config", self._config_path]
        return argv

    def _spawn(self, slot: WorkerSlot) -> None:
        slot.pending_restart = None
        if self._stopping or self._socket is None:
            return
        fd = self._socket.fileno()
        slot.exited = defer.Deferred()
        slot.started_at = self._reactor.seconds()
        slot.transport = self._reactor.spawnProcess(
            LineRelay(slot.index, self._worker_ended, slot), self._python,
            self._argv(slot.index), env=dict(os.environ),
            childFDs={0: "w", 1: "r", 2: "r", fd: fd},
        )
        slot.pid = slot.transport.pid
        log.info("worker {index} started (pid {pid})", index=slot.index, pid=slot.pid)

    def _worker_ended(self, slot: WorkerSlot, reason: Failure) -> None:
        pid = slot.pid
        status = reason.value
        code = getattr(status, "exitCode", None)
        sig = getattr(status, "signal", None)
        slot.transport = None
        if self._on_worker_exit is not None and self.runtime_dir is not None and pid:
            self._on_worker_exit(os.path.join(self.runtime_dir, METRICS_DIR), pid)
        exited, slot.exited = slot.exited, defer.Deferred()
        if self._stopping:
            log.info("worker {index} stopped (exit code {code})", index=slot.index, code=code)
            exited.callback(None)
            return
        ran = self._reactor.seconds() - slot.started_at
        slot.young_deaths = young_deaths(slot.young_deaths, ran)
        slot.restart_delay_seconds = restart_delay(slot.young_deaths)
        log.warn("worker {index} (pid {pid}) exited unexpectedly (exit code {code}, signal "
                 "{sig}) after {ran:.1f}s; restarting in {delay:g}s", index=slot.index,
                 pid=pid, code=code, sig=sig, ran=ran, delay=slot.restart_delay_seconds)
        slot.pending_restart = self._reactor.callLater(
            slot.restart_delay_seconds, self._spawn, slot)
        exited.callback(None)

    @defer.inlineCallbacks
    def stopService(self) -> Any:  # noqa: N802
        super().stopService()
        self._stopping = True
        running = []
        for slot in self._slots:
            if slot.pending_restart is not None and slot.pending_restart.active():
                slot.pending_restart.cancel()
            slot.pending_restart = None
            if slot.transport is not None:
                running.append(slot)
        if self._socket is not None:
            self._socket.close()  # the workers keep their copies while they drain
            self._socket = None
        log.info("stopping {n} worker processes", n=len(running))
        for slot in running:
            self._signal(slot, "TERM")
        waiting = defer.DeferredList([slot.exited for slot in running], consumeErrors=True)
        timer = self._reactor.callLater(self._drain + KILL_MARGIN_SECONDS, self._kill_all)
        yield waiting
        if timer.active():
            timer.cancel()
        if self.runtime_dir is not None:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            self.runtime_dir = None

    def _kill_all(self) -> None:
        for slot in self._slots:
            if slot.transport is not None:
                log.warn("worker {index} did not stop in time: killing it", index=slot.index)
                self._signal(slot, "KILL")

    @staticmethod
    def _signal(slot: WorkerSlot, name: str) -> None:
        try:
            slot.transport.signalProcess(name)
        except (error.ProcessExitedAlready, OSError):
            pass

