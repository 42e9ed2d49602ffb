"""What the durable outbox costs a 4 KiB PUT, with moto's rate in the same run
(`python -m bench.outbox`; issue 28: the outbox costs the write path at most 15 %).

One one-worker objstore daemon (SQLite, fsync on, replication on), moto (the `bench`
extra) as the peer S3 server and as the replication destination, and a local HTTP
receiver (http.server on a thread, answering 200) as the webhook. Three versioned buckets
in the same daemon:
- `plain`: no configuration (since the outbox notes only buckets with a notification or
  replication document, no outbox entry);
- `hooked`: a webhook rule for s3:ObjectCreated:* to the receiver (an ad-hoc URL ARN);
- `replicated`: a replication rule sending everything to a bucket of moto.
Rounds alternate wrk runs (4 KiB PUTs of new keys, c=32) into each bucket and into moto;
each prints ops/s, p50/p99 and the server's CPU per request. At the end: the mean of each
case, its ratio to `plain` and to moto. With `--write-path-only` the consumers' far ends
stall (the webhook names a closed port, so deliveries fail and back off; moto is stopped
with SIGSTOP during the `replicated` runs): what remains is the write path's own cost (the
outbox entry, the consumers' reading of it, the journal and delivery rows). It never runs in
the test suite.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/outbox.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
import urllib3
from botocore.config import Config as BotoConfig

from bench.notify import Receiver
from bench.report import machine_description
from bench.s3 import S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Moto, Objstore, free_port
from bench.wrk import WrkRun, run_wrk, write_paths
from objstore.http import sigv4

SMALL_BYTES = 4096
CONNECTIONS = 32
CASES = ("plain", "hooked", "replicated", "moto")


def client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ROOT_ACCESS_KEY,
                        aws_secret_access_key=ROOT_SECRET_KEY, region_name="us-east-1",
                        config=BotoConfig(s3={"addressing_style": "path"}))


def put_replication(endpoint: str, bucket: str, xml: str) -> None:
    """PUT ?replication with our own XML (botocore's model has no Endpoint element)."""
    url = f"{endpoint}/{bucket}?replication="
    body = xml.encode()
    headers = {"content-md5": base64.b64encode(hashlib.md5(body).digest()).decode()}
    headers.update(sigv4.sign_headers("PUT", url, headers, hashlib.sha256(body).hexdigest(),
                                      ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1",
                                      datetime.datetime.now(datetime.UTC)))
    answer = urllib3.request("PUT", url, body=body, headers=headers)
    if answer.status != 200:
        raise RuntimeError(f"PutBucketReplication: {answer.status} {answer.data!r}")


def prepare(daemon: Objstore, moto: Moto, receiver: Receiver, hook_port: int) -> None:
    from tests.integration.admin_client import AdminClient
    from tests.integration.test_replication import rule_xml

    s3 = client(daemon.base_url)
    for bucket in ("plain", "hooked", "replicated"):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket,
                                 VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_notification_configuration(Bucket="hooked", NotificationConfiguration={
        "QueueConfigurations": [{"QueueArn": f"http://127.0.0.1:{hook_port}/",
                                 "Events": ["s3:ObjectCreated:*"]}]})
    peer = client(moto.base_url)
    peer.create_bucket(Bucket="bench")
    peer.put_bucket_versioning(Bucket="bench", VersioningConfiguration={"Status": "Enabled"})
    AdminClient(daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY).ok(
        "POST", "/replication/credentials/moto",
        {"access_key_id": ROOT_ACCESS_KEY, "secret_access_key": ROOT_SECRET_KEY})
    put_replication(daemon.base_url, "replicated", rule_xml(moto.base_url, "bench", "moto"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-path-only", action="store_true")
    args = parser.parse_args()
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="bench-outbox-") as tmp:
        workdir = Path(tmp)
        daemon = Objstore(workdir / "objstore", workers=1)
        moto = Moto(workdir / "moto")
        daemon.start()
        moto.start()
        try:
            prepare(daemon, moto, receiver,
                    free_port() if args.write_path_only else receiver.port)
            run(daemon, moto, workdir, args.seconds, args.rounds, args.write_path_only)
        finally:
            daemon.stop()
            moto.stop()
            receiver.server.shutdown()


def run(daemon: Objstore, moto: Moto, workdir: Path, seconds: int, rounds: int,
        stall: bool) -> None:
    targets = {"objstore": S3Target(daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY),
               "moto": S3Target(moto.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)}
    body = workdir / "small.bin"
    body.write_bytes(os.urandom(SMALL_BYTES))
    print("\n".join(machine_description(Path(__file__).resolve().parents[1])))
    serial = 0
    rates: dict[str, list[float]] = {case: [] for case in CASES}
    cpus: dict[str, list[float]] = {case: [] for case in CASES}
    for round_ in range(rounds):
        order = CASES if round_ % 2 == 0 else tuple(reversed(CASES))
        for case in order:
            server: Objstore | Moto = moto if case == "moto" else daemon
            target = targets["moto" if case == "moto" else "objstore"]
            bucket = "bench" if case == "moto" else case
            count = seconds * 3000 + CONNECTIONS
            keys = (f"k/{i:08d}" for i in range(serial, serial + count))
            serial += count
            paths = workdir / f"{case}.paths"
            write_paths(paths, target.presigned_paths("PUT", bucket, keys))
            cpu = server.cpu_seconds()
            paused = stall and case == "replicated" and moto.process is not None
            if paused:
                os.killpg(moto.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                result = run_wrk(WrkRun(server.base_url, paths, "PUT", body, True, seconds,
                                        connections=CONNECTIONS, threads=2))
            finally:
                if paused:
                    os.killpg(moto.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
            used = daemon.cpu_seconds() - cpu if case != "moto" else server.cpu_seconds() - cpu
            rate = result.requests / result.duration_seconds
            per_request = used / max(1, result.requests) * 1e6
            rates[case].append(rate)
            cpus[case].append(per_request)
            print(f"round {round_ + 1} {case:10s}: {rate:7.0f} ops/s  p50 "
                  f"{result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  "
                  f"{per_request:6.0f} us CPU/request  errors {result.status_errors}",
                  flush=True)
    plain = statistics.mean(rates["plain"])
    plain_cpu = statistics.mean(cpus["plain"])
    peer = statistics.mean(rates["moto"])
    for case in CASES:
        rate, cpu = statistics.mean(rates[case]), statistics.mean(cpus[case])
        print(f"mean {case:10s}: {rate:7.0f} ops/s ({(rate - plain) / plain * 100:+.1f} % "
              f"vs plain, {rate / peer:.2f}x moto)  {cpu:6.0f} us CPU/request "
              f"({(cpu - plain_cpu) / plain_cpu * 100:+.1f} % vs plain)")


if __name__ == "__main__":
    main()
