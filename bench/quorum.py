"""A 3-node quorum 4 KiB PUT against the single node, in one run (`python -m bench.quorum`).

Usage (from the repository root):
    .venv/bin/python -m bench.quorum [--seconds 8] [--rounds 2] [--profile DIR]
                                     [--sync-method auto|fsync] [--io-threads N]
                                     [--no-fsync]

Four daemons on loopback (SQLite, fsync on, one worker each): a single node, and a
three-node cluster with the tests/cluster harness's config (`consistency = "quorum"`,
static peers). wrk PUTs new 4 KiB keys with presigned URLs at c=32 (as bench.run's
4 KiB PUT row) into the single node, then into node a of the cluster (which writes its
copy and answers once one peer has acknowledged too); the cases alternate for `--rounds`
rounds so the machine's state weighs on both alike, and the median round is reported.
The table has bench.run's row format: the single node is the baseline column.
`--profile DIR` records each node under `py-spy record` (raw format, quorum-node-a.txt
...) during the last cluster round, to say what bounds it; `--no-fsync` runs every daemon
with `[storage] fsync = false` to tell the disk's share from the CPU's. Never part of the
test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import urllib3

from bench.catch_up import py_spy
from bench.report import Row, format_table, machine_description, release_workdir, say
from bench.s3 import S3Session, S3Target
from bench.servers import cpu_seconds
from bench.wrk import WrkResult, WrkRun, run_wrk, write_paths
from tests.cluster.harness import cluster_section
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon, free_port

REPO = Path(__file__).resolve().parents[1]
BUCKET = "bench-quorum"
NAMES = ("a", "b", "c")
CONNECTIONS = 32
URLS_PER_SECOND = 4000  # presigned paths made per second of a run (bounds the work)
HEALTHY_SECONDS = 120.0
# The harness's short test timeouts, relaxed: on a loaded machine a peer's answer may
# take more than 2 s, which would turn a slow quorum into failed writes.
CLUSTER_OVERRIDES = {"request_timeout_seconds": "10", "probe_interval_seconds": "1"}


def healthy(daemon: Daemon) -> bool:
    try:
        response = urllib3.PoolManager(retries=False, timeout=2.0).request(
            "GET", daemon.endpoint + "/admin/health")
    except urllib3.exceptions.HTTPError:
        return False
    return response.status == 200


def wait_healthy(daemons: list[Daemon]) -> None:
    until = time.monotonic() + HEALTHY_SECONDS
    while not all(healthy(daemon) for daemon in daemons):
        if time.monotonic() > until:
            raise RuntimeError("the nodes are not healthy in time")
        time.sleep(0.2)


def storage_keys(sync_method: str, io_threads: int, fsync: bool = True) -> str:
    """[storage] lines of every daemon of the run (Daemon appends them to its section)."""
    return (f'sync_method = "{sync_method}"\nio_threads = {io_threads}\n'
            f"fsync = {'true' if fsync else 'false'}\n")


def start_cluster(workdir: Path, storage: str) -> list[Daemon]:
    ports = {name: free_port() for name in NAMES}
    nodes = []
    for name in NAMES:
        peers = [f"http://127.0.0.1:{ports[other]}" for other in NAMES if other != name]
        nodes.append(Daemon(workdir / name, backend="sqlite", workers=1, port=ports[name],
                            extra_config=storage + cluster_section(
                                f"node-{name}", peers, size=len(NAMES),
                                overrides=CLUSTER_OVERRIDES)))
    for node in nodes:
        node.launch()
    for node in nodes:
        node.wait_ready(HEALTHY_SECONDS)
    wait_healthy(nodes)
    return nodes


def target(daemon: Daemon) -> S3Target:
    return S3Target(daemon.endpoint, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)


def put_run(daemon: Daemon, name: str, workdir: Path, body: Path, seconds: int
            ) -> tuple[WrkResult, float]:
    """One wrk run of PUTs of new keys into `daemon`: its result and the CPU (cores) the
    daemon used meanwhile (one worker: its process)."""
    count = seconds * URLS_PER_SECOND + CONNECTIONS
    keys: Iterator[str] = (f"{name}/{i:07d}" for i in range(count))
    paths = workdir / f"{name}.paths"
    write_paths(paths, target(daemon).presigned_paths("PUT", BUCKET, keys))
    assert daemon.process is not None
    cpu, wall = cpu_seconds(daemon.process.pid), time.monotonic()
    result = run_wrk(WrkRun(daemon.endpoint, paths, "PUT", body, True, seconds,
                            connections=CONNECTIONS, threads=2))
    cores = (cpu_seconds(daemon.process.pid) - cpu) / (time.monotonic() - wall)
    if result.failed:
        say(f"{name}: {result.status_errors} error statuses, {result.socket_errors} socket "
            f"errors of {result.requests}")
    return result, cores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=8, help="each wrk run (default 8)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both cases")
    parser.add_argument("--profile", type=Path, help="py-spy each node's last round here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--sync-method", choices=("auto", "fsync"), default="auto",
                        help="[storage] sync_method of every daemon (default auto: the "
                        "four daemons share one disk, so each syncfs also flushes the "
                        "others' writes)")
    parser.add_argument("--io-threads", type=int, default=8,
                        help="[storage] io_threads of every daemon (default 8)")
    parser.add_argument("--no-fsync", action="store_true",
                        help="[storage] fsync = false on every daemon: what is left when no "
                        "write waits for the disk (a diagnosis, never a setting to run)")
    args = parser.parse_args(argv)
    storage = storage_keys(args.sync_method, args.io_threads, fsync=not args.no_fsync)
    # No begin_command: its SIGTERM handler would turn a signal the daemons (started in
    # this process group, as the test harness starts them) send at their shutdown into a
    # KeyboardInterrupt here.
    say("\n".join(machine_description(REPO)))
    workdir = Path(tempfile.mkdtemp(prefix="objstore-quorum-"))
    body = workdir / "small.bin"
    body.write_bytes(os.urandom(4096))
    nodes: list[Daemon] = []
    try:
        single = Daemon(workdir / "single", backend="sqlite", workers=1,
                        extra_config=storage)
        nodes.append(single)
        single.start()
        cluster = start_cluster(workdir, storage)
        nodes += cluster
        for node in (single, *cluster):
            S3Session(target(node)).create_bucket(BUCKET)
        results: dict[str, list[tuple[WrkResult, float]]] = {"single": [], "quorum": []}
        peer_cpu: list[float] = []
        for round_ in range(args.rounds):
            say(f"round {round_ + 1}: single node")
            results["single"].append(put_run(single, f"single-{round_}", workdir, body,
                                             args.seconds))
            say(f"round {round_ + 1}: 3-node quorum, PUTs into node a")
            spies = []
            if args.profile is not None and round_ == args.rounds - 1:
                args.profile.mkdir(parents=True, exist_ok=True)
                for name, node in zip(NAMES, cluster, strict=True):
                    assert node.process is not None
                    spies.append(subprocess.Popen(
                        [py_spy(), "record", "--format", "raw", "--nonblocking", "-r", "200",
                         "-o", str(args.profile / f"quorum-node-{name}.txt"),
                         "--pid", str(node.process.pid)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            peers_before = [cpu_seconds(n.process.pid) for n in cluster[1:] if n.process]
            wall = time.monotonic()
            results["quorum"].append(put_run(cluster[0], f"quorum-{round_}", workdir, body,
                                             args.seconds))
            elapsed = time.monotonic() - wall
            peer_cpu.append(sum(cpu_seconds(n.process.pid) - before for n, before
                                in zip(cluster[1:], peers_before, strict=True)
                                if n.process) / elapsed)
            for spy in spies:
                spy.send_signal(2)
                spy.wait(30)
        print("\n" + format_table(rows(results, statistics.median(peer_cpu), args.rounds,
                                       f"sync_method {args.sync_method}, io_threads "
                                       f"{args.io_threads}"
                                       + (", fsync OFF" if args.no_fsync else "")),
                                  baseline_name="single node", measured_name="3-node quorum"),
              flush=True)
    finally:
        for node in nodes:
            try:
                node.cleanup()  # also checks the node's log for tracebacks
            except AssertionError as error:
                say(f"note: {node.workdir.name}: {str(error).splitlines()[0]} (see its "
                    "daemon.log; --keep keeps it)")
        release_workdir(workdir, args.keep)
    return 0


def rows(results: dict[str, list[tuple[WrkResult, float]]], peer_cores: float,
         rounds: int, storage: str = "sync_method auto, io_threads 8") -> list[Row]:
    def median_round(case: str) -> tuple[WrkResult, float]:
        ordered = sorted(results[case], key=lambda run: run[0].ops_per_second)
        return ordered[len(ordered) // 2]

    quorum, quorum_cores = median_round("quorum")
    single, single_cores = median_round("single")
    return [
        Row(f"4 KiB PUT, new keys, c={CONNECTIONS} (quorum: into node a)",
            "ops/s", quorum.ops_per_second, single.ops_per_second,
            f"median of {rounds} alternating round(s), one worker per node, {storage}; "
            "CPU: node a "
            f"{quorum_cores:.2f}, b + c {peer_cores:.2f}, single node {single_cores:.2f} "
            "cores"),
        Row("4 KiB PUT, p50", "ms", quorum.p50_ms, single.p50_ms),
        Row("4 KiB PUT, p99", "ms", quorum.p99_ms, single.p99_ms),
    ]


if __name__ == "__main__":
    sys.exit(main())
