"""A worker process of a supervised node: `python -m objstore.prefork.child`.

The supervisor (objstore/prefork/supervisor.py) starts it with the listening socket's file
descriptor, its worker index and the node's runtime directory. It builds the full node
(S3 and admin APIs) with `objstore.service.build_node` as a worker of that role, adopts the
socket and serves until SIGTERM, which drains it like a single-process node. It never
prepares storage (the parent migrated the database and swept the spool directory before
any worker started: a restarted worker must not sweep its siblings' uploads in flight).

Its log goes to stdout as plain lines, which the parent relays into the node's log. When
its parent dies (Linux parent-death signal, SIGUSR2), it stops listening at once, so a node
restarted after its supervisor was killed can bind the port, then finishes the requests in
flight and exits.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from twisted.internet import defer
from twisted.logger import ILogObserver, Logger, formatEvent, globalLogBeginner
from zope.interface import provider

PR_SET_PDEATHSIG = 1
PARENT_DIED = signal.SIGUSR2  # the supervisor's own SIGTERM means "drain"; this one does not
log = Logger()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="objstore-worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--runtime-dir", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--started-at", type=float, default=None)
    parser.add_argument("--config", default=None)
    return parser.parse_args(argv)


def die_with_parent(parent_pid: int) -> None:
    """Get PARENT_DIED when the parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, PARENT_DIED)
    if os.getppid() != parent_pid:
        raise SystemExit(1)


def line_observer(stream: TextIO, index: int) -> Any:
    """Each event as `[worker N] namespace: text` lines, tracebacks included."""

    @provider(ILogObserver)
    def observe(event: dict[str, Any]) -> None:
        text = formatEvent(event)
        failure = event.get("log_failure")
        if failure is not None:
            text += "\n" + failure.getTraceback()
        namespace = event.get("log_namespace", "-")
        try:
            for line in text.splitlines() or [""]:
                stream.write(f"[worker {index}] {namespace}: {line}\n")
            stream.flush()
        except (OSError, ValueError):
            pass  # the parent (and its end of the pipe) is gone: nobody left to tell

    return observe


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the parent decides
    signal.signal(PARENT_DIED, signal.SIG_IGN)  # until the handler below is installed
    die_with_parent(args.parent_pid)
    globalLogBeginner.beginLoggingTo([line_observer(sys.stdout, args.index)],
                                     redirectStandardIO=False)
    gc.disable()  # until settle_heap: no collections while the heap only grows
    from twisted.internet import reactor as installed

    reactor: Any = installed
    from objstore.config import ConfigError, load_config
    from objstore.iam.bootstrap import BootstrapError
    from objstore.prefork import WorkerRole
    from objstore.service import build_node, settle_heap
    from objstore.startup import fail_startup

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise fail_startup(str(exc)) from None
    role = WorkerRole(index=args.index, listen_fd=args.listen_fd, runtime_dir=args.runtime_dir,
                      node_started_at=args.started_at)
    try:
        built = build_node(config, reactor, role=role)
    except (OSError, BootstrapError) as exc:  # e.g. the database went away
        raise fail_startup(str(exc)) from None
    node = built.service
    settle_heap()
    stopping: list[bool] = []

    def stop() -> None:
        if stopping:
            return
        stopping.append(True)
        done = defer.maybeDeferred(node.stopService)
        done.addErrback(lambda failure: failure.printTraceback(sys.stdout))
        done.addBoth(lambda _: reactor.stop())

    def start() -> None:
        try:
            node.privilegedStartService()
            node.startService()
            if os.getppid() != args.parent_pid:  # died before the handler was in place
                orphaned()
        except SystemExit as exc:  # fail_startup has said why, in one line
            exit_code.append(int(exc.code or 1))
            reactor.stop()
        except Exception:  # a worker that cannot serve exits; the supervisor restarts it
            log.failure("worker {index} could not start", index=args.index)
            exit_code.append(1)
            reactor.stop()

    def orphaned() -> None:
        log.warn("worker {index}: the supervisor died; no longer listening, finishing the "
                 "requests in flight", index=args.index)
        built.listener.orphaned()
        stop()

    exit_code: list[int] = []
    signal.signal(signal.SIGTERM, lambda _signum, _frame: reactor.callFromThread(stop))
    signal.signal(PARENT_DIED, lambda _signum, _frame: reactor.callFromThread(orphaned))
    reactor.callWhenRunning(start)
    reactor.run(installSignalHandlers=False)
    return exit_code[0] if exit_code else 0


if __name__ == "__main__":
    sys.exit(main())
