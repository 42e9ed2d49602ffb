"""What bucket replication costs a 4 KiB PUT, in one run (`python -m bench.replication`).

Three daemons on loopback (SQLite, fsync on, one worker each): a source with `[replication]
enabled = false` (no outbox entry at all: the write path as before the outbox), a source with
replication on, and the destination. Cases, run in alternating rounds so that the machine's
state weighs on each alike: PUTs of new 4 KiB keys with C client threads into
- `off/plain`: a versioned bucket of the source without replication,
- `on/plain`: a versioned bucket without a rule on the source with replication (the outbox
  entry and the consumer's look at the bucket's rules),
- `on/replicated, dest paused`: a versioned bucket whose rule sends everything to the
  destination, with the destination's processes stopped (SIGSTOP) during the case: the
  write path's own cost (the status lookup, the journal), the worker waiting;
- `on/replicated, dest live`: the same with the destination running: the worker sends
  meanwhile, and on this one machine the destination's work competes with the source's.
Reported: ops/s and p50/p99 latency per case (median of the rounds), and after the last
round how long the journal took to drain (every replicated key on the destination).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from bench.report import machine_description, say
from tests.integration.admin_client import AdminClient
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon
from tests.integration.test_replication import raw_put, rule_xml

BODY = b"r" * 4096


def client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ROOT_ACCESS_KEY,
                        aws_secret_access_key=ROOT_SECRET_KEY, region_name="us-east-1",
                        config=BotoConfig(retries={"max_attempts": 0},
                                          max_pool_connections=64))


def versioned(endpoint: str, bucket: str) -> None:
    s3 = client(endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})


def load(endpoint: str, bucket: str, prefix: str, threads: int, seconds: float
         ) -> tuple[float, float, float, int]:
    """(ops/s, p50 ms, p99 ms, errors) of `threads` writers of new keys for `seconds`."""
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def writer(n: int) -> None:
        nonlocal errors
        s3 = client(endpoint)
        i = 0
        mine: list[float] = []
        failed = 0
        while time.monotonic() < stop:
            start = time.perf_counter()
            try:
                s3.put_object(Bucket=bucket, Key=f"{prefix}/{n}/{i}", Body=BODY)
            except Exception:  # noqa: BLE001 - counted
                failed += 1
            mine.append(time.perf_counter() - start)
            i += 1
        with lock:
            latencies.extend(mine)
            errors += failed

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    began = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - began
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    return len(latencies) / elapsed, p50, p99, errors


def signal_all(node: Daemon, sig: int) -> None:
    for pid in node.pids():
        os.kill(pid, sig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        root = Path(tmp)
        dest = Daemon(root / "dest", workers=1)
        off = Daemon(root / "off", workers=1, extra_config="[replication]\nenabled = false\n")
        on = Daemon(root / "on", workers=1, extra_config="[replication]\ntick_seconds = 0.2\n")
        nodes = (dest, off, on)
        try:
            for node in nodes:
                node.start()
            versioned(off.endpoint, "plain")
            versioned(on.endpoint, "plain")
            versioned(on.endpoint, "replicated")
            versioned(dest.endpoint, "replicated")
            AdminClient(on.endpoint).ok("POST", "/replication/credentials/dest", {
                "access_key_id": ROOT_ACCESS_KEY, "secret_access_key": ROOT_SECRET_KEY})
            raw_put(client(on.endpoint), "replicated",
                    rule_xml(dest.endpoint, "replicated", credential="dest"))
            cases = {"off/plain": (off, "plain", False), "on/plain": (on, "plain", False),
                     "on/replicated, dest paused": (on, "replicated", True),
                     "on/replicated, dest live": (on, "replicated", False)}
            figures: dict[str, list[tuple[float, float, float, int]]] = {c: [] for c in cases}
            for round_ in range(args.rounds):
                for name, (node, bucket, pause) in cases.items():
                    if pause:
                        signal_all(dest, signal.SIGSTOP)
                    try:
                        figures[name].append(load(node.endpoint, bucket,
                                                  f"r{round_}-{len(figures[name])}-{pause}",
                                                  args.threads, args.seconds))
                    finally:
                        if pause:
                            signal_all(dest, signal.SIGCONT)
                    say(f"round {round_ + 1} {name}: {figures[name][-1][0]:.0f} ops/s")
            began = time.monotonic()
            admin = AdminClient(on.endpoint)
            while admin.ok("GET", "/replication/journal?status=PENDING")["total"]:
                time.sleep(0.2)
            drain = time.monotonic() - began
            done = admin.ok("GET", "/replication/journal?status=COMPLETED&limit=1")["total"]
        finally:
            for node in nodes:
                node.cleanup()
    print("\n".join(machine_description(Path(__file__).resolve().parent.parent)))
    print(f"4 KiB PUT of new keys, {args.threads} client threads, {args.rounds} rounds of "
          f"{args.seconds:g} s per case (median of the rounds)\n")
    print("| case | ops/s (each round) | median ops/s | p50 ms | p99 ms | errors |")
    print("|---|---|--:|--:|--:|--:|")
    for name, runs in figures.items():
        rates = ", ".join(f"{r[0]:.0f}" for r in runs)
        print(f"| {name} | {rates} | {statistics.median(r[0] for r in runs):.0f} | "
              f"{statistics.median(r[1] for r in runs):.1f} | "
              f"{statistics.median(r[2] for r in runs):.1f} | {sum(r[3] for r in runs)} |")
    print(f"\nreplicated: {done} entries COMPLETED; the journal drained {drain:.1f} s after "
          "the last round")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
