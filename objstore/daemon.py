"""The twistd entry point (`twistd objstore --config PATH`): options, start-up checks and
which service tree to run.

It stays light on purpose: with several `[server] workers` this process is only the
supervisor (objstore/prefork/supervisor.py) and lives as long as the node, so it imports
neither the S3 and admin stacks nor the database layer. Preparing storage for the workers
(migrations, root credential, spool sweep) runs in a short-lived child,
`python -m objstore.prefork.prepare`, which also prints the announcement. With one worker
the whole node is built here, in this process (objstore.service.build_node).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from twisted.application import service
from twisted.python import usage

from objstore import __version__
from objstore.config import Config, ConfigError, config_from_data, read_config_file
from objstore.prefork.supervisor import WorkerSupervisor, listening_socket

if TYPE_CHECKING:
    from objstore.iam.bootstrap import BootstrapResult


class Options(usage.Options):
    optParameters = [["config", "c", None, "Path to objstore.toml (defaults apply if omitted)."]]


def fail_startup(message: str) -> SystemExit:
    """One clear line on the process's real stderr (twistd may have redirected sys.stderr
    into its log by now) and a non-zero exit."""
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"objstore: {message}\n")
    stream.flush()
    return SystemExit(2)


def warn_startup(message: str) -> None:
    """A warning line on the process's real stderr, where start-up errors go."""
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"objstore: warning: {message}\n")
    stream.flush()


def checked_config(path: str | None) -> Config:
    """The configuration, or exit 2 with one line naming what is wrong. A setting this
    version cannot honour is named first, before the checks of its other keys (which
    would send the operator off to fix a file for a feature that is not there)."""
    try:
        data = read_config_file(path)
        unsupported = unsupported_settings(data)
        if unsupported:
            raise fail_startup(unsupported)
        return config_from_data(data, path)
    except ConfigError as exc:
        raise fail_startup(str(exc)) from None


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


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    return value if isinstance(value, Mapping) else {}


# Settings the config file may name (they are part of its contract) but this version cannot
# honour yet. Refusing them is kinder than silently running without them. Each predicate
# sees the parsed TOML before validation; a value that is not even valid is left to the
# validation, which names it.
_NOT_YET: tuple[tuple[str, Callable[[Mapping[str, Any]], bool]], ...] = (
    ("[cluster] enabled: clustering", lambda d: _table(d, "cluster").get("enabled") is True),
    ("[encryption] enabled: server-side encryption",
     lambda d: _table(d, "encryption").get("enabled") is True),
    ("[notifications]: bucket notifications", lambda d: "notifications" in d),
    ('[logging] level: a log level other than "info"',
     lambda d: _table(d, "logging").get("level") in ("debug", "warn", "error")),
    ('[logging] format = "json": JSON logs',
     lambda d: _table(d, "logging").get("format") == "json"),
)


def unsupported_settings(data: Mapping[str, Any]) -> str | None:
    for what, applies in _NOT_YET:
        if applies(data):
            return f"{what} is not available in objstore {__version__} yet"
    return None


def announce(config: Config, bootstrap: BootstrapResult) -> None:
    """Tell the operator how to connect. A generated secret is shown here once, never again."""
    server = config.server
    scheme = "https" if server.tls else "http"
    everywhere = server.host in ("0.0.0.0", "::", "")
    host = "127.0.0.1" if everywhere else server.host
    endpoint = f"{scheme}://{host}:{server.port}"
    where = (f"listening on port {server.port} of every address ({server.host or '0.0.0.0'}); "
             f"from this machine: {endpoint}" if everywhere else f"endpoint {endpoint}")
    lines = [f"objstore {__version__}: {where}, data in {config.storage.data_dir}"]
    if bootstrap.new_secret:
        lines += [
            "A root credential was generated. The secret is shown ONLY NOW; store it safely:",
            f"  AWS_ACCESS_KEY_ID={bootstrap.access_key}",
            f"  AWS_SECRET_ACCESS_KEY={bootstrap.new_secret}",
            f"  try: aws --endpoint-url {endpoint} s3 ls",
        ]
    elif bootstrap.from_environment:
        lines.append(f"root access key {bootstrap.access_key} (from the environment)")
    else:
        lines.append(f"root access key {bootstrap.access_key} (secret shown at first start)")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
