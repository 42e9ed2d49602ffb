"""The soak: a real daemon under a steady mixed load for a long time, and whether its memory,
file descriptors and latency stay flat.

Usage (from the repository root):
    .venv/bin/python -m bench.soak [--minutes 30] [--workers N] [--clients 4] [--rate 40]
                                   [--interval 10] [--out FILE]

It starts the daemon as bench/run.py does (`bench.servers.Objstore`: twistd, SQLite, fsync
on, loopback only), and `--clients` threads, each with its own keep-alive connection and
its own keys, drive a paced mix of PutObject (4 KiB and 8 MiB), GetObject, HeadObject,
ListObjectsV2, DeleteObject, CopyObject, object tagging and multipart uploads. Every
`--interval` seconds it reads the RSS and the open file descriptors of each process of the
daemon's tree (bench/proctree.py) and the p50/p99 of the requests answered meanwhile. At the
end it prints one table (last third of the run beside the first third, after a warm-up),
and a verdict; it exits 1 when a check fails.

This module owns the load and the sampling; the verdict rules and the table are pure
functions in bench/soak_verdict.py (unit-tested in tests/unit/test_bench_soak.py).
Bounded: every socket operation has a timeout, each client keeps at most `--max-objects`
objects, and the run ends after `--minutes`. Ctrl-C or SIGTERM stops the daemon; the
temporary directory is deleted unless --keep. It is never part of the test suite.
"""

from __future__ import annotations

import argparse
import http.client
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

if __package__ in (None, ""):  # `python bench/soak.py`: make `bench` and `objstore` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proctree import label_of, memory_of, open_fds, tree_of
from bench.report import begin_command, format_table, release_workdir, say
from bench.s3 import S3Session, S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore
from bench.soak_verdict import (
    LARGE_FROM_BYTES,
    SERIES_HEADER,
    Interval,
    Limits,
    Reading,
    Timing,
    count_tracebacks,
    default_warmup_seconds,
    interval_line,
    interval_of,
    readings,
    summary_rows,
    verdict,
)
from bench.upload import (
    MIB,
    Answer,
    Connection,
    PartPlan,
    Pattern,
    complete_body,
    object_path,
    xml_text,
)

REPO = Path(__file__).resolve().parents[1]
BUCKET = "bench-soak"
SMALL_BYTES = 4096
LARGE_BYTES = 8 * MIB
PARTS = (PartPlan(1, 0, 5 * MIB), PartPlan(2, 5 * MIB, MIB))  # S3's smallest non-last part
SOCKET_TIMEOUT_SECONDS = 60.0
# What a client does next, and how often (weights). Each client owns its keys, so every
# answer is known in advance: anything else is a failed request.
MIX = (("put-small", 20), ("get", 25), ("head", 15), ("list", 8), ("delete", 12),
       ("copy", 6), ("tagging", 6), ("put-large", 3), ("multipart", 2))


# -- the load ------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Every request's timing, and the first failures in words; shared by the clients."""

    started: float = field(default_factory=time.monotonic)
    timings: list[Timing] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, large: bool, seconds: float, failure: str | None) -> None:
        timing = Timing(time.monotonic() - self.started, kind, large, seconds * 1e3,
                        failure is None)
        with self._lock:
            self.timings.append(timing)
            if failure is not None and len(self.failures) < 20:
                self.failures.append(failure)

    def snapshot(self) -> list[Timing]:
        with self._lock:
            return list(self.timings)


class Client:
    """One client: a keep-alive connection, its own keys (`c<N>/...`), and a paced loop
    that starts an operation every `period_seconds` (at once when the last one was late)."""

    def __init__(self, number: int, target: S3Target, recorder: Recorder,
                 period_seconds: float, max_objects: int, stop: threading.Event) -> None:
        self.prefix = f"c{number}/"
        self.target = target
        self.recorder = recorder
        self.period_seconds = period_seconds
        self.max_objects = max_objects
        self.stop = stop
        self.random = random.Random(number)
        self.pattern = Pattern(self.random.randbytes(MIB + 4099))
        self.small_body = self.random.randbytes(SMALL_BYTES)
        self.objects: list[tuple[str, int]] = []  # (key, size) of what this client holds
        self.written = 0
        self.conn: Connection | None = None
        self.operations = {"put-small": self.put_small, "put-large": self.put_large,
                           "get": self.get, "head": self.head, "list": self.list,
                           "delete": self.delete, "copy": self.copy, "tagging": self.tagging,
                           "multipart": self.multipart}

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stop.is_set():
            try:
                self.step()
            except Exception as error:  # noqa: BLE001 -- a harness fault is reported, not fatal
                self.recorder.add("harness", False, 0.0, f"harness: {type(error).__name__}: "
                                                         f"{error}")
            next_at = max(next_at + self.period_seconds, time.monotonic())
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        if self.conn is not None:
            self.conn.close()

    def step(self) -> None:
        if not self.objects:
            name = "put-small"
        elif len(self.objects) >= self.max_objects:
            name = "delete"
        else:
            name = self.random.choices([n for n, _ in MIX], [w for _, w in MIX])[0]
        self.operations[name]()

    def send(self, kind: str, large: bool, method: str, path: str,
             body: bytes | Iterator[memoryview] | None = None, length: int | None = None,
             headers: dict[str, str] | None = None, expect: int = 200,
             valid: Callable[[Answer], bool] = lambda answer: True) -> Answer | None:
        """One request, timed and recorded; its answer, or None when it failed."""
        started = time.perf_counter()
        try:
            if self.conn is None:
                self.conn = Connection(self.target, SOCKET_TIMEOUT_SECONDS)
            answer = self.conn.request(method, path, body, length, headers)
        except (OSError, http.client.HTTPException) as error:
            if self.conn is not None:
                self.conn.close()
                self.conn = None  # a new connection for the next request
            self.recorder.add(kind, large, time.perf_counter() - started,
                              f"{kind} {path.split('?')[0]}: {type(error).__name__}: {error}")
            return None
        good = answer.status == expect and valid(answer)
        self.recorder.add(kind, large, answer.seconds, None if good else
                          f"{kind} {path.split('?')[0]}: {answer.status} "
                          f"{answer.body[:200]!r}")
        return answer if good else None

    def _new_key(self) -> str:
        self.written += 1
        return f"{self.prefix}{self.written:08d}"

    def _pick(self) -> tuple[str, int]:
        return self.objects[self.random.randrange(len(self.objects))]

    def put_small(self) -> None:
        key = self._new_key()
        if self.send("PUT 4 KiB", False, "PUT", object_path(BUCKET, key), self.small_body):
            self.objects.append((key, SMALL_BYTES))

    def put_large(self) -> None:
        key = self._new_key()
        if self.send("PUT 8 MiB", True, "PUT", object_path(BUCKET, key),
                     self.pattern.chunks(0, LARGE_BYTES), LARGE_BYTES):
            self.objects.append((key, LARGE_BYTES))

    def get(self) -> None:
        key, size = self._pick()
        large = size >= LARGE_FROM_BYTES
        self.send("GET large" if large else "GET small", large, "GET",
                  object_path(BUCKET, key), valid=lambda answer: len(answer.body) == size)

    def head(self) -> None:
        key, size = self._pick()
        self.send("HEAD", False, "HEAD", object_path(BUCKET, key),
                  valid=lambda answer: answer.headers.get("content-length") == str(size))

    def list(self) -> None:
        query = f"list-type=2&max-keys=100&prefix={quote(self.prefix, safe='')}"
        self.send("LIST", False, "GET", f"/{BUCKET}?{query}",
                  valid=lambda answer: b"<ListBucketResult" in answer.body)

    def delete(self) -> None:
        index = self.random.randrange(len(self.objects))
        key, _ = self.objects[index]
        if self.send("DELETE", False, "DELETE", object_path(BUCKET, key), expect=204):
            self.objects[index] = self.objects[-1]
            self.objects.pop()

    def copy(self) -> None:
        source, size = self._pick()
        key = self._new_key()
        if self.send("COPY", size >= LARGE_FROM_BYTES, "PUT", object_path(BUCKET, key),
                     headers={"x-amz-copy-source": f"/{BUCKET}/{quote(source)}"},
                     valid=lambda answer: b"<CopyObjectResult" in answer.body):
            self.objects.append((key, size))

    def tagging(self) -> None:
        key, _ = self._pick()
        value = f"v{self.written}"
        document = ('<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag>'
                    f"<Key>soak</Key><Value>{value}</Value></Tag></TagSet></Tagging>").encode()
        path = object_path(BUCKET, key, "tagging")
        if self.send("PUT tagging", False, "PUT", path, document):
            self.send("GET tagging", False, "GET", path,
                      valid=lambda answer: value.encode() in answer.body)

    def multipart(self) -> None:
        key = self._new_key()
        answer = self.send("multipart: create", False, "POST",
                           object_path(BUCKET, key, "uploads="), b"",
                           valid=lambda answer: bool(xml_text(answer.body, "UploadId")))
        if answer is None:
            return
        upload = quote(xml_text(answer.body, "UploadId") or "")
        etags = []
        for part in PARTS:
            path = object_path(BUCKET, key, f"partNumber={part.number}&uploadId={upload}")
            sent = self.send("multipart: part", part.size_bytes >= LARGE_FROM_BYTES, "PUT",
                             path, self.pattern.chunks(part.offset, part.size_bytes),
                             part.size_bytes, valid=lambda answer: "etag" in answer.headers)
            if sent is None:
                return  # the upload stays open: the daemon's lifecycle is not under test
            etags.append((part.number, sent.headers["etag"]))
        if self.send("multipart: complete", False, "POST",
                     object_path(BUCKET, key, f"uploadId={upload}"), complete_body(etags),
                     valid=lambda answer: b"CompleteMultipartUploadResult" in answer.body):
            self.objects.append((key, sum(part.size_bytes for part in PARTS)))


def sample(root: int) -> tuple[Reading, ...]:
    return readings(tree_of(root), label_of, lambda pid: memory_of(pid)["VmRSS"], open_fds)


def drive(daemon: Objstore, args: argparse.Namespace) -> tuple[list[Interval], Recorder]:
    """The load for `--minutes`, a sample every `--interval` seconds."""
    assert daemon.process is not None
    target = S3Target(daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
    S3Session(target).create_bucket(BUCKET)
    recorder, stop = Recorder(), threading.Event()
    period = args.clients / args.rate if args.rate > 0 else 0.0
    threads = [threading.Thread(target=Client(n, target, recorder, period, args.max_objects,
                                              stop).run, name=f"soak-client-{n}", daemon=True)
               for n in range(args.clients)]
    for thread in threads:
        thread.start()
    duration = args.minutes * 60
    intervals: list[Interval] = []
    say(SERIES_HEADER)
    try:
        start = 0.0
        while start < duration:
            end = min(start + args.interval, duration)
            time.sleep(max(0.0, recorder.started + end - time.monotonic()))
            intervals.append(interval_of(start, end, sample(daemon.process.pid),
                                         recorder.snapshot()))
            say(interval_line(intervals[-1]))
            start = end
    finally:
        stop.set()
        for thread in threads:
            thread.join(SOCKET_TIMEOUT_SECONDS + 10)
    return intervals, recorder


# -- the command ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run (30)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes of the daemon (default: its own, one per CPU)")
    parser.add_argument("--clients", type=int, default=4,
                        help="concurrent clients, one connection each (4)")
    parser.add_argument("--rate", type=float, default=40.0,
                        help="operations per second started by all clients together; "
                             "0: each client as fast as it can (40)")
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between samples (10)")
    parser.add_argument("--warmup-seconds", type=float, default=None,
                        help="samples left out of the verdict (a tenth of the run, at most 120)")
    parser.add_argument("--max-objects", type=int, default=100,
                        help="objects each client keeps at most; then it deletes (100)")
    parser.add_argument("--out", type=Path, help="also write the results as markdown here")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="parent of the run's temporary directory (use a real disk)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.interval <= 0 or args.clients < 1 or args.rate < 0:
        parser.error("--minutes, --interval and --clients must be positive, --rate not negative")
    if args.max_objects < 1:
        parser.error("--max-objects must be at least 1")
    return args


def report(args: argparse.Namespace, intervals: list[Interval], recorder: Recorder,
           tracebacks: int) -> tuple[list[str], list[str], bool]:
    """The results of a run in markdown: the settings, table and verdict; the samples; and
    whether every check passed."""
    warmup = (args.warmup_seconds if args.warmup_seconds is not None
              else default_warmup_seconds(args.minutes * 60))
    limits = Limits(warmup)
    checks = verdict(intervals, limits, tracebacks)
    table = format_table(summary_rows(intervals, recorder.snapshot(), limits, checks),
                         baseline_name="first third", measured_name="last third")
    settings = (f"{args.minutes:g} min, {args.clients} clients, rate {args.rate:g} ops/s, a "
                f"sample every {args.interval:g} s, the first {warmup:g} s left out of the "
                f"verdict; daemon workers: {args.workers or 'default (one per CPU)'}")
    results = [f"- run: {settings}", "", table, "",
               *(f"- {'PASS' if c.passed else 'FAIL'}: {c.name}: {c.detail}" for c in checks),
               *(f"- failure: {failure}" for failure in recorder.failures)]
    series = ["Samples (p50/p99 of small requests, large p99 of transfers of 1 MiB or more; "
              "RSS summed over the tree, MB = 10^6 bytes):", "", SERIES_HEADER,
              *map(interval_line, intervals)]
    return results, series, all(check.passed for check in checks)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = begin_command(REPO)
    workdir = Path(tempfile.mkdtemp(prefix="objstore-bench-soak-", dir=args.tmp_dir))
    try:
        daemon = Objstore(workdir / "objstore", workers=args.workers)
        try:
            daemon.start()
            intervals, recorder = drive(daemon, args)
        finally:
            daemon.stop()
        tracebacks = count_tracebacks(daemon.log_path.read_text(errors="replace"))
    except KeyboardInterrupt:
        print("interrupted: the daemon has been stopped", file=sys.stderr)
        return 130
    finally:
        release_workdir(workdir, args.keep)
    results, series, passed = report(args, intervals, recorder, tracebacks)
    say("\n" + "\n".join(results))
    if args.out is not None:
        args.out.write_text("\n".join([*(f"- {line}" for line in header), *results, "",
                                       *series]) + "\n")
        say(f"\nwritten to {args.out}")
    say(f"\nverdict: {'flat, no failures' if passed else 'FAILED'}")
    return 0 if passed else 1

if __name__ == "__main__":
    sys.exit(main())
