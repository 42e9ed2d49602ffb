"""Server CPU per request on the hot paths, and where it goes (py-spy), for issue 6.

Usage (from the repository root):
    .venv/bin/python -m bench.hotpath [--seconds 8] [--profile DIR] [--only get,head]
                                      [--workers N] [--rate-limit R]
                                      [--audit-strict off|on|both]
                                      [--baseline CHECKOUT]

This module owns a one-worker daemon (SQLite, fsync on, 127.0.0.1 only) in a temporary
directory and the six hot-path workloads measured against it at c=32: wrk for 4 KiB PUT
of new keys, 4 KiB GET and GET of a missing key, ab for HEAD (see bench/ab.py), curl
for a 64 MiB PUT header-signed with the real SHA-256, wrk for single-key DELETE
(DeleteObject, what `aws s3 rm --recursive` sends) of existing 0-byte keys of the
unversioned bucket, seeded by wrk just before and not counted, and `delete-many`:
DELETE_BATCHES DeleteObjects (quiet) of 1,000 such keys each, sent one after another by
one client (its "p50/p99" are the median and the slowest request's milliseconds, signing
excluded; its CPU includes the files' removal after the answers), and `delete-marker`: wrk
for DELETE without a version id of new keys in a versioned bucket (each writes a delete
marker: a version that is only a sidecar). For each it prints ops/s and the
daemon's CPU time per request in microseconds: on a busy 2-core machine that figure moves
far less than the rate does, and a per-thread split (reactor, DB pools, IO pool).
With `--profile DIR` each workload runs a second time under `py-spy record` (raw format,
non-blocking, so the measured run above is not disturbed) and the heaviest functions are
printed with their share of the samples. A profile follows one process, so it needs the
default of one worker; `--workers N` measures rates, latencies and the CPU of the whole
process tree (no per-thread split) of an N-worker node.
`--baseline CHECKOUT` also runs a daemon from another checkout (its `.venv`'s twistd: the
code before a change), each workload measured on it and on this one in turn, its lines
labelled `before`: before/after figures from one run on a shared machine.
It never runs in the test suite; the summary of a raw profile is a pure, tested function.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from types import FrameType

if __package__ in (None, ""):  # `python bench/hotpath.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ab import run_ab
from bench.report import machine_description
from bench.s3 import S3Session, S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore, parse_proc_stat
from bench.wrk import WrkRun, run_wrk, write_paths

SMALL_BYTES = 4096
LARGE_BYTES = 64 * 1024**2
MIB = 1024**2
CONNECTIONS = 32
GET_KEYS = 1000
BUCKET = "hot"
WORKLOADS = ("put", "get", "head", "missing", "large", "delete", "delete-many",
             "delete-marker")
VERSIONED_BUCKET = "hot-versions"  # delete-marker's
# Keys seeded for one delete run, per second of it: more than it can delete.
DELETE_KEYS_PER_SECOND = 1500
# delete-many: this many DeleteObjects (quiet) of DELETE_BATCH keys each, one after another.
DELETE_BATCHES = 20
DELETE_BATCH = 1000
SEED_SECONDS = 120  # the bound on seeding them


@dataclass(frozen=True)
class Figure:
    workload: str
    requests: int
    seconds: float
    cpu_seconds: float
    errors: int = 0
    mib_per_second: float | None = None
    split: tuple[tuple[str, float], ...] = ()  # (thread group, CPU seconds)
    latency_ms: tuple[float, float] | None = None  # wrk's (p50, p99)

    @property
    def ops_per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_seconds / self.requests * 1e6 if self.requests else 0.0

    def line(self) -> str:
        rate = (f"{self.mib_per_second:8.0f} MiB/s" if self.mib_per_second is not None
                else f"{self.ops_per_second:8.0f} ops/s")
        return (f"{self.workload:8s} {rate}  {self.cpu_us_per_request:9.0f} us CPU/request  "
                f"({self.requests} requests, {self.seconds:.1f} s, "
                f"{self.cpu_seconds / self.seconds:.2f} cores, {self.errors} errors)"
                + (f"\n{'':10s}p50 {self.latency_ms[0]:.1f} ms, p99 {self.latency_ms[1]:.1f} ms"
                   if self.latency_ms else "")
                + "".join(f"\n{'':10s}{group:9s} {seconds / self.requests * 1e6:9.0f} us"
                          for group, seconds in self.split if self.requests))


def thread_group(name: str) -> str:
    """The group of a daemon thread by its Python name: reactor, db-read, db-write, io."""
    if name == "MainThread":
        return "reactor"
    for group in ("db-read", "db-write", "io"):
        if f"objstore-{group}" in name:
            return group
    return "other"


def parse_thread_names(dump: str) -> dict[int, str]:
    """Thread id -> Python thread name, from `py-spy dump` lines `Thread 123 (idle): "x"`."""
    names: dict[int, str] = {}
    for line in dump.splitlines():
        head, _, rest = line.partition(" (")
        if head.startswith("Thread ") and head[7:].isdigit():
            names[int(head[7:])] = rest.partition(": ")[2].strip().strip('"')
    return names


def thread_ticks(pid: int) -> dict[int, int]:
    """CPU ticks used so far by each thread of `pid`."""
    ticks: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ticks[int(task.name)] = parse_proc_stat((task / "stat").read_text())[1]
        except (OSError, ValueError, IndexError):
            continue
    return ticks


# Leaves where a thread waits rather than computes: an idle pool thread, the reactor in
# epoll. py-spy's idle detection misses them in --nonblocking mode.
WAITING_LEAVES = frozenset({"Condition.wait (threading.py)",
                            "EPollReactor.doPoll (internet/epollreactor.py)"})


def summarise_profile(lines: Iterable[str], top: int = 25) -> list[tuple[str, float, float]]:
    """(function, inclusive %, self %) of the heaviest functions of a py-spy raw profile:
    lines of `frame;frame;...;frame COUNT`, outermost first. Samples of a waiting thread
    (WAITING_LEAVES) are left out, so the shares are of CPU samples. A function counts
    once per stack however often it recurses; line numbers are dropped."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_function_name(frame) for frame in stack.split(";")]
        if frames[-1] in WAITING_LEAVES:
            continue
        total += count
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    if not total:
        return []
    ranked = sorted(inclusive, key=lambda name: (-own[name], -inclusive[name]))[:top]
    return [(name, 100 * inclusive[name] / total, 100 * own[name] / total) for name in ranked]


def _function_name(frame: str) -> str:
    """`fn (path/to/module.py:12)` -> `fn (module.py)`."""
    name, _, where = frame.partition(" (")
    if not where:
        return frame
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(path).parts[-2:])})"


class HotPath:
    def __init__(self, workdir: Path, seconds: int, workers: int = 1,
                 rate_limit: float = 0.0, as_user: bool = False, extra: str = "",
                 twistd: str | None = None) -> None:
        self.as_user = as_user
        self.workdir = workdir
        self.seconds = seconds
        self.workers = workers
        self.daemon = Objstore(workdir / "objstore", workers=workers,
                               limits=rate_limit_lines(rate_limit), extra=extra,
                               twistd=twistd)
        self.s3 = S3Target(self.daemon.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
        self.put_serial = 0
        self.delete_serial = 0
        self.marker_serial = 0
        self.delete_keys: list[str] = []
        self.empty_body = workdir / "empty.bin"
        self.get_keys: list[str] = []
        self.small_body = workdir / "small.bin"
        self.large_body = workdir / "large.bin"
        self.large_sha256 = ""

    def start(self) -> None:
        self.daemon.start()
        self.session = S3Session(self.s3)
        self.session.create_bucket(BUCKET)
        self.session.create_bucket(VERSIONED_BUCKET)
        self.session.enable_versioning(VERSIONED_BUCKET)
        self.small_body.write_bytes(os.urandom(SMALL_BYTES))
        self.empty_body.write_bytes(b"")
        self.large_body.write_bytes(os.urandom(LARGE_BYTES))
        self.large_sha256 = hashlib.sha256(self.large_body.read_bytes()).hexdigest()
        self.get_keys = self._seed_get_keys()
        self.reader = self._reader() if self.as_user else self.s3

    def _reader(self) -> S3Target:
        """A non-root user holding the built-in S3FullAccess grant: its requests go through
        the whole decision (cached grants, the bucket's cached access settings)."""
        user = self.session.admin("POST", "/admin/users", {"username": "bench-reader"})
        grants = self.session.admin("GET", "/admin/grants")
        grants = grants["grants"] if isinstance(grants, dict) else grants
        grant = next(g for g in grants if g["name"] == "S3FullAccess")
        self.session.admin("PUT", f"/admin/users/{user['user_id']}/grants/{grant['grant_id']}")
        key = self.session.admin("POST", f"/admin/users/{user['user_id']}/credentials", {})
        return S3Target(self.daemon.base_url, key["access_key_id"], key["secret_access_key"])

    @property
    def pid(self) -> int:
        assert self.daemon.process is not None
        return self.daemon.process.pid

    def _wrk(self, name: str, paths: Iterator[str], method: str, body: Path | None,
             once: bool, seconds: int | None = None,
             settle: Callable[[], None] | None = None) -> Figure:
        """One wrk run; `settle` (when given) waits, after it, for work the requests left
        behind, whose CPU is counted (the wall time stays wrk's)."""
        paths_file = self.workdir / f"{name}.paths"
        write_paths(paths_file, paths)
        cpu = self.daemon.cpu_seconds()
        result = run_wrk(WrkRun(self.daemon.base_url, paths_file, method, body, once,
                                seconds or self.seconds, connections=CONNECTIONS,
                                threads=2))
        if settle is not None:
            settle()
        used = self.daemon.cpu_seconds() - cpu
        return Figure(name, result.requests, result.duration_seconds, used,
                      errors=result.socket_errors + result.status_errors,
                      latency_ms=(result.p50_ms, result.p99_ms))

    def _seed_get_keys(self) -> list[str]:
        keys = [f"get/{i:07d}" for i in range(GET_KEYS)]
        spares = (f"get-spare/{i:07d}" for i in range(CONNECTIONS))
        self._wrk("seed", self.s3.presigned_paths("PUT", BUCKET, chain(keys, spares)), "PUT",
                  self.small_body, once=True)
        missing = set(keys) - set(self.session.list_keys(BUCKET, "get/"))
        for key in sorted(missing):
            self.session.put(BUCKET, key, self.small_body.read_bytes())
        return keys

    def run(self, workload: str) -> Figure:
        """One measured run of `workload` (after what it needs first, unmeasured)."""
        self._prepare(workload)
        return self._measure(workload)

    def _measure(self, workload: str) -> Figure:
        """One measured run of a prepared `workload`, with its CPU split by thread group
        (one worker only: with several, the pid is the supervisor's)."""
        if self.workers != 1:
            return self._run(workload)
        before = thread_ticks(self.pid)
        figure = self._run(workload)
        after = thread_ticks(self.pid)
        dump = subprocess.run([self._py_spy(), "dump", "--pid", str(self.pid)],
                              capture_output=True, text=True, check=False, timeout=60).stdout
        names = parse_thread_names(dump)
        split: dict[str, float] = {}
        tick = os.sysconf("SC_CLK_TCK")
        for tid, used in after.items():
            group = thread_group(names.get(tid, ""))
            split[group] = split.get(group, 0.0) + (used - before.get(tid, 0)) / tick
        return dataclasses.replace(figure, split=tuple(sorted(split.items())))

    def _py_spy(self) -> str:
        return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))

    def _run(self, workload: str) -> Figure:
        if workload == "put":
            count = self.seconds * 3000 + CONNECTIONS
            start, self.put_serial = self.put_serial, self.put_serial + count
            keys = (f"put/{i:08d}" for i in range(start, start + count))
            return self._wrk("put", self.s3.presigned_paths("PUT", BUCKET, keys), "PUT",
                             self.small_body, once=True)
        if workload == "get":
            return self._wrk("get", self.reader.presigned_paths("GET", BUCKET,
                                                                iter(self.get_keys)),
                             "GET", None, once=False)
        if workload == "head":
            return self._head()
        if workload == "missing":
            keys = (f"missing/{i:07d}" for i in range(GET_KEYS))
            figure = self._wrk("missing", self.s3.presigned_paths("GET", BUCKET, keys), "GET",
                               None, once=False)
            return Figure(figure.workload, figure.requests, figure.seconds,
                          figure.cpu_seconds,  # every answer is a 404 by design
                          latency_ms=figure.latency_ms)
        if workload == "large":
            return self._large()
        if workload == "delete":
            return self._delete()
        if workload == "delete-many":
            return self._delete_many()
        if workload == "delete-marker":
            return self._delete_marker()
        raise ValueError(workload)

    def _prepare(self, workload: str) -> None:
        """What a workload needs before its measured run (outside the CPU split)."""
        if workload == "delete":
            self.delete_keys = self._seed_delete_keys()
        if workload == "delete-many":
            self.delete_keys = self._seed_delete_keys(DELETE_BATCHES * DELETE_BATCH)

    def _seed_delete_keys(self, count: int | None = None) -> list[str]:
        """Keys that exist, for one delete run (`count`, else enough for the run's
        seconds): 0-byte PUTs with wrk, any it missed retried one by one."""
        count = count or self.seconds * DELETE_KEYS_PER_SECOND
        start, self.delete_serial = self.delete_serial, self.delete_serial + count
        keys = [f"delete/{i:08d}" for i in range(start, start + count)]
        spares = (f"delete-seed-spare/{i:08d}" for i in range(start, start + CONNECTIONS))
        self._wrk("seed-delete", self.s3.presigned_paths("PUT", BUCKET, chain(keys, spares)),
                  "PUT", self.empty_body, once=True, seconds=SEED_SECONDS)
        missing = set(keys) - set(self.session.list_keys(BUCKET, "delete/", max_pages=1000))
        for key in sorted(missing):
            self.session.put(BUCKET, key, b"")
        return keys

    def _delete(self) -> Figure:
        """DELETE of the seeded keys, each once (the spares at the end of the file do not
        exist: 204 too, as on AWS)."""
        keys, self.delete_keys = self.delete_keys, []
        spares = (f"delete-spare/{i:08d}" for i in range(CONNECTIONS))
        return self._wrk("delete", self.s3.presigned_paths("DELETE", BUCKET,
                                                           chain(keys, spares)),
                         "DELETE", None, once=True, settle=self._files_removed)

    def _delete_marker(self) -> Figure:
        """DELETE without a version id in the versioned bucket, of a new key each time:
        every request writes a delete marker (a new version holding only a sidecar), as on
        AWS even where the key never existed. No seeding: the work is the marker's."""
        count = self.seconds * 3000 + CONNECTIONS
        start, self.marker_serial = self.marker_serial, self.marker_serial + count
        keys = (f"marker/{i:08d}" for i in range(start, start + count))
        return self._wrk("delete-marker", self.s3.presigned_paths("DELETE", VERSIONED_BUCKET,
                                                                  keys),
                         "DELETE", None, once=True)

    def _delete_many(self) -> Figure:
        """DeleteObjects of the seeded keys, DELETE_BATCH at a time, one request after the
        other; the files' removal after the answers is waited for and its CPU counted."""
        keys, self.delete_keys = self.delete_keys, []
        cpu = self.daemon.cpu_seconds()
        elapsed = [self.session.timed_delete_objects(BUCKET, keys[i:i + DELETE_BATCH])
                   for i in range(0, len(keys), DELETE_BATCH)]
        self._files_removed()
        used = self.daemon.cpu_seconds() - cpu
        elapsed.sort()
        return Figure("delete-many", len(elapsed), sum(elapsed) / 1e3, used,
                      latency_ms=(elapsed[len(elapsed) // 2], elapsed[-1]))

    def _files_removed(self, deadline_seconds: float = 60) -> None:
        """Wait until the deleted versions' files are gone (removed after the answers,
        the withdrawn sidecars last): that work is the deletes' too."""
        deleting = self.workdir / "objstore" / "data" / "deleting"
        deadline = time.monotonic() + deadline_seconds
        while time.monotonic() < deadline:
            try:
                if not any(deleting.iterdir()):
                    return
            except FileNotFoundError:
                return
            time.sleep(0.05)
        raise RuntimeError(f"deleted files still in {deleting} after {deadline_seconds} s")

    def _head(self) -> Figure:
        path = self.s3.presigned_path("HEAD", BUCKET, self.get_keys[0],
                                      datetime.datetime.now(datetime.UTC))
        cpu = self.daemon.cpu_seconds()
        result = run_ab(self.daemon.base_url + path, method="HEAD", connections=CONNECTIONS,
                        seconds=self.seconds, workdir=self.workdir, name="head")
        return Figure("head", result.requests, result.duration_seconds,
                      self.daemon.cpu_seconds() - cpu,
                      errors=result.socket_errors + result.status_errors)

    def _large(self, runs: int = 3) -> Figure:
        seconds = cpu_seconds = 0.0
        for _ in range(runs):
            path = f"/{BUCKET}/big-{self.put_serial}"
            self.put_serial += 1
            headers = self.s3.signed_headers("PUT", path, self.large_sha256)
            command = ["curl", "-sS", "--max-time", "120", "-o", "/dev/null", "-w",
                       "%{http_code} %{time_total}", "-H", "Expect:", "-T",
                       str(self.large_body)]
            for name, value in headers.items():
                command += ["-H", f"{name}: {value}"]
            cpu = self.daemon.cpu_seconds()
            out = subprocess.run(command + [self.daemon.base_url + path], capture_output=True,
                                 text=True, check=True, timeout=130).stdout.split()
            cpu_seconds += self.daemon.cpu_seconds() - cpu
            if out[0] != "200":
                raise RuntimeError(f"64 MiB PUT answered {out[0]}")
            seconds += float(out[1])
        return Figure("large", runs, seconds, cpu_seconds,
                      mib_per_second=runs * LARGE_BYTES / MIB / seconds)

    def profile(self, workload: str, out_dir: Path, top: int = 25
                ) -> list[tuple[str, float, float]]:
        out = out_dir / f"{workload}.txt"
        py_spy = self._py_spy()
        seconds = self.seconds + 2
        self._prepare(workload)
        recorder = subprocess.Popen(
            [py_spy, "record", "--pid", str(self.pid), "--format", "raw", "--rate", "250",
             "--nonblocking", "--duration", str(seconds), "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            time.sleep(1)
            self._measure(workload)
            recorder.wait(timeout=seconds + 30)
        finally:
            if recorder.poll() is None:
                recorder.kill()
                recorder.wait()
        return summarise_profile(out.read_text().splitlines(), top) if out.exists() else []

    def stop(self) -> None:
        self.daemon.stop()


def rate_limit_lines(rate_per_second: float) -> str:
    """`[server.limits]` lines that turn both rate limits on (0: leave them off). A rate far
    above what the workloads reach refuses nothing, so the figures show what checking the
    token buckets costs on every request."""
    if not rate_per_second:
        return ""
    return (f"rate_limit_per_second = {rate_per_second}\n"
            f"rate_limit_per_ip_per_second = {rate_per_second}")


STRICT_AUDIT = "[audit]\nstrict = true\n"


def audit_settings(choice: str) -> list[tuple[str, str]]:
    """(label, extra config) of each daemon `--audit-strict` asks for; "both" measures the
    default and [audit] strict side by side in the same run."""
    default, strict = ("default", ""), ("strict", STRICT_AUDIT)
    return {"off": [default], "on": [strict], "both": [default, strict]}[choice]


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=8, help="each wrk run (default 8)")
    parser.add_argument("--only", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads of {', '.join(WORKLOADS)}")
    parser.add_argument("--profile", type=Path, help="also profile each workload into DIR")
    parser.add_argument("--top", type=int, default=25, help="functions shown per profile")
    parser.add_argument("--repeat", type=int, default=1, help="measure each workload N times")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes of the daemon (default 1; --profile needs 1)")
    parser.add_argument("--rate-limit", type=float, default=0.0,
                        help="turn on the per-IP and per-credential rate limits at this many "
                             "requests/s (high enough to refuse nothing; default off)")
    parser.add_argument("--as-user", action="store_true",
                        help="GET as a non-root user with S3FullAccess (root skips "
                             "authorization)")
    parser.add_argument("--audit-strict", choices=("off", "on", "both"), default="off",
                        help="[audit] strict on the daemon; both: two daemons, default and "
                             "strict, each workload measured on one then the other")
    parser.add_argument("--baseline", type=Path,
                        help="also measure a daemon of this checkout (its .venv's twistd), "
                             "labelled 'before'")
    args = parser.parse_args(argv)
    if args.profile is not None and args.workers != 1:
        parser.error("--profile follows one process: it needs --workers 1")
    baseline = None
    if args.baseline is not None:
        baseline = str(args.baseline.resolve() / ".venv" / "bin" / "twistd")
        if not os.path.exists(baseline):
            parser.error(f"--baseline: no {baseline}")
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _terminate)
    print("\n".join(machine_description(Path(__file__).resolve().parents[1])))
    print(f"started {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"load average {os.getloadavg()}, "
          f"workers {args.workers}, rate limit {args.rate_limit or 'off'}, "
          f"audit strict {args.audit_strict}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="objstore-hotpath-"))
    settings = [(label, extra, None) for label, extra in audit_settings(args.audit_strict)]
    if baseline is not None:
        settings += [(f"before-{label}" if len(settings) > 1 else "before", extra, baseline)
                     for label, extra, _ in settings]
    benches = [(label, HotPath(workdir / label, args.seconds, args.workers, args.rate_limit,
                               args.as_user, extra, twistd))
               for label, extra, twistd in settings]
    try:
        for _, bench in benches:
            bench.workdir.mkdir(parents=True, exist_ok=True)
            bench.start()
        workloads = [w for w in args.only.split(",") if w]
        for workload in workloads:
            for _ in range(args.repeat):
                for label, bench in benches:
                    prefix = f"[{label}] " if len(benches) > 1 else ""
                    print(prefix + bench.run(workload).line(), flush=True)
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            for label, bench in benches:
                (args.profile / label).mkdir(exist_ok=True)
                for workload in workloads:
                    print(f"\n-- profile of {workload}, {label} (inclusive %, self %)")
                    for name, inclusive, own in bench.profile(workload,
                                                              args.profile / label, args.top):
                        print(f"{inclusive:6.1f} {own:6.1f}  {name}")
    except KeyboardInterrupt:
        return 130
    finally:
        for _, bench in benches:
            bench.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
