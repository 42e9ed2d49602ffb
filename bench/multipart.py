"""The multipart benchmark: how long CompleteMultipartUpload of 1 GiB in 100 parts takes.

Usage (from the repository root):
    .venv/bin/python -m bench.multipart [--size-mib 1024] [--parts 100] [--runs 3] [--out F]

It starts the daemon as bench/run.py does (twistd, SQLite, fsync on, loopback only), then
for each run uploads a new key in `--parts` parts (`--concurrency` at a time, each body
generated while it is sent from a random pattern whose period divides no part), and times
CompleteMultipartUpload from sending the request to the last byte of the answer, while
reading the daemon's I/O counters (a completion that rewrote the data would write the whole
object again). Each result is checked: HEAD (size, ETag `"<md5 of the part MD5s>-N"`) and
ranged GETs across part boundaries compared byte for byte with the pattern.

Bounded: every socket operation has a timeout. Ctrl-C or SIGTERM stops the daemon; the
temporary directory is deleted at the end unless --keep. It is never part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python bench/multipart.py`: make `bench` and `objstore` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proctree import cpu_seconds_of, io_of
from bench.report import Row, begin_command, format_table, release_workdir, say
from bench.s3 import S3Session, S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore
from bench.upload import (
    MIB,
    Connection,
    PartPlan,
    Pattern,
    boundary_range,
    complete,
    initiate,
    multipart_etag,
    object_path,
    part_md5s,
    plan_parts,
    upload_part,
)

REPO = Path(__file__).resolve().parents[1]
BUCKET = "bench-multipart"
TARGET_COMPLETE_MS = 1000.0
SOCKET_TIMEOUT_SECONDS = 120.0
RANGE_SPAN_BYTES = 64 * 1024
PATTERN_PERIOD_BYTES = MIB + 4099  # prime to the part sizes: each part's bytes differ


@dataclass(frozen=True)
class RunResult:
    key: str
    upload_seconds: float  # all parts
    complete_ms: float
    complete_write_bytes: int  # the daemon's block-device writes during Complete
    complete_wchar: int  # bytes it passed to write() meanwhile (page cache included)
    complete_rchar: int  # bytes it passed to read()
    complete_cpu_seconds: float
    head_ok: bool
    ranges_ok: int
    ranges: int
    problems: tuple[str, ...] = ()


def summary_rows(results: list[RunResult], size_bytes: int, parts: int,
                 concurrency: int) -> list[Row]:
    """The table: Complete's median and slowest beside the 1 s target, then the checks."""
    times = [r.complete_ms for r in results]
    size_label = f"{size_bytes / MIB:,.0f} MiB in {parts} parts"
    rates = [size_bytes / MIB / r.upload_seconds for r in results if r.upload_seconds > 0]
    return [
        Row(f"CompleteMultipartUpload, {size_label}, median", "ms",
            statistics.median(times), TARGET_COMPLETE_MS,
            f"{len(times)} runs, new key each: "
            + ", ".join(f"{t:.0f}" if t >= 100 else f"{t:.1f}" for t in times) + " ms"),
        Row(f"CompleteMultipartUpload, {size_label}, slowest", "ms", max(times),
            TARGET_COMPLETE_MS,
            f"daemon CPU {max(r.complete_cpu_seconds for r in results) * 1e3:.0f} ms at most"),
        Row("daemon disk writes during Complete, most of any run", "KiB",
            max(r.complete_write_bytes for r in results) / 1024, None,
            f"write() {max(r.complete_wchar for r in results) / MIB:,.2f} MiB, read() "
            f"{max(r.complete_rchar for r in results) / MIB:,.2f} MiB at most; a rewrite "
            f"would write {size_bytes / MIB:,.0f} MiB"),
        Row(f"UploadPart throughput, {concurrency} at a time, median", "MiB/s",
            statistics.median(rates) if rates else None, None,
            f"{size_label}; fsync on"),
        Row("HEAD: size and ETag with -N suffix", "objects",
            sum(1 for r in results if r.head_ok), len(results)),
        Row("ranged GETs across part boundaries, byte for byte", "ranges",
            sum(r.ranges_ok for r in results), sum(r.ranges for r in results),
            f"{RANGE_SPAN_BYTES // 1024} KiB each"),
    ]


def boundary_checks(parts: list[PartPlan]) -> list[int]:
    """The parts whose end a ranged GET straddles: the first, the middle and the
    second-to-last (whose neighbour is the shorter last part)."""
    if len(parts) < 2:
        return []
    return sorted({1, max(1, len(parts) // 2), len(parts) - 1})


# -- the run -------------------------------------------------------------------------------


class Runner:
    def __init__(self, daemon: Objstore, args: argparse.Namespace) -> None:
        assert daemon.process is not None
        self.root = daemon.process.pid
        self.target = S3Target(daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
        self.size_bytes = args.size_mib * MIB
        self.parts = plan_parts(self.size_bytes, args.parts)
        self.concurrency = args.concurrency
        self._local = threading.local()

    def _connection(self) -> Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = Connection(self.target, SOCKET_TIMEOUT_SECONDS)
        return conn

    def run(self, key: str, say: Callable[[str], None]) -> RunResult:
        pattern = Pattern(os.urandom(PATTERN_PERIOD_BYTES))
        expected_etag = multipart_etag(part_md5s(pattern, self.parts))
        control = Connection(self.target, SOCKET_TIMEOUT_SECONDS)
        try:
            upload_id = initiate(control, BUCKET, key)
            started = time.monotonic()
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="part") as pool:
                etags = list(pool.map(
                    lambda part: (part.number, upload_part(self._connection(), BUCKET, key,
                                                           upload_id, part, pattern)),
                    self.parts))
            uploaded = time.monotonic() - started
            self._local = threading.local()  # the pool's threads are gone with it
            time.sleep(0.5)  # let the last part's commit settle out of Complete's counters
            io, cpu = io_of(self.root), cpu_seconds_of(self.root)
            answer = complete(control, BUCKET, key, upload_id, etags)
            io_after, cpu_after = io_of(self.root), cpu_seconds_of(self.root)
            say(f"   {key}: parts in {uploaded:.1f} s, Complete in {answer.seconds * 1e3:.1f} ms")
            problems = list(self._check_head(control, key, expected_etag))
            ranges = boundary_checks(self.parts)
            for after_part in ranges:
                problem = self._check_range(control, key, pattern, after_part)
                if problem:
                    problems.append(problem)
        finally:
            control.close()

        def delta(name: str) -> int:
            return io_after.get(name, 0) - io.get(name, 0)

        return RunResult(key, uploaded, answer.seconds * 1e3, delta("write_bytes"),
                         delta("wchar"), delta("rchar"), cpu_after - cpu,
                         head_ok=not any(p.startswith("HEAD") for p in problems),
                         ranges_ok=len(ranges) - sum(1 for p in problems
                                                     if p.startswith("range")),
                         ranges=len(ranges), problems=tuple(problems))

    def _check_head(self, conn: Connection, key: str, expected_etag: str) -> list[str]:
        answer = conn.request("HEAD", object_path(BUCKET, key))
        size = int(answer.headers.get("content-length", "-1"))
        etag = answer.headers.get("etag", "")
        if answer.status != 200 or size != self.size_bytes:
            return [f"HEAD {key}: {answer.status}, {size} bytes (expected {self.size_bytes})"]
        if etag != expected_etag or not etag.endswith(f'-{len(self.parts)}"'):
            return [f"HEAD {key}: ETag {etag}, expected {expected_etag}"]
        return []

    def _check_range(self, conn: Connection, key: str, pattern: Pattern, after_part: int
                     ) -> str | None:
        first, last = boundary_range(self.parts, after_part, RANGE_SPAN_BYTES)
        answer = conn.request("GET", object_path(BUCKET, key),
                              headers={"Range": f"bytes={first}-{last}"})
        expected = pattern.read(first, last - first + 1)
        if answer.status != 206 or answer.body != expected:
            return (f"range {first}-{last} of {key} (end of part {after_part}): "
                    f"{answer.status}, {len(answer.body)} bytes, "
                    f"{'equal' if answer.body == expected else 'different'}")
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mib", type=int, default=1024, help="MiB per object (1024)")
    parser.add_argument("--parts", type=int, default=100, help="parts per upload (100)")
    parser.add_argument("--runs", type=int, default=3, help="uploads, new key each (3)")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="parts uploaded at a time (4)")
    parser.add_argument("--out", type=Path, help="also write the table as markdown here")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="parent of the run's temporary directory (use a real disk)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.concurrency < 1:
        parser.error("--runs and --concurrency must be at least 1")
    try:
        parts = plan_parts(args.size_mib * MIB, args.parts)
    except ValueError as error:
        parser.error(str(error))
    if len(parts) > 1 and parts[0].size_bytes < 5 * MIB:
        parser.error("parts must be at least 5 MiB (S3's smallest part but the last)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = begin_command(REPO)
    workdir = Path(tempfile.mkdtemp(prefix="objstore-bench-multipart-", dir=args.tmp_dir))
    results: list[RunResult] = []
    try:
        daemon = Objstore(workdir / "objstore")
        try:
            daemon.start()
            runner = Runner(daemon, args)
            S3Session(runner.target).create_bucket(BUCKET)
            part_mib = runner.parts[0].size_bytes / MIB
            say(f"-- {args.runs} multipart uploads of {args.size_mib} MiB in {args.parts} "
                f"parts of {part_mib:.2f} MiB, {args.concurrency} at a time")
            for run in range(args.runs):
                results.append(runner.run(f"mp-{run}", say))
        finally:
            daemon.stop()
    except KeyboardInterrupt:
        print("interrupted: the daemon has been stopped", file=sys.stderr)
        return 130
    finally:
        release_workdir(workdir, args.keep)
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    problems = [p for r in results for p in r.problems]
    notes = [f"load average at the end: {loadavg}",
             "Complete timed from sending the request to the last byte of the answer "
             "(signing excluded), on a keep-alive connection", *problems]
    table = format_table(summary_rows(results, args.size_mib * MIB, args.parts,
                                      args.concurrency), baseline_name="target")
    say("\n" + table + "\n\n" + "\n".join(f"- {line}" for line in notes))
    if args.out is not None:
        args.out.write_text("\n".join(f"- {line}" for line in header + notes[:2]) + "\n\n"
                            + table + "\n" + "".join(f"\n- {line}" for line in problems))
        say(f"\nwritten to {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
