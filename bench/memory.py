"""The memory benchmark: many concurrent large uploads, and the daemon's total RSS meanwhile.

Usage (from the repository root):
    .venv/bin/python -m bench.memory [--uploads 32] [--size-mib 1024] [--multipart] [--out F]

It starts the daemon as bench/run.py does (twistd, SQLite, fsync on, loopback only, a
supervisor and one worker per CPU), then sends `--uploads` signed PUTs of `--size-mib` each
at once (UNSIGNED-PAYLOAD, each body generated while it is sent from one 1 MiB random
pattern, so the harness holds no object in memory), samples the RSS of the daemon's whole
process tree every 0.2 s, and checks every object with a HEAD (status, size, ETag). With
`--multipart` each upload is a multipart upload of `--part-mib` parts instead.

Bounded: every socket operation has a timeout, the uploads a deadline. Ctrl-C or SIGTERM
stops the daemon; the temporary directory (the objects: 32 GiB by default) is deleted at the
end unless --keep. It is never part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # `python bench/memory.py`: make `bench` and `objstore` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proctree import MB, Peaks, RssSampler, cpu_seconds_of, io_of
from bench.report import Row, begin_command, format_table, release_workdir, say
from bench.s3 import S3Session, S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore
from bench.upload import (
    MIB,
    Connection,
    PartPlan,
    Pattern,
    complete,
    initiate,
    multipart_etag,
    object_path,
    part_md5s,
    plan_parts,
    upload_part,
)

REPO = Path(__file__).resolve().parents[1]
BUCKET = "bench-memory"
TARGET_RSS_MB = 400
SOCKET_TIMEOUT_SECONDS = 300.0


@dataclass
class Upload:
    key: str
    status: int = 0
    seconds: float = 0.0
    etag: str = ""
    error: str = ""
    head_status: int = 0
    head_size: int = -1
    head_etag: str = ""


@dataclass(frozen=True)
class Outcome:
    """Everything a run measured, for the table."""

    uploads: list[Upload]
    size_bytes: int
    expected_etag: str
    wall_seconds: float
    peaks: Peaks
    idle_total_bytes: int
    cpu_cores: float
    disk_write_bytes: int
    harness_cores: float = 0.0  # this process (the load generator) meanwhile
    multipart_parts: int = 0  # 0: single PUTs
    notes: list[str] = field(default_factory=list)


def mb(value: int) -> float:
    return value / MB


def summary_rows(outcome: Outcome) -> list[Row]:
    """The table: the target (400 MB) beside the peak, then what explains it."""
    peaks, count = outcome.peaks, len(outcome.uploads)
    size_mib = outcome.size_bytes / MIB
    at = peaks.at_peak
    kind = (f"multipart, {outcome.multipart_parts} parts each" if outcome.multipart_parts
            else "one PUT each")
    rows = [
        Row(f"peak total RSS of the daemon, {count} concurrent uploads of {size_mib:,.0f} MiB",
            "MB", mb(peaks.total_bytes), TARGET_RSS_MB,
            f"{peaks.processes_at_peak} processes, at t={peaks.total_at_seconds:.1f} s; "
            f"anon {mb(at.get('RssAnon', 0)):,.0f} / file {mb(at.get('RssFile', 0)):,.0f} / "
            f"shmem {mb(at.get('RssShmem', 0)):,.0f} MB; {peaks.samples} samples"),
        Row("peak total PSS of the daemon", "MB", mb(peaks.pss_bytes),
            note="shared pages (libraries) divided among the processes sharing them"),
    ]
    for pid in sorted(peaks.per_process, key=lambda p: (peaks.labels.get(p, ""), p)):
        rows.append(Row(f"peak RSS, {peaks.labels.get(pid, '?')} (pid {pid})", "MB",
                        mb(peaks.per_process[pid])))
    rows += [
        Row("total RSS before the uploads (idle daemon)", "MB", mb(outcome.idle_total_bytes)),
        Row("total RSS at the end (after the last answer)", "MB", mb(peaks.last_total_bytes)),
    ]
    seconds = [u.seconds for u in outcome.uploads if u.status == 200]
    moved = outcome.size_bytes * sum(1 for u in outcome.uploads if u.status == 200)
    rate = moved / MIB / outcome.wall_seconds if outcome.wall_seconds > 0 else None
    rows += [
        Row(f"wall time, first byte to last answer ({kind})", "s", outcome.wall_seconds,
            note=f"{outcome.wall_seconds:.1f} s; per upload median "
                 f"{statistics.median(seconds) if seconds else float('nan'):.1f} s, slowest "
                 f"{max(seconds) if seconds else float('nan'):.1f} s"),
        Row("aggregate upload throughput", "MiB/s", rate,
            note=f"daemon CPU {outcome.cpu_cores:.2f} cores, load generator "
                 f"{outcome.harness_cores:.2f}; daemon disk writes "
                 f"{outcome.disk_write_bytes / MIB:,.0f} MiB"),
    ]
    ok_status = sum(1 for u in outcome.uploads if u.status == 200)
    ok_size = sum(1 for u in outcome.uploads
                  if u.head_status == 200 and u.head_size == outcome.size_bytes)
    ok_etag = sum(1 for u in outcome.uploads if u.head_etag == outcome.expected_etag)
    rows += [
        Row("uploads answered 200", "uploads", ok_status, count),
        Row("objects with the right size (HEAD)", "uploads", ok_size, count),
        Row("objects with the expected ETag (HEAD)", "uploads", ok_etag, count,
            f"expected {outcome.expected_etag}"),
    ]
    return rows


def failures(outcome: Outcome) -> list[str]:
    """One line per upload that did not end as expected."""
    lines = []
    for upload in outcome.uploads:
        problems = []
        if upload.status != 200:
            problems.append(f"answered {upload.status or 'nothing'} {upload.error}".strip())
        if upload.head_status != 200 or upload.head_size != outcome.size_bytes:
            problems.append(f"HEAD {upload.head_status}, {upload.head_size} bytes")
        elif upload.head_etag != outcome.expected_etag:
            problems.append(f"ETag {upload.head_etag}")
        if problems:
            lines.append(f"{upload.key}: " + "; ".join(problems))
    return lines


# -- the run -------------------------------------------------------------------------------


class Uploader:
    """The concurrent uploads: one thread and one connection each, released together."""

    def __init__(self, target: S3Target, pattern: Pattern, size_bytes: int,
                 parts: list[PartPlan] | None) -> None:
        self.target = target
        self.pattern = pattern
        self.size_bytes = size_bytes
        self.parts = parts

    def run(self, uploads: list[Upload], deadline_seconds: float) -> float:
        """Wall-clock seconds from the release of all uploads to the last answer."""
        gate = threading.Barrier(len(uploads) + 1)
        threads = [threading.Thread(target=self._one, args=(upload, gate), daemon=True,
                                    name=f"upload-{upload.key}") for upload in uploads]
        for thread in threads:
            thread.start()
        gate.wait(timeout=60)
        started = time.monotonic()
        for thread in threads:
            thread.join(max(0.0, started + deadline_seconds - time.monotonic()))
        for upload, thread in zip(uploads, threads, strict=True):
            if thread.is_alive():
                upload.error = f"still running after the {deadline_seconds:.0f} s deadline"
        return time.monotonic() - started

    def _one(self, upload: Upload, gate: threading.Barrier) -> None:
        try:
            conn = Connection(self.target, SOCKET_TIMEOUT_SECONDS)
            gate.wait(timeout=60)
            started = time.monotonic()
            if self.parts is None:
                answer = conn.request("PUT", object_path(BUCKET, upload.key),
                                      self.pattern.chunks(0, self.size_bytes), self.size_bytes)
                upload.status, upload.etag = answer.status, answer.headers.get("etag", "")
                if answer.status != 200:
                    upload.error = answer.body[:200].decode(errors="replace")
            else:
                upload_id = initiate(conn, BUCKET, upload.key)
                etags = [(part.number, upload_part(conn, BUCKET, upload.key, upload_id, part,
                                                   self.pattern)) for part in self.parts]
                answer = complete(conn, BUCKET, upload.key, upload_id, etags)
                upload.status = answer.status
            upload.seconds = time.monotonic() - started
            conn.close()
        except Exception as error:  # noqa: BLE001 -- reported in the table, not raised
            upload.error = f"{type(error).__name__}: {error}"


def head_all(target: S3Target, uploads: list[Upload]) -> None:
    conn = Connection(target, 60.0)
    try:
        for upload in uploads:
            answer = conn.request("HEAD", object_path(BUCKET, upload.key))
            upload.head_status = answer.status
            upload.head_size = int(answer.headers.get("content-length", "-1"))
            upload.head_etag = answer.headers.get("etag", "")
    finally:
        conn.close()


def measure(daemon: Objstore, args: argparse.Namespace, say: Callable[[str], None]
            ) -> Outcome:
    assert daemon.process is not None
    root = daemon.process.pid
    size_bytes = args.size_mib * MIB
    pattern = Pattern(os.urandom(MIB))
    parts = plan_parts(size_bytes, -(-size_bytes // (args.part_mib * MIB))) \
        if args.multipart else None
    say("-- hashing the expected ETag")
    if parts is None:
        expected = f'"{pattern.md5(0, size_bytes).hex()}"'
    else:
        expected = multipart_etag(part_md5s(pattern, parts))
    target = S3Target(daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
    S3Session(target).create_bucket(BUCKET)
    time.sleep(1.0)  # let start-up work settle before the idle figure
    idle = RssSampler(root).sample().total()
    uploads = [Upload(f"big-{index:03d}") for index in range(args.uploads)]
    say(f"-- {args.uploads} concurrent uploads of {args.size_mib} MiB "
        f"({f'multipart, {len(parts)} parts each' if parts else 'one PUT each'}); "
        f"idle daemon RSS {mb(idle):,.0f} MB")
    sampler = RssSampler(root, args.interval)
    cpu, io, own = cpu_seconds_of(root), io_of(root), _own_cpu_seconds()
    sampler.start()
    try:
        wall = Uploader(target, pattern, size_bytes, parts).run(uploads, args.deadline)
    finally:
        peaks = sampler.stop()
    cores = (cpu_seconds_of(root) - cpu) / wall if wall > 0 else 0.0
    harness = (_own_cpu_seconds() - own) / wall if wall > 0 else 0.0
    written = io_of(root).get("write_bytes", 0) - io.get("write_bytes", 0)
    say(f"   done in {wall:.1f} s; peak total RSS {mb(peaks.total_bytes):,.0f} MB; "
        "checking every object with HEAD")
    head_all(target, uploads)
    return Outcome(uploads, size_bytes, expected, wall, peaks, idle, cores, written,
                   harness, len(parts) if parts else 0)


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--uploads", type=int, default=32, help="concurrent uploads (32)")
    parser.add_argument("--size-mib", type=int, default=1024, help="MiB per object (1024)")
    parser.add_argument("--multipart", action="store_true",
                        help="multipart uploads (parts sent one after the other per upload)")
    parser.add_argument("--part-mib", type=int, default=64,
                        help="part size with --multipart (default 64 MiB)")
    parser.add_argument("--interval", type=float, default=0.2,
                        help="seconds between RSS samples (0.2)")
    parser.add_argument("--deadline", type=float, default=1800.0,
                        help="most seconds the uploads may take (1800)")
    parser.add_argument("--out", type=Path, help="also write the table as markdown here")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="parent of the run's temporary directory (use a real disk)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.uploads < 1 or args.size_mib < 1:
        parser.error("--uploads and --size-mib must be at least 1")
    if args.multipart and args.part_mib < 5:
        parser.error("--part-mib must be at least 5 (S3's smallest part)")
    return args


def free_disk_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = begin_command(REPO)
    workdir = Path(tempfile.mkdtemp(prefix="objstore-bench-memory-", dir=args.tmp_dir))
    needed = args.uploads * args.size_mib * MIB
    if free_disk_bytes(workdir) < needed * 1.1:
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"not enough free disk under {workdir.parent} for {needed / 1024**3:.1f} GiB",
              file=sys.stderr)
        return 2
    try:
        daemon = Objstore(workdir / "objstore")
        try:
            daemon.start()
            outcome = measure(daemon, args, say)
        finally:
            daemon.stop()
    except KeyboardInterrupt:
        print("interrupted: the daemon has been stopped", file=sys.stderr)
        return 130
    finally:
        release_workdir(workdir, args.keep)
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    notes = [f"load average at the end: {loadavg}",
             "RSS summed over the supervisor and every worker (shared pages count once per "
             "process); MB = 10^6 bytes", *failures(outcome)]
    table = format_table(summary_rows(outcome), baseline_name="target")
    say("\n" + table + "\n\n" + "\n".join(f"- {line}" for line in notes))
    if args.out is not None:
        args.out.write_text("\n".join(f"- {line}" for line in header + notes[:2]) + "\n\n"
                            + table + "\n" + "".join(f"\n- {line}" for line in notes[2:]))
        say(f"\nwritten to {args.out}")
    return 0 if not failures(outcome) else 1


if __name__ == "__main__":
    sys.exit(main())
