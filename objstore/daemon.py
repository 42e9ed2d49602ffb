"""The twistd entry point (`twistd objstore --config PATH`): options, binding the port,
and which service tree to run (the checks and messages of a start are `startup.py`'s).

It stays light on purpose: with several `[server] workers` this process is only the
supervisor (objstore/prefork/supervisor.py) and lives as long as the node, so it imports
neither the S3 and admin stacks nor the database layer. Preparing storage for the workers
(migrations, root credential, spool sweep) runs in a short-lived child,
`python -m objstore.prefork.prepare`, which also prints the announcement. With one worker
the whole node is built here, in this process (objstore.service.build_node).
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys

from twisted.application import service
from twisted.python import usage

from objstore.config import Config
from objstore.prefork.supervisor import WorkerSupervisor, listening_socket
from objstore.startup import announce, checked_config, fail_startup, warn_startup


class Options(usage.Options):
    optParameters = [["config", "c", None, "Path to objstore.toml (defaults apply if omitted)."]]


def makeService(options: Options) -> service.Service:  # noqa: N802 (twistd's name)
    config = checked_config(options["config"])
    for warning in config.warnings:
        warn_startup(warning)
    # Bound before anything is prepared or printed: a start that cannot serve changes
    # nothing (no bootstrap, no root secret shown for a server that never ran).
    listen_socket = bind_listener(config)
    keep_sigint()
    if config.server.workers > 1:
        prepare_in_child(options["config"])
        return supervisor(config, options["config"], listen_socket)
    gc.disable()  # until settle_heap: no collections while the heap only grows
    from objstore.iam.bootstrap import BootstrapError
    from objstore.service import build_node, settle_heap

    try:
        node = build_node(config, listen_fd=listen_socket.detach())
    except (OSError, BootstrapError) as exc:
        raise fail_startup(str(exc)) from None
    settle_heap()
    assert node.bootstrap is not None
    announce(config, node.bootstrap)
    return node.service


def bind_listener(config: Config) -> socket.socket:
    """The node's listening socket, or exit 2 with one line (e.g. the port is in use)."""
    server = config.server
    try:
        return listening_socket(server.host, server.port)
    except OSError as exc:
        raise fail_startup(f"cannot listen on {server.host}:{server.port}: {exc}") from None


def keep_sigint() -> None:
    """Twisted installs its SIGINT handler (stop, which drains) only when SIGINT has its
    default handler; a shell starting us in the background hands down SIG_IGN, and
    `kill -INT` would do nothing. The man page promises SIGINT drains: restore it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def prepare_in_child(config_path: str | None) -> None:
    """Run `objstore.prefork.prepare` to its end (its stdout and stderr are ours); exit
    with its status if it failed (it has said why, in one line)."""
    argv = [sys.executable, "-m", "objstore.prefork.prepare"]
    if config_path:
        argv += ["--config", config_path]
    sys.stdout.flush()
    code = subprocess.call(argv, stdout=sys.__stdout__, stderr=sys.__stderr__)
    if code != 0:
        raise SystemExit(code)


def supervisor(config: Config, config_path: str | None,
               listen_socket: socket.socket) -> WorkerSupervisor:
    """The parent of a node with several worker processes (objstore/prefork/)."""
    from twisted.internet import reactor

    server = config.server
    return WorkerSupervisor(
        reactor, workers=server.workers, host=server.host, port=server.port,
        config_path=os.path.abspath(config_path) if config_path else None,
        drain_timeout_seconds=server.drain_timeout_seconds,
        on_worker_exit=metrics_of_dead_worker, listen_socket=listen_socket,
        bind_error=lambda exc: fail_startup(
            f"cannot listen on {server.host}:{server.port}: {exc}"),
    )


def metrics_of_dead_worker(path: str, pid: int) -> None:
    from objstore.metrics import multiprocess  # imported when a worker dies, not at start

    multiprocess.worker_exited(path, pid)
