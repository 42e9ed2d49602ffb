"""The cost of a bucket notification rule on the write path (issue 31: within 15 %).

Usage (from the repository root):
    .venv/bin/python -m bench.notify [--seconds 5] [--rounds 3] [--warmup 2]
                                     [--receivers nginx,python] [--profile DIR]
                                     [--baseline CHECKOUT]

One one-worker daemon (SQLite, fsync on) and one or more local webhook receivers
(bench/receivers.py, each answering 200 and counting what it got): `nginx` (the default:
`return 200`, one worker, an access log line per POST), `asyncio` (a minimal server in its
own process) and `python` (http.server on a thread of this process, the receiver of the
first figures: its CPU per POST is about the daemon's and competes with it for the same
two cores). One bucket per case in the same daemon: `plain` (no configuration) and
`hooked-<receiver>` (a webhook rule for s3:ObjectCreated:* to that receiver, an ad-hoc URL
ARN). A warm-up run of `--warmup` seconds into each case comes first, not counted (the
first run of a daemon was up to a third slower). Rounds alternate wrk runs of 4 KiB PUTs
of new keys at c=32 into each bucket (the order reversed every other round); each prints
ops/s, p50/p99 latency and the daemon's CPU per request during the run; a hooked case
then waits until its receiver counted every event and prints how long that took, the
daemon's CPU per request up to then (`to delivered`: the run's work with all of its
deliveries) and the receiver's CPU per event. The means add the CPU per event: `to
delivered` less plain's CPU per request.
`plain` writes no outbox entry (no consumer is interested in the bucket); `hooked` adds
the entry in the PUT's transaction, the consumer's page into the delivery queue, the POST
and the row marked delivered.

`--baseline CHECKOUT` runs a second daemon from another checkout (its `.venv`'s twistd,
e.g. /work/main: the code before a change) with the same cases, its lines labelled
`before`, every case of both daemons alternating in each round: before/after figures
from one run. `--profile DIR` records the daemon under `py-spy record` (raw, nonblocking, 250 Hz)
during every case of the last round, catch-up included (plain.txt, hooked-nginx.txt ...),
and prints the functions whose time per request grew most from plain to each hooked case
(microseconds of samples per request, inclusive). Profiled rounds are left out of the
means. It never runs in the test suite; `profile_delta` is pure and tested.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/notify.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
from botocore.config import Config as BotoConfig

from bench.catch_up import py_spy
from bench.hotpath import WAITING_LEAVES, _function_name
from bench.receivers import KINDS, Receiver, make_receiver
from bench.report import machine_description
from bench.s3 import S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore
from bench.wrk import WrkRun, run_wrk, write_paths

SMALL_BYTES = 4096
CONNECTIONS = 32
PROFILE_RATE = 250
CATCH_UP_SECONDS = 120.0


def function_samples(lines: Iterable[str]) -> Counter[str]:
    """Samples per function (inclusive, once per stack) of a py-spy raw profile, waiting
    threads left out (as bench.hotpath's summary)."""
    inclusive: Counter[str] = Counter()
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [_function_name(frame) for frame in stack.split(";")]
        if frames[-1] in WAITING_LEAVES:
            continue
        for name in set(frames):
            inclusive[name] += int(count_text)
    return inclusive


def profile_delta(base: Counter[str], base_requests: int, other: Counter[str],
                  other_requests: int, rate: float, top: int = 30
                  ) -> list[tuple[str, float, float]]:
    """(function, base us/request, other us/request) of the `top` functions whose sampled
    time per request grew most from `base` to `other` (`rate` samples per second)."""
    def per_request(samples: int, requests: int) -> float:
        return samples / rate / max(1, requests) * 1e6

    rows = [(name, per_request(base[name], base_requests),
             per_request(other[name], other_requests)) for name in set(base) | set(other)]
    rows.sort(key=lambda row: (row[1] - row[2], row[0]))  # ties by name: a stable table
    return rows[:top]


@dataclass
class Case:
    label: str
    daemon: Objstore
    bucket: str
    receiver: Receiver | None = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2,
                        help="seconds of PUTs into each case first, not counted (0: none)")
    parser.add_argument("--receivers", default="nginx",
                        help=f"comma-separated, of {', '.join(KINDS)} (default nginx)")
    parser.add_argument("--profile", type=Path,
                        help="py-spy the daemon during the last round into DIR")
    parser.add_argument("--baseline", type=Path,
                        help="also run the daemon of this checkout (its .venv), as `before`")
    args = parser.parse_args()
    kinds = [kind.strip() for kind in args.receivers.split(",") if kind.strip()]
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--receivers: a comma-separated list of {', '.join(KINDS)}")
    with tempfile.TemporaryDirectory(prefix="bench-notify-") as tmp:
        workdir = Path(tmp)
        receivers = {kind: make_receiver(kind, workdir) for kind in kinds}
        daemons = {"": Objstore(workdir / "objstore", workers=1)}
        if args.baseline is not None:
            twistd = args.baseline.resolve() / ".venv" / "bin" / "twistd"
            if not twistd.exists():
                parser.error(f"--baseline: no {twistd}")
            daemons["before "] = Objstore(workdir / "objstore-before", workers=1,
                                          twistd=str(twistd))
        try:
            for receiver in receivers.values():
                receiver.start()
            for daemon in daemons.values():
                daemon.start()
            run(daemons, receivers, workdir, args.seconds, args.rounds, args.profile,
                args.warmup)
        finally:
            for daemon in daemons.values():
                daemon.stop()
            for receiver in receivers.values():
                receiver.stop()


def run(daemons: dict[str, Objstore], receivers: dict[str, Receiver], workdir: Path,
        seconds: int, rounds: int, profile: Path | None, warmup: int = 2) -> None:
    cases: list[Case] = []
    for prefix, daemon in daemons.items():
        s3: Any = boto3.client("s3", endpoint_url=daemon.base_url,
                               aws_access_key_id=ROOT_ACCESS_KEY,
                               aws_secret_access_key=ROOT_SECRET_KEY, region_name="us-east-1",
                               config=BotoConfig(s3={"addressing_style": "path"}))
        mine = [Case(f"{prefix}plain", daemon, "plain")] + [
            Case(f"{prefix}hooked-{kind}", daemon, f"hooked-{kind}", receiver)
            for kind, receiver in receivers.items()]
        for case in mine:
            s3.create_bucket(Bucket=case.bucket)
            if case.receiver is not None:
                s3.put_bucket_notification_configuration(
                    Bucket=case.bucket, NotificationConfiguration={"QueueConfigurations": [
                        {"QueueArn": case.receiver.url, "Events": ["s3:ObjectCreated:*"]}]})
        cases += mine
    body = workdir / "small.bin"
    body.write_bytes(os.urandom(SMALL_BYTES))
    print("\n".join(machine_description(Path(__file__).resolve().parents[1])))
    print(f"load at start: {os.getloadavg()[0]:.2f}, receivers: {', '.join(receivers)}")
    serial = 0
    for case in cases if warmup > 0 else ():  # a daemon's first run was slower
        count = warmup * 3000 + CONNECTIONS
        paths = workdir / "case.paths"
        write_paths(paths, S3Target(case.daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
                    .presigned_paths("PUT", case.bucket,
                                     (f"w/{i:08d}" for i in range(serial, serial + count))))
        serial += count
        before_events = case.receiver.count() if case.receiver is not None else 0
        result = run_wrk(WrkRun(case.daemon.base_url, paths, "PUT", workdir / "small.bin",
                                True, warmup, connections=CONNECTIONS, threads=2))
        started = time.monotonic()
        while case.receiver is not None and time.monotonic() - started < CATCH_UP_SECONDS \
                and case.receiver.count() < before_events + result.requests:
            time.sleep(0.05)
        print(f"warm-up {case.label:19s}: {result.requests / result.duration_seconds:7.0f} "
              "ops/s (not counted)", flush=True)
    totals: dict[str, list[float]] = {case.label: [] for case in cases}
    cpu_totals: dict[str, list[float]] = {case.label: [] for case in cases}
    delivered_totals: dict[str, list[float]] = {case.label: [] for case in cases}
    profiled: dict[str, tuple[Counter[str], int]] = {}
    for round_ in range(rounds):
        profiling = profile is not None and round_ == rounds - 1
        for case in cases if round_ % 2 == 0 else cases[::-1]:
            count = seconds * 3000 + CONNECTIONS
            keys = (f"k/{i:08d}" for i in range(serial, serial + count))
            serial += count
            daemon = case.daemon
            target = S3Target(daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
            paths = workdir / "case.paths"
            write_paths(paths, target.presigned_paths("PUT", case.bucket, keys))
            spy = None
            if profiling:
                assert profile is not None and daemon.process is not None
                profile.mkdir(parents=True, exist_ok=True)
                spy = subprocess.Popen(
                    [py_spy(), "record", "--pid", str(daemon.process.pid), "--format", "raw",
                     "--rate", str(PROFILE_RATE), "--nonblocking",
                     "--output", str(profile / f"{case.label.replace(' ', '-')}.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True)
                time.sleep(1)
            receiver = case.receiver
            before_events = receiver.count() if receiver is not None else 0
            receiver_cpu = receiver.cpu_seconds() if receiver is not None else 0.0
            cpu = daemon.cpu_seconds()
            result = run_wrk(WrkRun(daemon.base_url, paths, "PUT", body, True, seconds,
                                    connections=CONNECTIONS, threads=2))
            used = daemon.cpu_seconds() - cpu
            rate = result.requests / result.duration_seconds
            per_request = used / max(1, result.requests) * 1e6
            if not profiling:
                totals[case.label].append(rate)
                cpu_totals[case.label].append(per_request)
            line = (f"round {round_ + 1} {case.label:21s}: {rate:7.0f} ops/s  p50 "
                    f"{result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  "
                    f"{per_request:6.0f} us CPU/request")
            if receiver is not None:
                started = time.monotonic()
                wanted = before_events + result.requests - result.status_errors
                got = receiver.count()
                while got < wanted and time.monotonic() - started < CATCH_UP_SECONDS:
                    time.sleep(0.05)
                    got = receiver.count()
                waited = time.monotonic() - started
                to_delivered = (daemon.cpu_seconds() - cpu) / max(1, result.requests) * 1e6
                if not profiling:
                    delivered_totals[case.label].append(to_delivered)
                receiver_used = receiver.cpu_seconds() - receiver_cpu
                line += (f"  events {got - before_events}/{result.requests} after "
                         f"+{waited:.1f} s; to delivered {to_delivered:5.0f} us CPU/request,"
                         f" receiver {receiver_used / max(1, got - before_events) * 1e6:4.0f}"
                         " us/event")
            if spy is not None:
                time.sleep(0.5)
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
                assert profile is not None
                out = profile / f"{case.label.replace(' ', '-')}.txt"
                if out.exists():
                    profiled[case.label] = (function_samples(out.read_text().splitlines()),
                                            result.requests)
                line += "  (profiled)"
            print(line, flush=True)
    print(f"load at end: {os.getloadavg()[0]:.2f}")
    for prefix in daemons:
        plain = mean(totals[f"{prefix}plain"])
        plain_cpu = mean(cpu_totals[f"{prefix}plain"])
        for case in cases:
            if case.daemon is not daemons[prefix] or case.receiver is None:
                continue
            hooked = mean(totals[case.label])
            print(f"mean: {prefix}plain {plain:.0f} ops/s {plain_cpu:.0f} us CPU/request, "
                  f"{case.label} {hooked:.0f} ops/s {mean(cpu_totals[case.label]):.0f} us "
                  f"CPU/request ({mean(delivered_totals[case.label]):.0f} to delivered): "
                  f"{hooked / plain if plain else 0.0:.2f}x plain; "
                  f"{mean(delivered_totals[case.label]) - plain_cpu:.0f} us CPU per event")
    for case in cases:
        if case.receiver is None or case.label.startswith("before ") or \
                f"before {case.label}" not in totals:
            continue
        before = f"before {case.label}"
        print(f"after/before, {case.label}: {_ratio(totals[case.label], totals[before])} "
              f"ops/s, CPU/request to delivered "
              f"{mean(delivered_totals[case.label]):.0f} against "
              f"{mean(delivered_totals[before]):.0f} us")
    for label, (other, other_requests) in profiled.items():
        base_label = ("before " if label.startswith("before ") else "") + "plain"
        if "hooked" not in label or base_label not in profiled:
            continue
        base, base_requests = profiled[base_label]
        print(f"\n-- functions grown most per request, {base_label} -> {label} "
              "(us of samples per request, inclusive)")
        for name, before_us, after_us in profile_delta(base, base_requests, other,
                                                       other_requests, PROFILE_RATE):
            print(f"{after_us - before_us:+8.0f}  {before_us:7.0f} -> {after_us:7.0f}  {name}")


def _ratio(after: list[float], before: list[float]) -> str:
    return f"{mean(after) / mean(before):.2f}x" if mean(before) else "-"


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


if __name__ == "__main__":
    main()
