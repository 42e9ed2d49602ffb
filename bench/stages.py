"""Encryption and compression beside plain, in one run: 64 MiB PUT and GET and 4 KiB PUT
into a plain bucket, an SSE-S3 one (bucket default encryption) and a zstd one (level 3), on
one daemon with [encryption] enabled; then the raw speed of the stages on this machine
(AES-256-GCM 64 KiB packages, zstd chunks, MD5 and SHA-256 for scale). Prints one table.

    .venv/bin/python -m bench.stages [--runs 3] [--seconds 5] [--rounds 3] [--out FILE]

The kinds take turns within each 64 MiB run and each 4 KiB round, in an order rotated by
one each time (plain first, then SSE-S3 first, ...), and the table gives medians: on a
shared machine whose load moves during the run, a change falls on every kind alike. The
64 MiB bodies are half compressible (log-like lines with random bytes between them), the
same for every bucket; PUTs are header-signed with the payload's SHA-256 (the server
computes MD5 and SHA-256), GETs presigned; 4 KiB PUTs are wrk at c=32 on new keys.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from twisted.internet.defer import Deferred

from bench.run import CpuMeter, curl_mib_per_second
from bench.s3 import S3Session, S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore
from bench.wrk import WrkRun, run_wrk, write_paths
from objstore.blobs.factory import BlobStages
from objstore.blobs.plan import SSE_S3, StagePlan
from objstore.blobs.zchunks import ChunkCompressor, DecompressingSource
from objstore.crypto.master_key import LocalMasterKey
from objstore.crypto.packages import (
    PACKAGE_STORED,
    PackageEncryptor,
    open_package,
)
from objstore.http import sigv4

MIB = 1024 * 1024
LARGE = 64 * MIB
SMALL = 4096
BUCKETS = {"plain": "bench-plain", "SSE-S3": "bench-sse", "zstd": "bench-zstd"}
_ENCRYPTION_XML = (b'<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionBy'
                   b'Default><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionBy'
                   b'Default></Rule></ServerSideEncryptionConfiguration>')


def half_compressible(size: int) -> bytes:
    lines = b"".join(b"GET /bucket/key-%06d 200 4096 bytes in 0.%03d s\n" % (i, i % 997)
                     for i in range(800))
    chunk = lines + os.urandom(len(lines) // 2)
    return (chunk * (size // len(chunk) + 1))[:size]


# -- the raw stages ---------------------------------------------------------------------


def _rate(seconds: float, size: int = LARGE) -> float:
    return size / seconds / MIB


def raw_rows(data: bytes) -> list[tuple[str, float]]:
    rows = []
    start = time.perf_counter()
    encryptor = PackageEncryptor(os.urandom(32))
    for at in range(0, len(data), MIB):
        encryptor.transform(data[at:at + MIB])
    encryptor.finish()
    rows.append(("AES-256-GCM seal, 64 KiB packages", _rate(time.perf_counter() - start)))
    key = os.urandom(32)  # sealed again under a known key, to time opening
    encryptor = PackageEncryptor(key)
    stored = b"".join(encryptor.transform(data[at:at + MIB])
                      for at in range(0, len(data), MIB)) + encryptor.finish()
    cipher = AESGCM(key)
    count = -(-len(stored) // PACKAGE_STORED)
    start = time.perf_counter()
    for seq in range(count):
        open_package(cipher, seq, stored[seq * PACKAGE_STORED:(seq + 1) * PACKAGE_STORED],
                     seq == count - 1)
    rows.append(("AES-256-GCM open, 64 KiB packages", _rate(time.perf_counter() - start)))
    start = time.perf_counter()
    compressor = ChunkCompressor(3)
    compressed = b"".join(compressor.transform(data[at:at + MIB])
                          for at in range(0, len(data), MIB)) + compressor.finish()
    rows.append((f"zstd level 3 compress (ratio {len(data) / len(compressed):.2f})",
                 _rate(time.perf_counter() - start)))

    class _Bytes:
        def read(self, offset: int, length: int) -> bytes:
            return compressed[offset:offset + length]

        def close(self) -> None:
            pass

    source = DecompressingSource(_Bytes(), len(compressed), len(data))
    start = time.perf_counter()
    for at in range(0, len(data), MIB):
        source.read(at, min(MIB, len(data) - at))
    rows.append(("zstd decompress", _rate(time.perf_counter() - start)))
    for name in ("md5", "sha256"):
        start = time.perf_counter()
        hashlib.new(name, data).digest()
        rows.append((f"{name.upper()} (for scale)", _rate(time.perf_counter() - start)))
    return rows


class _PolledRunner:
    """A pool runner for `reactor_seconds`: jobs run on a worker thread, their Deferreds
    fire on the calling thread when it polls (as `callFromThread` would on the reactor)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=2)
        self._pending: list[tuple[Future[Any], Deferred[Any]]] = []

    def run(self, fn: Any, *args: Any) -> Deferred[Any]:
        done: Deferred[Any] = Deferred()
        self._pending.append((self._pool.submit(fn, *args), done))
        return done

    def poll(self, wait: bool = False) -> bool:
        """Fire what finished; True while jobs remain."""
        for future, done in list(self._pending):
            if wait:
                future.result()
            if future.done():
                self._pending.remove((future, done))
                done.callback(future.result())
        return bool(self._pending)


def reactor_rows(data: bytes) -> list[tuple[str, float]]:
    """CPU seconds the receiving (reactor) thread spends on a 64 MiB SSE-S3 body written
    in 64 KiB pieces: hashed and sealed inline, or through the pipeline."""
    stages = BlobStages(LocalMasterKey(os.urandom(32)))
    plan = StagePlan(encryption=SSE_S3, key_id=stages.key_id)
    rows = []
    for name, runner in (("inline (before)", None), ("pipelined", _PolledRunner())):
        with tempfile.TemporaryDirectory() as tmp:
            writer = stages.writer(tmp, plan, hash_runner=runner, want_sha256=True)
            spent = 0.0
            for at in range(0, len(data), 64 * 1024):
                start = time.thread_time()
                writer.write(data[at:at + 64 * 1024])
                if runner is not None:
                    runner.poll()
                spent += time.thread_time() - start
            start = time.thread_time()
            writer.end()
            spent += time.thread_time() - start
            while runner is not None and runner.poll(wait=True):
                pass
            writer.close()
        rows.append((f"reactor-thread CPU per 64 MiB SSE-S3 body, {name}", spent))
    return rows


# -- through the daemon -----------------------------------------------------------------


def _admin(target: S3Target, method: str, path: str, body: bytes) -> None:
    url = f"{target.base_url}/admin{path}"
    headers = {"content-type": "application/json"}
    headers.update(sigv4.sign_headers(method, url, headers, hashlib.sha256(body).hexdigest(),
                                      target.access_key, target.secret_key, "us-east-1",
                                      datetime.datetime.now(datetime.UTC)))
    answer = urllib3.request(method, url, body=body, headers=headers)
    if answer.status != 200:
        raise RuntimeError(f"{method} {path}: {answer.status} {answer.data[:200]!r}")


def _prepare(target: S3Target, session: S3Session) -> None:
    for bucket in BUCKETS.values():
        session.create_bucket(bucket)
    path = f"/{BUCKETS['SSE-S3']}?encryption"
    headers = target.signed_headers("PUT", path, hashlib.sha256(_ENCRYPTION_XML).hexdigest())
    answer = urllib3.request("PUT", target.base_url + path, body=_ENCRYPTION_XML,
                             headers=headers)
    if answer.status != 200:
        raise RuntimeError(f"PutBucketEncryption: {answer.status} {answer.data[:200]!r}")
    _admin(target, "PUT", f"/buckets/{BUCKETS['zstd']}/compression",
           json.dumps({"algorithm": "zstd", "level": 3}).encode())


def _turns(run: int) -> list[tuple[str, str]]:
    """The kinds in the order of run `run`: rotated by one each run, so that no kind is
    always the first after a pause or the one after another's backlog."""
    kinds = list(BUCKETS.items())
    at = run % len(kinds)
    return kinds[at:] + kinds[:at]


def large_rows(server: Objstore, target: S3Target, body: Path, runs: int
               ) -> dict[str, tuple[float, float, float, float]]:
    """Per kind: PUT MiB/s, its server CPU cores, GET MiB/s, its server CPU cores (medians).
    The kinds take turns within each run (`_turns`), so that a change of the machine's
    load during the run falls on every kind alike."""
    sha256 = hashlib.sha256(body.read_bytes()).hexdigest()
    figures: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {
        kind: ([], [], [], []) for kind in BUCKETS}
    for run in range(runs):
        for kind, bucket in _turns(run):
            puts, put_cpu, gets, get_cpu = figures[kind]
            path = f"/{bucket}/big-{run}"
            meter = CpuMeter(server)
            puts.append(curl_mib_per_second(server.base_url + path, body,
                                            target.signed_headers("PUT", path, sha256)))
            put_cpu.append(meter.cores())
            url = server.base_url + target.presigned_path(
                "GET", bucket, f"big-{run}", datetime.datetime.now(datetime.UTC))
            meter = CpuMeter(server)
            gets.append(curl_mib_per_second(url, None, {}))
            get_cpu.append(meter.cores())
    median = statistics.median
    return {kind: (median(puts), median(put_cpu), median(gets), median(get_cpu))
            for kind, (puts, put_cpu, gets, get_cpu) in figures.items()}


def small_rows(server: Objstore, target: S3Target, workdir: Path, seconds: int,
               rounds: int = 1) -> dict[str, tuple[float, float, float]]:
    """Per kind: 4 KiB PUT ops/s, p99 ms, server CPU cores (wrk, c=32, new keys): medians
    of `rounds` rounds in which the kinds take turns."""
    body = workdir / "small.bin"
    body.write_bytes(os.urandom(SMALL))
    figures: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in BUCKETS}
    for round_ in range(rounds):
        for kind, bucket in _turns(round_):
            paths = workdir / f"{bucket}.paths"
            count = seconds * 3000 + 32
            write_paths(paths, target.presigned_paths(
                "PUT", bucket, (f"small/{round_}/{i:07d}" for i in range(count))))
            meter = CpuMeter(server)
            result = run_wrk(WrkRun(server.base_url, paths, "PUT", body, True, seconds,
                                    connections=32, threads=2))
            figures[kind].append((result.ops_per_second, result.p99_ms, meter.cores()))
    median = statistics.median
    return {kind: (median(f[0] for f in rows), median(f[1] for f in rows),
                   median(f[2] for f in rows)) for kind, rows in figures.items()}


def table(large: dict[str, tuple[float, float, float, float]],
          small: dict[str, tuple[float, float, float]], raw: list[tuple[str, float]],
          reactor: list[tuple[str, float]]) -> str:
    lines = ["| workload | plain | SSE-S3 | zstd | SSE-S3 / plain | zstd / plain |",
             "|---|---|---|---|---|---|"]

    def row(name: str, values: list[float], unit: str, cpu: list[float] | None = None
            ) -> None:
        shown = [f"{v:,.1f} {unit}" + (f" ({c:.2f} cores)" if cpu else "")
                 for v, c in zip(values, cpu or [0.0] * 3, strict=True)]
        lines.append(f"| {name} | {' | '.join(shown)} | {values[1] / values[0]:.2f} | "
                     f"{values[2] / values[0]:.2f} |")

    kinds = list(BUCKETS)
    row("64 MiB PUT", [large[k][0] for k in kinds], "MiB/s", [large[k][1] for k in kinds])
    row("64 MiB GET", [large[k][2] for k in kinds], "MiB/s", [large[k][3] for k in kinds])
    row("4 KiB PUT, new keys, c=32", [small[k][0] for k in kinds], "ops/s",
        [small[k][2] for k in kinds])
    row("4 KiB PUT, p99", [small[k][1] for k in kinds], "ms")
    lines += ["", "| raw stage, one core, 64 MiB | MiB/s |", "|---|---|"]
    lines += [f"| {name} | {rate:,.0f} |" for name, rate in raw]
    lines += ["", "| receiving thread | CPU seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds:.3f} |" for name, seconds in reactor]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="64 MiB transfers per kind")
    parser.add_argument("--seconds", type=int, default=5, help="wrk seconds per 4 KiB run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="4 KiB rounds (the kinds take turns; medians)")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--tmp-dir", default=None, help="parent of the run's directory")
    parser.add_argument("--local", action="store_true",
                        help="only the in-process rows (raw stages, receiving thread)")
    args = parser.parse_args(argv)
    data = half_compressible(LARGE)
    if args.local:
        for name, value in raw_rows(data) + reactor_rows(data):
            print(f"{name}: {value:,.3f}")
        return 0
    with tempfile.TemporaryDirectory(prefix="objstore-bench-stages-",
                                     dir=args.tmp_dir) as tmp:
        workdir = Path(tmp)
        body = workdir / "large.bin"
        body.write_bytes(data)
        server = Objstore(workdir / "objstore", extra="[encryption]\nenabled = true\n")
        server.start()
        try:
            target = S3Target(server.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
            _prepare(target, S3Session(target))
            print("-- 64 MiB transfers", flush=True)
            large = large_rows(server, target, body, args.runs)
            print("-- 4 KiB PUTs", flush=True)
            small = small_rows(server, target, workdir, args.seconds, args.rounds)
        finally:
            server.stop()
    print("-- raw stages", flush=True)
    text = table(large, small, raw_rows(data), reactor_rows(data))
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
