"""How fast a returning node catches up: objects/s and MiB/s of anti-entropy.

Usage (from the repository root):
    .venv/bin/python -m bench.catch_up                      # small and large, SQLite
    .venv/bin/python -m bench.catch_up --only small --count 3000 --size-kib 4
    .venv/bin/python -m bench.catch_up --backend postgres --keep

Three real daemons on loopback (the tests/cluster harness's config: quorum, static peers,
probes every 0.3 s; anti-entropy at its default interval), one bucket created on each. Per
case: node c is stopped, node a takes COUNT writes of SIZE (16 clients in parallel; b
acknowledges them, the quorum), then c starts again and the clock runs from the moment
its process is started until its listing of the bucket equals a's (keys and ETags,
polled every 0.5 s: listing thousands of keys costs the node too), then until its health
answers 200 (out of `syncing`). Printed: both times, the rates over the first, restart
included (objects/s, MiB/s), and the CPU time c used by then (start-up included: on a
busy machine the wall-clock figures move with the load, the CPU time much less), as a
markdown table.
`--profile DIR` records c's catch-up under `py-spy record` (raw format) into DIR. Never
part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import urllib3
from botocore.config import Config as BotoConfig

from bench.report import machine_description, say
from bench.servers import cpu_seconds
from tests.cluster.harness import cluster_section
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon, free_port

BUCKET = "catch-up"
NAMES = ("a", "b", "c")
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    name: str
    count: int
    size: int  # bytes


@dataclass(frozen=True)
class Result:
    case: Case
    listing_seconds: float  # process start -> listing equal
    cpu_seconds: float  # c's CPU time (user + system) by then, start-up included
    healthy_seconds: float  # process start -> health 200
    listening_seconds: float  # process start -> health answers at all


class ListeningDaemon(Daemon):
    """A daemon ready as soon as its health route answers (a syncing node answers 503)."""

    def wait_ready(self, timeout: float) -> None:
        http = urllib3.PoolManager(retries=False, timeout=2.0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.process.returncode}")
            try:
                http.request("GET", self.endpoint + "/admin/health")
                return
            except urllib3.exceptions.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("daemon not listening in time")


def s3(daemon: Daemon) -> Any:
    return boto3.client(
        "s3", endpoint_url=daemon.endpoint, aws_access_key_id=ROOT_ACCESS_KEY,
        aws_secret_access_key=ROOT_SECRET_KEY, region_name="us-east-1",
        config=BotoConfig(signature_version="s3v4", max_pool_connections=32,
                          retries={"total_max_attempts": 5, "mode": "standard"}))


def listing(client: Any, prefix: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                                  Prefix=prefix):
        for item in page.get("Contents", []):
            found[item["Key"]] = item["ETag"]
    return found


def health(daemon: Daemon) -> int:
    http = urllib3.PoolManager(retries=False, timeout=2.0)
    try:
        return http.request("GET", daemon.endpoint + "/admin/health").status
    except urllib3.exceptions.HTTPError:
        return 0


def wait(what: str, check: Any, deadline: float, every: float = 0.2) -> None:
    until = time.monotonic() + deadline
    while not check():
        if time.monotonic() > until:
            raise RuntimeError(f"not within {deadline}s: {what}")
        time.sleep(every)


def start_nodes(workdir: Path, backend: str, overrides: dict[str, str]
                ) -> dict[str, ListeningDaemon]:
    ports = {name: free_port() for name in NAMES}
    daemons = {}
    for name in NAMES:
        peers = [f"http://127.0.0.1:{ports[o]}" for o in NAMES if o != name]
        section = cluster_section(f"node-{name}", peers, size=len(NAMES),
                                  overrides=overrides)
        daemons[name] = ListeningDaemon(workdir / name, backend=backend, workers=1,
                                        port=ports[name], extra_config=section)
    for daemon in daemons.values():
        daemon.start()
    for daemon in daemons.values():
        wait("every node healthy", lambda d=daemon: health(d) == 200, 120.0)
    for daemon in daemons.values():
        s3(daemon).create_bucket(Bucket=BUCKET)
    return daemons


def py_spy() -> str:
    """py-spy beside this interpreter (pip install py-spy), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else (shutil.which("py-spy") or "py-spy")


def run_case(daemons: dict[str, ListeningDaemon], case: Case, profile: Path | None
             ) -> Result:
    a, c = daemons["a"], daemons["c"]
    client = s3(a)
    c.stop()
    body = os.urandom(case.size)
    prefix = f"{case.name}/"
    say(f"{case.name}: writing {case.count} objects of {case.size} bytes while c is down")

    def put(index: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}{index:07d}", Body=body)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(case.count)))
    expected = listing(client, prefix)
    assert len(expected) == case.count, len(expected)
    say(f"{case.name}: restarting c")
    started = time.monotonic()
    c.start(timeout=120.0)
    assert c.process is not None
    spy = None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen([py_spy(), "record", "--format", "raw", "--nonblocking",
                                "-o", str(profile / f"{case.name}.txt"),
                                "--pid", str(c.process.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listening = time.monotonic() - started
    c_client = s3(c)
    wait("c's listing matches a's", lambda: listing(c_client, prefix) == expected, 900.0,
         every=0.5)
    listed = time.monotonic() - started
    cpu = cpu_seconds(c.process.pid) if c.process is not None else float("nan")
    wait("c healthy", lambda: health(c) == 200, 300.0)
    healthy = time.monotonic() - started
    if spy is not None:
        spy.send_signal(2)
        spy.wait(30)
    return Result(case, listed, cpu, healthy, listening)


def table(results: list[Result]) -> str:
    """The results as a markdown table."""
    lines = ["| case | objects/s | MiB/s | restart to equal listing | health 200 | "
             "listening | CPU of c |", "|---|--:|--:|--:|--:|--:|--:|"]
    for result in results:
        case = result.case
        mib = case.count * case.size / (1 << 20)
        size = (f"{case.size // (1 << 20)} MiB" if case.size >= 1 << 20
                else f"{case.size // 1024} KiB")
        lines.append(
            f"| {case.name}: {case.count} x {size} | {case.count / result.listing_seconds:,.0f}"
            f" | {mib / result.listing_seconds:,.1f} | {result.listing_seconds:.1f} s"
            f" | {result.healthy_seconds:.1f} s | {result.listening_seconds:.1f} s"
            f" | {result.cpu_seconds:.1f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.catch_up", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("small", "large"))
    parser.add_argument("--count", type=int, help="objects of the --only case")
    parser.add_argument("--size-kib", type=int, help="object size of the --only case")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--tmp-dir", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args(argv)
    cases = [Case("small", 3000, 4 * 1024), Case("large", 48, 8 * 1024 * 1024)]
    if args.only:
        cases = [c for c in cases if c.name == args.only]
        if args.count or args.size_kib:
            case = cases[0]
            cases = [Case(case.name, args.count or case.count,
                          (args.size_kib * 1024) if args.size_kib else case.size)]
    workdir = Path(tempfile.mkdtemp(prefix="objstore-catch-up-", dir=args.tmp_dir))
    daemons: dict[str, ListeningDaemon] = {}
    try:
        daemons = start_nodes(workdir, args.backend, {})
        results = [run_case(daemons, case, args.profile) for case in cases]
    finally:
        for daemon in daemons.values():
            try:
                daemon.cleanup()
            except Exception as error:  # noqa: BLE001 (report, go on stopping the others)
                say(f"stopping {daemon.endpoint}: {error}")
        if args.keep:
            say(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n".join(machine_description(REPO)))
    print(f"backend: {args.backend}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
