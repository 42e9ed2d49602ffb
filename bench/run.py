"""The objstore benchmark: one run measures objstore, moto (a peer S3 server), with --rgw
Ceph RGW (a second peer), and an nginx baseline side by side, prints one table with
objstore's ratio to each.

Usage (from the repository root):  .venv/bin/python -m bench.run [--quick] [--out FILE]
                                    [--only large ...]

This module owns the plan of a run (what is measured, for how long) and its sequence. It
starts a real daemon (SQLite, fsync on), moto (unless --no-moto), a throwaway Ceph RGW
(with --rgw) and nginx on loopback
ports in a temporary directory, drives them with wrk (small objects) and curl (large
objects), times DeleteObjects of 1,000 keys, walks a listing with a signed Python client,
and stops everything it started, also on Ctrl-C or SIGTERM.
Every phase is bounded in time. It is never part of the test suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

if __package__ in (None, ""):  # `python bench/run.py`: make `bench` and `objstore` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ab import run_ab
from bench.report import Row, begin_command, format_table, percentile, release_workdir
from bench.s3 import S3Session, S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Moto, Nginx, Objstore, Rgw
from bench.wrk import WrkResult, WrkRun, run_wrk, write_paths

REPO = Path(__file__).resolve().parents[1]
SMALL_BYTES = 4096
LARGE_BYTES = 64 * 1024**2
MIB = 1024**2
CURL_TIMEOUT_SECONDS = 120
AWS_RM_TIMEOUT_SECONDS = 3600
# Phase name (--only) -> Bench method; the default run leaves out the optional ones.
PHASES = {"put": "small_put", "get": "small_get", "large": "large",
          "delete": "delete_many", "list": "listing", "rm": "rm_recursive"}
DEFAULT_PHASES = ("put", "get", "large", "delete", "list")


def selected_phases(text: str | None) -> tuple[str, ...]:
    """The phases `--only` names (comma-separated; a phase's short name or its method's,
    e.g. `get` or `small_get`), in the order given; the default phases without it."""
    if not text:
        return DEFAULT_PHASES
    by_method = {method: name for name, method in PHASES.items()}
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in PHASES and name not in by_method]
    if unknown:
        raise ValueError(f"unknown phase(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(PHASES)}")
    return tuple(dict.fromkeys(by_method.get(name, name) for name in chosen))


@dataclass(frozen=True)
class Plan:
    duration_seconds: int  # each timed wrk run
    warmup_seconds: int  # untimed wrk GET run before each timed one
    large_runs: int  # sequential curl transfers per large-object figure (median reported)
    list_keys: int
    list_pages: int
    seed_deadline_seconds: int
    get_keys: int = 1000
    connections: int = 32
    # Presigned URLs made per second of a PUT run: a run that uses them all ends early,
    # with its real duration, so this bounds work and disk use, not the measured rate.
    objstore_put_urls_per_second: int = 5000
    nginx_put_paths_per_second: int = 40000
    rm_keys: int = 100_000  # the optional `aws s3 rm --recursive` phase (--only rm)


FULL = Plan(duration_seconds=10, warmup_seconds=2, large_runs=3, list_keys=100_000,
            list_pages=100, seed_deadline_seconds=180)
QUICK = Plan(duration_seconds=3, warmup_seconds=1, large_runs=1, list_keys=3000,
             list_pages=3, seed_deadline_seconds=60)


class Server(Protocol):
    @property
    def base_url(self) -> str: ...

    def cpu_seconds(self) -> float: ...


@dataclass(frozen=True)
class Peer:
    """A peer S3 server, driven exactly as objstore is: the same presigned and signed
    requests with the root credential (moto checks no signature; RGW's user has it)."""

    name: str  # its column in the table: "moto" or "rgw"
    server: Server
    target: S3Target
    session: S3Session

    @classmethod
    def of(cls, name: str, server: Server) -> Peer:
        target = S3Target(server.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
        return cls(name, server, target, S3Session(target))


def peer_fields(figures: Mapping[str, float | None]) -> dict[str, float | None]:
    """The Row fields of the peers' figures, by peer name (moto is `peer`)."""
    return {"peer": figures.get("moto"), "rgw": figures.get("rgw")}


@dataclass(frozen=True)
class Measured:
    result: WrkResult
    cores: float  # the server's CPU seconds per second of the run


@dataclass(frozen=True)
class RmRun:
    """One `aws s3 rm --recursive` run on one server."""

    present: int  # keys under the prefix before
    removed: int
    seconds: float
    seeded: float  # seeding rate, PUTs/s
    server_cores: float
    client_cores: float  # the aws CLI's CPU seconds per second

    @property
    def keys_per_second(self) -> float:
        return self.removed / self.seconds if self.seconds else 0.0


class CpuMeter:
    """Cores a server used while the meter ran: its CPU time over wall-clock time."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._cpu = server.cpu_seconds()
        self._wall = time.monotonic()

    def cores(self) -> float:
        wall = time.monotonic() - self._wall
        return (self._server.cpu_seconds() - self._cpu) / wall if wall > 0 else 0.0


class Bench:
    def __init__(self, plan: Plan, workdir: Path, objstore: Objstore, nginx: Nginx,
                 threads: int, peers: Sequence[Peer] = ()) -> None:
        self.plan = plan
        self.workdir = workdir
        self.objstore = objstore
        self.nginx = nginx
        self.peers = tuple(peers)
        self.threads = threads
        self.s3 = S3Target(objstore.base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
        self.session = S3Session(self.s3)
        self.small_body = self._file("small.bin", os.urandom(SMALL_BYTES))
        self.empty_body = self._file("empty.bin", b"")
        self.notes: list[str] = []
        self.spares = plan.connections  # see WrkRun.spare_paths
        self._small_made = False

    def _file(self, name: str, data: bytes) -> Path:
        path = self.workdir / name
        path.write_bytes(data)
        return path

    def _wrk(self, server: Server, name: str, paths: Iterator[str], method: str,
             body: Path | None, *, once: bool, seconds: int) -> Measured:
        """One wrk run. A once-mode `paths` must hold `spares` more paths than are counted."""
        paths_file = self.workdir / f"{name}.paths"
        write_paths(paths_file, paths)
        meter = CpuMeter(server)
        result = run_wrk(WrkRun(server.base_url, paths_file, method, body, once, seconds,
                                connections=self.plan.connections, threads=self.threads))
        cores = meter.cores()
        if result.failed:
            self.notes.append(f"{name}: {result.status_errors} error statuses, "
                              f"{result.socket_errors} socket errors of {result.requests}")
        return Measured(result, cores)

    def run(self, only: tuple[str, ...] = ()) -> list[Row]:
        """Every default phase in order, or only the phases named (PHASES)."""
        rows: list[Row] = []
        for name in only or DEFAULT_PHASES:
            phase = getattr(self, PHASES[name])
            print(f"-- {phase.__name__}", flush=True)
            rows += phase()
        return rows

    # -- 4 KiB objects at concurrency 32 ----------------------------------------------------
    def small_put(self) -> list[Row]:
        plan = self.plan
        self._small_bucket()
        count = plan.duration_seconds * plan.objstore_put_urls_per_second + self.spares
        ours = self._wrk(self.objstore, "objstore-put-4k",
                         self.s3.presigned_paths("PUT", "bench-small",
                                                 (f"put/{i:07d}" for i in range(count))),
                         "PUT", self.small_body, once=True, seconds=plan.duration_seconds)
        peers = {
            peer.name: self._wrk(peer.server, f"{peer.name}-put-4k",
                                 peer.target.presigned_paths(
                                     "PUT", "bench-small", (f"put/{i:07d}" for i in range(count))),
                                 "PUT", self.small_body, once=True, seconds=plan.duration_seconds)
            for peer in self.peers}
        count = plan.duration_seconds * plan.nginx_put_paths_per_second + self.spares
        theirs = self._wrk(self.nginx, "nginx-put-4k",
                           (f"/put/small/{i:07d}" for i in range(count)),
                           "PUT", self.small_body, once=True, seconds=plan.duration_seconds)
        return latency_rows("4 KiB PUT, new keys", ours, theirs, plan.connections, peers)

    def _small_bucket(self) -> None:
        """The 4 KiB phases' bucket on every S3 server, made by the first phase that runs."""
        if self._small_made:
            return
        self.session.create_bucket("bench-small")
        for peer in self.peers:
            peer.session.create_bucket("bench-small")
        self._small_made = True

    def small_get(self) -> list[Row]:
        plan = self.plan
        self._small_bucket()
        keys = self._seed_get_keys()
        results: dict[str, Measured] = {}
        for label, server, paths in self._sides(
            lambda target: target.presigned_paths("GET", "bench-small", iter(keys)),
            lambda: (f"/{key}" for key in keys),
        ):
            name = f"{label}-get-4k"
            if plan.warmup_seconds:
                self._wrk(server, name + "-warmup", paths(), "GET", None,
                          once=False, seconds=plan.warmup_seconds)
            results[label] = self._wrk(server, name, paths(), "GET", None,
                                       once=False, seconds=plan.duration_seconds)
        rows = self._latency_rows("4 KiB GET", results)
        return rows + self._small_head(keys[0]) + self._missing_get(keys)

    def _sides(self, s3_paths: Any, nginx_paths: Any) -> list[tuple[str, Server, Any]]:
        """(label, server, paths factory) for objstore, nginx and each peer that runs, in
        that order; the label is "objstore", "nginx" or the peer's name."""
        sides: list[tuple[str, Server, Any]] = [
            ("objstore", self.objstore, lambda: s3_paths(self.s3)),
            ("nginx", self.nginx, nginx_paths)]
        for peer in self.peers:
            sides.append((peer.name, peer.server,
                          lambda target=peer.target: s3_paths(target)))
        return sides

    def _latency_rows(self, workload: str, results: Mapping[str, Measured]) -> list[Row]:
        """latency_rows of results labelled as `_sides` labels them."""
        return latency_rows(workload, results["objstore"], results["nginx"],
                            self.plan.connections,
                            {peer.name: results[peer.name] for peer in self.peers})

    def _small_head(self, key: str) -> list[Row]:
        """HEAD of one existing 4 KiB object, with ab (wrk 4.1 can not parse HEAD answers)."""
        plan = self.plan
        now = datetime.datetime.now(datetime.UTC)
        results: dict[str, Measured] = {}
        urls: list[tuple[str, Server, str]] = [
            ("objstore", self.objstore, self.objstore.base_url + self.s3.presigned_path(
                "HEAD", "bench-small", key, now)),
            ("nginx", self.nginx, f"{self.nginx.base_url}/{key}"),
        ]
        for peer in self.peers:
            urls.append((peer.name, peer.server, peer.server.base_url
                         + peer.target.presigned_path("HEAD", "bench-small", key, now)))
        for label, server, url in urls:
            name = f"{label}-head-4k"
            meter = CpuMeter(server)
            result = run_ab(url, method="HEAD", connections=plan.connections,
                            seconds=plan.duration_seconds, workdir=self.workdir, name=name)
            results[label] = Measured(result, meter.cores())
            if result.failed:
                self.notes.append(f"{name}: {result.status_errors} error statuses, "
                                  f"{result.socket_errors} failed of {result.requests}")
        return self._latency_rows("HEAD of a 4 KiB object", results)

    def _missing_get(self, keys: list[str]) -> list[Row]:
        """GET of keys that do not exist: objstore answers NoSuchKey, nginx 404."""
        plan = self.plan
        missing = [f"missing/{key}" for key in keys]
        results: dict[str, Measured] = {}
        for label, server, paths in self._sides(
            lambda target: target.presigned_paths("GET", "bench-small", iter(missing)),
            lambda: (f"/{key}" for key in missing),
        ):
            name = f"{label}-get-missing"
            before = len(self.notes)
            measured = self._wrk(server, name, paths(), "GET", None, once=False,
                                 seconds=plan.duration_seconds)
            del self.notes[before:]  # every answer is a 404 here: only other failures count
            result = measured.result
            if result.socket_errors or result.status_errors != result.requests:
                self.notes.append(f"{name}: {result.requests - result.status_errors} answers "
                                  f"were not 404, {result.socket_errors} socket errors of "
                                  f"{result.requests}")
            results[label] = measured
        return self._latency_rows("GET of a missing key (404)", results)

    def _seed_get_keys(self) -> list[str]:
        """The same 4 KiB under the same names in objstore and the peers (through wrk) and in
        nginx's root."""
        keys = [f"get/{i:07d}" for i in range(self.plan.get_keys)]
        spares = (f"get-spare/{i:07d}" for i in range(self.spares))
        self._wrk(self.objstore, "objstore-seed-get",
                  self.s3.presigned_paths("PUT", "bench-small", chain(keys, spares)),
                  "PUT", self.small_body, once=True, seconds=60)
        # wrk ends a once-mode run by dropping the connections still busy: write any key
        # those requests left out, so every GET finds its object.
        missing = set(keys) - set(self.session.list_keys("bench-small", "get/"))
        for key in sorted(missing):
            self.session.put("bench-small", key, self.small_body.read_bytes())
        (self.nginx.root / "get").mkdir(parents=True, exist_ok=True)
        for key in keys:
            shutil.copyfile(self.small_body, self.nginx.root / key)
        for peer in self.peers:
            self._wrk(peer.server, f"{peer.name}-seed-get",
                      peer.target.presigned_paths("PUT", "bench-small",
                                                  chain(keys, (f"get-spare/{i:07d}"
                                                               for i in range(self.spares)))),
                      "PUT", self.small_body, once=True, seconds=60)
            missing = set(keys) - set(peer.session.list_keys("bench-small", "get/"))
            for key in sorted(missing):
                peer.session.put("bench-small", key, self.small_body.read_bytes())
        return keys

    # -- 64 MiB objects, sequential curl transfers ---------------------------------------------
    def large(self) -> list[Row]:
        body = self._file("large.bin", os.urandom(LARGE_BYTES))
        sha256 = hashlib.sha256(body.read_bytes()).hexdigest()
        self.session.create_bucket("bench-large")
        rates: dict[str, list[float]] = {
            name: [] for name in chain(
                ("ours_put", "ours_get", "ours_unsigned", "put", "get"),
                (f"{peer.name}_{kind}" for peer in self.peers
                 for kind in ("put", "get", "unsigned")))}
        for peer in self.peers:
            peer.session.create_bucket("bench-large")
        cpu: dict[str, list[float]] = {name: [] for name in rates}

        def transfer(name: str, server: Server, url: str, upload: Path | None,
                     headers: dict[str, str]) -> None:
            meter = CpuMeter(server)
            rates[name].append(curl_mib_per_second(url, upload, headers))
            cpu[name].append(meter.cores())

        data = body.read_bytes()
        md5_rates: list[float] = []
        for run in range(self.plan.large_runs):
            md5_rates.append(md5_mib_per_second(data))
            path = f"/bench-large/big-{run}"
            transfer("ours_put", self.objstore, self.objstore.base_url + path, body,
                     self.s3.signed_headers("PUT", path, sha256))
            unsigned = f"/bench-large/unsigned-{run}"
            transfer("ours_unsigned", self.objstore, self.objstore.base_url + unsigned, body,
                     self.s3.signed_headers("PUT", unsigned))
            transfer("ours_get", self.objstore, self.objstore.base_url + self.s3.presigned_path(
                "GET", "bench-large", f"big-{run}", datetime.datetime.now(datetime.UTC)),
                None, {})
            transfer("put", self.nginx, f"{self.nginx.base_url}/put/big-{run}", body, {})
            transfer("get", self.nginx, f"{self.nginx.base_url}/put/big-{run}", None, {})
            for peer in self.peers:
                base = peer.server.base_url
                transfer(f"{peer.name}_put", peer.server, base + path, body,
                         peer.target.signed_headers("PUT", path, sha256))
                transfer(f"{peer.name}_unsigned", peer.server, base + unsigned, body,
                         peer.target.signed_headers("PUT", unsigned))
                transfer(f"{peer.name}_get", peer.server, base + peer.target.presigned_path(
                    "GET", "bench-large", f"big-{run}", datetime.datetime.now(datetime.UTC)),
                    None, {})

        def note(ours: str, theirs: str, kind: str) -> str:
            return (f"median of {self.plan.large_runs} curl run(s); server CPU "
                    f"{statistics.median(cpu[ours]):.2f} / {statistics.median(cpu[theirs]):.2f}"
                    + "".join(f" / {peer.name} {statistics.median(cpu[f'{peer.name}_{kind}']):.2f}"
                              for peer in self.peers) + " cores")

        def median(name: str) -> float | None:
            return statistics.median(rates[name]) if rates[name] else None

        def peers(kind: str) -> dict[str, float | None]:
            return peer_fields({peer.name: median(f"{peer.name}_{kind}") for peer in self.peers})

        md5 = statistics.median(md5_rates)
        unsigned_rate = median("ours_unsigned")
        return [
            Row("64 MiB PUT (objstore: MD5 + SHA-256 signed payload)", "MiB/s",
                median("ours_put"), median("put"), note("ours_put", "put", "put"),
                **peers("put")),
            Row("64 MiB PUT, UNSIGNED-PAYLOAD (objstore: MD5 only)", "MiB/s",
                unsigned_rate, median("put"), note("ours_unsigned", "put", "unsigned")
                + (f"; {unsigned_rate / md5:.2f}x the MD5 bound" if unsigned_rate else ""),
                **peers("unsigned")),
            Row("MD5 of 64 MiB, hashlib alone (the UNSIGNED-PAYLOAD PUT's bound)", "MiB/s",
                md5, None, f"median of {len(md5_rates)}, each the best of 3, 1 MiB updates"),
            Row("64 MiB GET", "MiB/s", median("ours_get"), median("get"),
                note("ours_get", "get", "get"), **peers("get")),
        ]

    # -- DeleteObjects of 1,000 keys -------------------------------------------------------------
    def delete_many(self) -> list[Row]:
        """One DeleteObjects (quiet) of 1,000 keys just written, per S3 server; the median
        of `large_runs` rounds. nginx has no equivalent."""
        keys = [f"del/{i:05d}" for i in range(1000)]
        ours = [self._timed_delete(self.objstore, self.s3, self.session, f"bench-del-{n}", keys)
                for n in range(self.plan.large_runs)]
        peers = {peer.name: statistics.median(
            self._timed_delete(peer.server, peer.target, peer.session, f"bench-del-{n}", keys)
            for n in range(self.plan.large_runs)) for peer in self.peers}
        return [Row("DeleteObjects of 1,000 keys", "ms", statistics.median(ours), None,
                    f"median of {self.plan.large_runs} run(s), quiet mode",
                    **peer_fields(peers))]

    def _timed_delete(self, server: Server, target: S3Target, session: S3Session,
                      bucket: str, keys: list[str]) -> float:
        session.create_bucket(bucket)
        spares = (f"del-spare/{i:05d}" for i in range(self.spares))
        self._wrk(server, f"{type(server).__name__.lower()}-seed-delete",
                  target.presigned_paths("PUT", bucket, chain(keys, spares)), "PUT",
                  self.empty_body, once=True, seconds=60)
        for key in sorted(set(keys) - set(session.list_keys(bucket, "del/"))):
            session.put(bucket, key, b"")
        elapsed = session.timed_delete_objects(bucket, keys)
        left = list(session.list_keys(bucket, "del/"))
        if left:
            raise RuntimeError(f"DeleteObjects left {len(left)} keys in {bucket}")
        return elapsed

    # -- aws s3 rm --recursive of a big prefix (optional phase) -----------------------------
    def rm_recursive(self) -> list[Row]:
        """`aws s3 rm --recursive` of a prefix of `rm_keys` 0-byte keys seeded with wrk,
        against objstore and each peer (moto unless --no-moto, RGW with --rgw): keys
        removed per second. The CLI
        lists 1,000 keys a page and sends one DeleteObject per key, 10 requests at a time
        (its default): this measures single-key deletes, not DeleteObjects. The CLI's own
        CPU (user + system of the process and its children, over the wall time) is shown
        beside the server's: near one core, the CLI is the bound (it is Python too)."""
        ours = self._rm_recursive(self.objstore, self.s3, self.session)
        note = (f"{ours.seconds:.1f} s; seeded at {ours.seeded:,.0f}/s; server CPU "
                f"{ours.server_cores:.2f} cores, aws CLI {ours.client_cores:.2f} cores")
        rates: dict[str, float | None] = {}
        for peer in self.peers:
            theirs = self._rm_recursive(peer.server, peer.target, peer.session)
            note += (f"; {peer.name}: {theirs.present:,} keys in {theirs.seconds:.1f} s, "
                     f"server {theirs.server_cores:.2f} cores, aws CLI "
                     f"{theirs.client_cores:.2f} cores")
            rates[peer.name] = theirs.keys_per_second
        return [Row(f"aws s3 rm --recursive of {ours.present:,} keys", "keys/s",
                    ours.keys_per_second, None, note, **peer_fields(rates))]

    def _rm_recursive(self, server: Server, target: S3Target, session: S3Session) -> RmRun:
        """Seed `rm_keys` keys on one server, then time `aws s3 rm --recursive` of them."""
        plan, bucket = self.plan, "bench-rm"
        name = type(server).__name__.lower()
        session.create_bucket(bucket)
        keys = (f"rm/{i:07d}" for i in range(plan.rm_keys + self.spares))
        seeded = self._wrk(server, f"{name}-seed-rm",
                           target.presigned_paths("PUT", bucket, keys), "PUT",
                           self.empty_body, once=True, seconds=plan.seed_deadline_seconds)
        present = sum(1 for _ in session.list_keys(bucket, "rm/", max_pages=10_000))
        meter = CpuMeter(server)
        started = time.perf_counter()
        client_cpu = aws_s3_rm(server.base_url, f"s3://{bucket}/rm/")
        seconds = time.perf_counter() - started
        server_cores = meter.cores()
        left = sum(1 for _ in session.list_keys(bucket, "rm/", max_pages=10_000))
        if left:
            self.notes.append(f"aws s3 rm --recursive left {left:,} keys on {name}")
        return RmRun(present, present - left, seconds, seeded.result.ops_per_second,
                     server_cores, client_cpu / seconds if seconds else 0.0)

    # -- listing a big bucket ------------------------------------------------------------------
    def listing(self) -> list[Row]:
        plan = self.plan
        self.session.create_bucket("bench-list")
        keys = (f"k/{i:07d}" for i in range(plan.list_keys + self.spares))
        seeded = self._wrk(self.objstore, "objstore-seed-list",
                           self.s3.presigned_paths("PUT", "bench-list", keys),
                           "PUT", self.empty_body, once=True, seconds=plan.seed_deadline_seconds)
        meter = CpuMeter(self.objstore)
        timings, listed = self.session.timed_list_walk("bench-list", plan.list_pages,
                                                       deadline_seconds=120)
        cores = meter.cores()
        return [
            Row(f"seed the listing bucket: 0 B PUT, new keys, c={plan.connections}", "ops/s",
                seeded.result.ops_per_second, None,
                f"{seeded.result.requests:,} keys in {seeded.result.duration_seconds:.1f} s; "
                f"server CPU {seeded.cores:.2f} cores"),
            Row(f"ListObjectsV2 page of 1000 keys (bucket of {seeded.result.requests:,} keys)"
                ", median", "ms", statistics.median(timings), None,
                f"{len(timings)} pages, {listed:,} keys walked; server CPU {cores:.2f} cores"),
            Row("ListObjectsV2 page of 1000 keys, slowest", "ms", max(timings), None,
                f"p90 {percentile(timings, 0.9):.2f} ms"),
        ]


def latency_rows(workload: str, ours: Measured, theirs: Measured, connections: int,
                 peers: Mapping[str, Measured] | None = None) -> list[Row]:
    """ops/s, p50 and p99 rows of one workload; `peers` by name ("moto", "rgw")."""
    a, b = ours.result, theirs.result
    peers = peers or {}
    cpu = f"server CPU {ours.cores:.2f} / {theirs.cores:.2f}" + "".join(
        f" / {name} {measured.cores:.2f}" for name, measured in peers.items())

    def of(figure: str) -> dict[str, float | None]:
        return peer_fields({name: getattr(measured.result, figure)
                            for name, measured in peers.items()})

    return [
        Row(f"{workload}, c={connections}", "ops/s", a.ops_per_second, b.ops_per_second,
            f"{a.requests:,} requests in {a.duration_seconds:.1f} s; {cpu} cores",
            **of("ops_per_second")),
        Row(f"{workload}, p50", "ms", a.p50_ms, b.p50_ms, "", **of("p50_ms")),
        Row(f"{workload}, p99", "ms", a.p99_ms, b.p99_ms, "", **of("p99_ms")),
    ]


def md5_mib_per_second(data: bytes, rounds: int = 3) -> float:
    """hashlib MD5 over `data` in 1 MiB blocks on this machine, in MiB/s (best of `rounds`):
    what an UNSIGNED-PAYLOAD PUT, which needs only the ETag's MD5, is bound by."""
    best = math.inf
    view = memoryview(data)
    for _ in range(rounds):
        started = time.perf_counter()
        digest = hashlib.md5()
        for offset in range(0, len(view), MIB):
            digest.update(view[offset:offset + MIB])
        digest.digest()
        best = min(best, time.perf_counter() - started)
    return len(data) / best / MIB
def aws_s3_rm(endpoint: str, url: str) -> float:
    """`aws s3 rm --recursive --quiet` of `url` against `endpoint` (the root credential);
    returns the CPU seconds (user + system) the CLI used."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ROOT_ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=ROOT_SECRET_KEY, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(["aws", "--endpoint-url", endpoint, "s3", "rm", "--recursive",
                             "--quiet", url], env=env, capture_output=True, text=True,
                            check=False, timeout=AWS_RM_TIMEOUT_SECONDS)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"aws s3 rm: exit {result.returncode}: {result.stderr[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def curl_mib_per_second(url: str, upload: Path | None, headers: dict[str, str]) -> float:
    """One transfer with curl (PUT of `upload`, else GET to /dev/null) in MiB/s."""
    command = ["curl", "-sS", "--max-time", str(CURL_TIMEOUT_SECONDS), "-o", "/dev/null",
               "-w", "%{http_code} %{time_total} %{size_upload} %{size_download}",
               "-H", "Expect:"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    if upload is not None:
        command += ["-T", str(upload)]
    command.append(url)
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            timeout=CURL_TIMEOUT_SECONDS + 10)
    status, seconds, uploaded, downloaded = result.stdout.split()
    if not status.startswith("2"):
        raise RuntimeError(f"curl {url.split('?')[0]}: HTTP {status} {result.stderr}")
    size = float(uploaded) if upload is not None else float(downloaded)
    if size != LARGE_BYTES:
        raise RuntimeError(f"curl {url.split('?')[0]}: moved {size:.0f} bytes")
    return size / float(seconds) / MIB


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="short smoke run (3 s per wrk run, 3000-key listing)")
    parser.add_argument("--out", type=Path, help="also write the table as markdown here")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    parser.add_argument("--list-keys", type=int, default=None,
                        help="keys to seed for the listing (default 100000; --quick 3000)")
    parser.add_argument("--seed-seconds", type=int, default=None,
                        help="most seconds spent seeding them (default 180; the listing "
                             "then walks the keys written by that deadline)")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="parent of the run's temporary directory (use a real disk)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--no-moto", action="store_true",
                        help="leave out the moto peer (needs the `bench` extra otherwise)")
    parser.add_argument("--rgw", action="store_true",
                        help="also run Ceph RGW (Debian's radosgw on a throwaway memstore "
                             "OSD) as a peer; about 20 s to set up and 1-2 GiB of RAM")
    parser.add_argument("--only", default="",
                        help="comma-separated phases to run, in that order: "
                             + ", ".join(PHASES) + " (rm is never in the default run)")
    parser.add_argument("--rm-keys", type=int, default=None,
                        help="keys the rm phase seeds and removes (default 100000)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.list_keys is not None:
        plan = dataclasses.replace(plan, list_keys=args.list_keys,
                                   list_pages=max(1, math.ceil(args.list_keys / 1000)))
    if args.seed_seconds is not None:
        plan = dataclasses.replace(plan, seed_deadline_seconds=args.seed_seconds)
    if args.rm_keys is not None:
        plan = dataclasses.replace(plan, rm_keys=args.rm_keys)
    try:
        only = selected_phases(args.only)
    except ValueError as exc:
        print(f"--only: {exc}", file=sys.stderr)
        return 2
    header = begin_command(REPO)  # SIGINT too: even if started ignored
    workdir = Path(tempfile.mkdtemp(prefix="objstore-bench-", dir=args.tmp_dir))
    try:
        with ExitStack() as stack:
            objstore, nginx = Objstore(workdir / "objstore"), Nginx(workdir / "nginx")
            peers: dict[str, Moto | Rgw] = {}
            if not args.no_moto:
                peers["moto"] = Moto(workdir / "moto")
            if args.rgw:
                peers["rgw"] = Rgw(workdir / "rgw")
            for server in (objstore, nginx, *peers.values()):
                stack.callback(server.stop)
                server.start()
            bench = Bench(plan, workdir, objstore, nginx, args.threads,
                          [Peer.of(name, server) for name, server in peers.items()])
            rows = bench.run(only)
    except KeyboardInterrupt:
        print("interrupted: every server and wrk process started has been stopped",
              file=sys.stderr)
        return 130
    finally:
        release_workdir(workdir, args.keep)
    table = format_table(rows)
    notes = [f"- {note}" for note in bench.notes]
    print("\n" + table + ("\n\n" + "\n".join(notes) if notes else ""))
    if args.out is not None:
        body = "\n".join(f"- {line}" for line in header) + "\n\n" + table + "\n"
        args.out.write_text(body + ("\n" + "\n".join(notes) + "\n" if notes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
