"""The cost of a bucket notification rule on the write path (issue 28: at most 15 %).

Usage (from the repository root):
    .venv/bin/python -m bench.notify [--seconds 5] [--rounds 3]

One one-worker daemon (SQLite, fsync on) and a local HTTP receiver (http.server on a
thread, answering 200). Two buckets in the same daemon: `plain` (no configuration) and
`hooked` (a webhook rule for s3:ObjectCreated:* to the receiver, an ad-hoc URL ARN).
Rounds alternate wrk runs of 4 KiB PUTs of new keys at c=32 into each bucket; each prints
ops/s, p50/p99 latency and the daemon's CPU per request, and for `hooked` how long after
the run the receiver had every event. Both buckets pay for the outbox entry (the consumer
is registered on every node); `hooked` adds the queued delivery row and the POST.
It never runs in the test suite.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/notify.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
from botocore.config import Config as BotoConfig

from bench.report import machine_description
from bench.s3 import S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore, free_port
from bench.wrk import WrkRun, run_wrk, write_paths

SMALL_BYTES = 4096
CONNECTIONS = 32


class Receiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.count = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    outer.count += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="bench-notify-") as tmp:
        workdir = Path(tmp)
        daemon = Objstore(workdir / "objstore", workers=1)
        daemon.start()
        try:
            run(daemon, receiver, workdir, args.seconds, args.rounds)
        finally:
            daemon.stop()
            receiver.server.shutdown()


def run(daemon: Objstore, receiver: Receiver, workdir: Path, seconds: int,
        rounds: int) -> None:
    s3: Any = boto3.client("s3", endpoint_url=daemon.base_url,
                           aws_access_key_id=ROOT_ACCESS_KEY,
                           aws_secret_access_key=ROOT_SECRET_KEY, region_name="us-east-1",
                           config=BotoConfig(s3={"addressing_style": "path"}))
    for bucket in ("plain", "hooked"):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_notification_configuration(Bucket="hooked", NotificationConfiguration={
        "QueueConfigurations": [{"QueueArn": f"http://127.0.0.1:{receiver.port}/",
                                 "Events": ["s3:ObjectCreated:*"]}]})
    target = S3Target(daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
    body = workdir / "small.bin"
    body.write_bytes(os.urandom(SMALL_BYTES))
    print("\n".join(machine_description(Path(__file__).resolve().parents[1])))
    serial = 0
    totals: dict[str, list[float]] = {"plain": [], "hooked": []}
    for round_ in range(rounds):
        for bucket in ("plain", "hooked") if round_ % 2 == 0 else ("hooked", "plain"):
            count = seconds * 3000 + CONNECTIONS
            keys = (f"k/{i:08d}" for i in range(serial, serial + count))
            serial += count
            paths = workdir / f"{bucket}.paths"
            write_paths(paths, target.presigned_paths("PUT", bucket, keys))
            before_events = receiver.count
            cpu = daemon.cpu_seconds()
            result = run_wrk(WrkRun(daemon.base_url, paths, "PUT", body, True, seconds,
                                    connections=CONNECTIONS, threads=2))
            used = daemon.cpu_seconds() - cpu
            rate = result.requests / result.duration_seconds
            totals[bucket].append(rate)
            line = (f"round {round_ + 1} {bucket:6s}: {rate:7.0f} ops/s  p50 "
                    f"{result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  "
                    f"{used / max(1, result.requests) * 1e6:6.0f} us CPU/request")
            if bucket == "hooked":
                started = time.monotonic()
                wanted = before_events + result.requests - result.status_errors
                while receiver.count < wanted and time.monotonic() - started < 120:
                    time.sleep(0.05)
                line += (f"  events {receiver.count - before_events}/{result.requests} "
                         f"after +{time.monotonic() - started:.1f} s")
            print(line, flush=True)
    plain = sum(totals["plain"]) / len(totals["plain"])
    hooked = sum(totals["hooked"]) / len(totals["hooked"])
    print(f"mean: plain {plain:.0f} ops/s, hooked {hooked:.0f} ops/s "
          f"({(hooked - plain) / plain * 100:+.1f} %)")


if __name__ == "__main__":
    main()
