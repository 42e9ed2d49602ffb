"""The listing benchmark: 1000-entry pages of big buckets, measured through HTTP.

Usage (from the repository root):  .venv/bin/python -m bench.listing [--keys N] [--quick]

Seeding a million keys through PUT would take hours (about 140 PUTs/s, see RESULTS.md), so
this harness writes the rows straight into a fresh SQLite metadata database, together with
the root user, its credential and the bucket rows: the unversioned buckets by one
`INSERT ... SELECT` over a recursive CTE (`seed_plain`: rows made inside SQLite), the
versioned ones with `SyncMetaStore.insert_recovered` (the bulk insert `objstore recover`
uses) in large batches. Blob ids point at nothing: a listing never opens a blob. It then
starts the real daemon on that data directory (`bench.servers.Objstore`: SQLite, fsync
on, one worker, loopback only) and times signed
ListObjectsV2 and ListObjectVersions requests over one keep-alive connection, one at a
time: pages at the start, the middle and the end of each bucket, with and without a
delimiter, on the big buckets and on 10k ones (the reference of issue 4's rule).

Every request has a timeout and every series a deadline; Ctrl-C or SIGTERM stops the
daemon; the temporary directory is deleted at the end unless --keep is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

if __package__ in (None, ""):  # `python bench/listing.py`: make `bench` and `objstore` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import urllib3
from lxml import etree

from bench import servers
from bench.report import begin_command, percentile, release_workdir, say
from bench.s3 import S3Target
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore, cpu_seconds
from objstore.meta.records import ObjectRecord

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
PAGE = 1000
KEYS_PER_DIR = 1000  # keys are d<dir>/o<n>: a delimiter listing of the root shows the dirs
VERSIONS_PER_KEY = 4  # the newest of every MARKER_EVERY-th key is a delete marker
MARKER_EVERY = 8
SMALL = 10_000  # the reference buckets: issue 4's "first page on 10k versions"
BATCH = 20_000  # rows per insert_recovered transaction
REQUEST_TIMEOUT_SECONDS = 120.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: every seeded timestamp is after it
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


# -- the layout of the seeded buckets (pure) --------------------------------------------------


def key_name(index: int) -> str:
    """The index-th key in listing order: `d0000/o0000` .. (KEYS_PER_DIR keys per dir)."""
    return f"d{index // KEYS_PER_DIR:04d}/o{index % KEYS_PER_DIR:04d}"


def version_id(key_index: int, version: int) -> str:
    """A fixed UUID per (key, version): version 0 is the oldest."""
    return str(uuid.UUID(int=(0xB5 << 120) | (key_index << 8) | version))


def has_marker(key_index: int) -> bool:
    """Whether the newest version of this key (in a versioned bucket) is a delete marker."""
    return key_index % MARKER_EVERY == MARKER_EVERY - 1


@dataclass(frozen=True)
class Bucket:
    name: str
    keys: int
    versions_per_key: int = 1  # > 1: a versioned bucket

    @property
    def versioned(self) -> bool:
        return self.versions_per_key > 1

    @property
    def entries(self) -> int:
        return self.keys * self.versions_per_key


def buckets_for(keys: int) -> tuple[Bucket, Bucket, Bucket, Bucket]:
    """(big, big versioned, 10k, 10k versioned): the versioned ones hold `keys` versions and
    SMALL versions, VERSIONS_PER_KEY per key."""
    small = min(SMALL, keys)
    return (
        Bucket("bench-big", keys),
        Bucket("bench-big-versions", keys // VERSIONS_PER_KEY, VERSIONS_PER_KEY),
        Bucket("bench-10k", small),
        Bucket("bench-10k-versions", small // VERSIONS_PER_KEY, VERSIONS_PER_KEY),
    )


@dataclass(frozen=True)
class Page:
    """One measured request: which page of which bucket, and how many entries it returns."""

    label: str
    bucket: Bucket
    query: str  # the query string, without leading "?"
    expected: int  # Contents + CommonPrefixes (or Version + DeleteMarker + CommonPrefixes)


def _q(value: str) -> str:
    return quote(value, safe="")


def _objects_query(start_after: str | None = None, delimiter: str = "",
                   prefix: str = "") -> str:
    query = f"list-type=2&max-keys={PAGE}"
    if delimiter:
        query += f"&delimiter={_q(delimiter)}"
    if prefix:
        query += f"&prefix={_q(prefix)}"
    if start_after is not None:
        query += f"&start-after={_q(start_after)}"
    return query


def _dirs(keys: int) -> int:
    return math.ceil(keys / KEYS_PER_DIR)


def object_pages(bucket: Bucket) -> list[Page]:
    """ListObjectsV2 pages of a bucket of `bucket.keys` keys: start, middle, end (the last
    full page); then with delimiter `/`: from the start and from a middle key (one
    CommonPrefix per dir), and inside the middle and the last dir (Contents only)."""
    n = bucket.keys
    middle, end = n // 2, max(0, n - PAGE)
    dirs = _dirs(n)
    mid_dir, last_dir = middle // KEYS_PER_DIR, dirs - 1
    return [
        Page("ListObjectsV2, start", bucket, _objects_query(), min(PAGE, n)),
        Page("ListObjectsV2, middle (start-after)", bucket,
             _objects_query(key_name(middle - 1)), min(PAGE, n - middle)),
        Page("ListObjectsV2, end (last page)", bucket,
             _objects_query(key_name(end - 1) if end else None), min(PAGE, n)),
        Page("ListObjectsV2 prefix=d, end (start-after)", bucket,
             _objects_query(key_name(end - 1) if end else None, prefix="d"), min(PAGE, n)),
        Page("ListObjectsV2 delimiter=/, start (CommonPrefixes)", bucket,
             _objects_query(delimiter="/"), min(PAGE, dirs)),
        Page("ListObjectsV2 delimiter=/, middle (start-after; CommonPrefixes)", bucket,
             _objects_query(key_name(middle - 1), delimiter="/"),
             min(PAGE, dirs - (middle - 1) // KEYS_PER_DIR - 1)),
        Page("ListObjectsV2 delimiter=/, middle dir (prefix)", bucket,
             _objects_query(delimiter="/", prefix=f"d{mid_dir:04d}/"),
             min(PAGE, n - mid_dir * KEYS_PER_DIR)),
        Page("ListObjectsV2 delimiter=/, last dir (prefix)", bucket,
             _objects_query(delimiter="/", prefix=f"d{last_dir:04d}/"),
             min(PAGE, n - last_dir * KEYS_PER_DIR)),
    ]


def latest_of_versioned_pages(bucket: Bucket) -> list[Page]:
    """ListObjectsV2 of a versioned bucket (every key has older versions; the latest of
    every MARKER_EVERY-th key is a delete marker, which the listing skips)."""
    middle = bucket.keys // 2
    live_after = sum(1 for k in range(middle, bucket.keys) if not has_marker(k))
    return [Page("ListObjectsV2 of the versioned bucket, middle (start-after)", bucket,
                 _objects_query(key_name(middle - 1)), min(PAGE, live_after))]


def _versions_query(key_marker: str = "", version_marker: str = "",
                    delimiter: str = "") -> str:
    query = f"versions&max-keys={PAGE}"
    if delimiter:
        query += f"&delimiter={_q(delimiter)}"
    if key_marker:
        query += f"&key-marker={_q(key_marker)}"
    if version_marker:
        query += f"&version-id-marker={_q(version_marker)}"
    return query


def version_pages(bucket: Bucket) -> list[Page]:
    """ListObjectVersions pages: start, middle (resuming inside a key, after its second
    newest version), end (the last full page), and with delimiter `/` from the start."""
    per, keys = bucket.versions_per_key, bucket.keys
    total = bucket.entries
    middle = keys // 2
    # After the second newest version of `middle`: its older versions remain.
    after_middle = (per - 2) + (keys - middle - 1) * per
    last_keys = min(keys, PAGE // per)  # the keys of the last full page
    end_marker = key_name(keys - last_keys - 1) if keys > last_keys else ""
    return [
        Page("ListObjectVersions, start", bucket, _versions_query(), min(PAGE, total)),
        Page("ListObjectVersions, middle (key + version-id marker)", bucket,
             _versions_query(key_name(middle), version_id(middle, per - 2)),
             min(PAGE, after_middle)),
        Page("ListObjectVersions, end (last page)", bucket, _versions_query(end_marker),
             min(PAGE, last_keys * per)),
        Page("ListObjectVersions prefix=d, end (key-marker)", bucket,
             _versions_query(end_marker) + "&prefix=d", min(PAGE, last_keys * per)),
        Page("ListObjectVersions delimiter=/, start (CommonPrefixes)", bucket,
             _versions_query(delimiter="/"), min(PAGE, _dirs(keys))),
    ]


# -- figures (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    page: Page
    timings_ms: tuple[float, ...]
    server_cpu_ms: float  # daemon CPU per request
    entries: int  # what the server returned (checked against page.expected)

    @property
    def median(self) -> float:
        return statistics.median(self.timings_ms) if self.timings_ms else math.nan

    @property
    def p95(self) -> float:
        return percentile(self.timings_ms, 0.95) if self.timings_ms else math.nan


def _ms(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def format_listing_table(results: Sequence[Measured]) -> str:
    lines = [
        "| workload | bucket | entries | median ms | p95 ms | server CPU ms | runs |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        size = f"{r.page.bucket.entries:,} " + ("versions" if r.page.bucket.versioned
                                                 else "keys")
        lines.append(f"| {r.page.label} | {size} | {r.entries:,} | {_ms(r.median)} | "
                     f"{_ms(r.p95)} | {_ms(r.server_cpu_ms)} | {len(r.timings_ms)} |")
    return "\n".join(lines)


def _plain(label: str) -> bool:
    return label.startswith("ListObjectsV2") and "delimiter" not in label \
        and "versioned" not in label


def size_verdict(results: Sequence[Measured], big: Bucket, small: Bucket) -> str | None:
    """Issue 31: a 1000-key page of the big bucket within 1.5x of the same page of the
    small one (each plain ListObjectsV2 page: start, middle, end, prefix), and <= 10 ms."""
    smalls = {r.page.label: r for r in results if r.page.bucket == small}
    pairs = [(r, smalls[r.page.label]) for r in results
             if r.page.bucket == big and _plain(r.page.label) and r.page.label in smalls]
    if not pairs:
        return None
    worst_ratio = max(pairs, key=lambda p: p[0].median / p[1].median)
    ratio = worst_ratio[0].median / worst_ratio[1].median
    slowest = max((p[0] for p in pairs), key=lambda r: r.median)
    ok = ratio < 1.5 and slowest.median <= 10.0
    return (f"issue 31 (1000-key page of {big.keys:,} keys < 1.5 x the same page of "
            f"{small.keys:,} keys, and <= 10 ms): worst ratio {ratio:.2f} "
            f"({worst_ratio[0].page.label}: {_ms(worst_ratio[0].median)} / "
            f"{_ms(worst_ratio[1].median)} ms), slowest median {_ms(slowest.median)} ms: "
            f"{'met' if ok else 'NOT met'}")


def verdicts(results: Sequence[Measured], big: Bucket, big_versions: Bucket,
             small_versions: Bucket, small: Bucket | None = None) -> list[str]:
    """The targets of issues 3, 4, 6 and 31, judged on the medians."""
    lines: list[str] = []
    if small is not None:
        line = size_verdict(results, big, small)
        if line is not None:
            lines.append(line)
    by = {(r.page.bucket.name, r.page.label): r for r in results}
    plain = [r for r in results if r.page.bucket == big and "delimiter" not in r.page.label]
    if plain:
        worst = max(plain, key=lambda r: r.median)
        ok = worst.median <= 30.0
        lines.append(f"issue 6 (1000-key page of a {big.keys:,}-key bucket <= 30 ms): slowest "
                     f"median {_ms(worst.median)} ms ({worst.page.label}): "
                     f"{'met' if ok else 'NOT met'}")
    reference = by.get((small_versions.name, "ListObjectVersions, start"))
    versions = [r for r in results if r.page.bucket == big_versions
                and r.page.label.startswith("ListObjectVersions")]
    if reference is not None and versions:
        limit = 2 * reference.median
        worst = max(versions, key=lambda r: r.median)
        ok = worst.median <= limit
        lines.append(f"issue 4 (each versions page of {big_versions.entries:,} versions <= 2 x "
                     f"first page on {small_versions.entries:,} = {_ms(limit)} ms): slowest "
                     f"median {_ms(worst.median)} ms ({worst.page.label}): "
                     f"{'met' if ok else 'NOT met'}")
    return lines


def insert_section(document: str, section: str) -> str:
    """RESULTS.md keeps the newest run first: put `section` before the first `## ` heading
    (or at the end when there is none)."""
    marker = "\n## "
    index = document.find(marker)
    if index < 0:
        return document.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    return document[: index + 1] + section.rstrip("\n") + "\n\n" + document[index + 1:]


def busy_ticks(proc_stat: str) -> tuple[int, int]:
    """(busy, total) CPU ticks of all cores from the first line of /proc/stat (idle and
    iowait count as not busy)."""
    fields = [int(v) for v in proc_stat.splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    return total - fields[3] - fields[4], total


# -- seeding ---------------------------------------------------------------------------


def _records(bucket: Bucket, owner: str, blob_base: int) -> Iterator[ObjectRecord]:
    per = bucket.versions_per_key
    for k in range(bucket.keys):
        key = key_name(k)
        for v in range(per):
            n = k * per + v
            stamp = T0 + k * 0.001 + v * 600.0
            newest = v == per - 1
            if bucket.versioned and newest and has_marker(k):
                yield ObjectRecord(
                    bucket=bucket.name, key=key, version_id=version_id(k, v),
                    blob_id=f"{blob_base + n:032x}", size=0, etag="", last_modified=stamp,
                    is_latest=True, is_delete_marker=True, owner_id=owner, owner_name="root")
                continue
            yield ObjectRecord(
                bucket=bucket.name, key=key,
                version_id=version_id(k, v) if bucket.versioned else "null",
                blob_id=f"{blob_base + n:032x}", size=(n * 7919) % 100_000,
                etag=f"{n:032x}", last_modified=stamp, is_latest=newest,
                owner_id=owner, owner_name="root",
                content_type="application/octet-stream",
                user_metadata={"origin": "bench"} if n % 4 == 0 else {},
                checksums={"crc32": "AAAAAA=="} if n % 2 == 0 else {},
                checksum_type="FULL_OBJECT" if n % 2 == 0 else None,
            )


# The rows `_records` makes for an unversioned bucket, made inside SQLite by one statement
# (a recursive CTE; no Python per row): about ten times faster than insert_recovered.
_PLAIN_ROWS = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
INSERT INTO objects (bucket, key, version_id, blob_id, size, etag, last_modified, is_latest,
    is_delete_marker, owner_id, owner_name, content_type, user_metadata, system_headers,
    storage_class, checksums, checksum_type, tags, encryption_params, parts, seq)
SELECT :bucket, printf('d%04d/o%04d', i / :per_dir, i % :per_dir), 'null',
    printf('%032x', :blob_base + i), (i * 7919) % 100000, printf('%032x', i),
    :t0 + i * 0.001, 1, 0, :owner, 'root', 'application/octet-stream',
    CASE WHEN i % 4 = 0 THEN '{"origin":"bench"}' ELSE '{}' END, '{}', 'STANDARD',
    CASE WHEN i % 2 = 0 THEN '{"crc32":"AAAAAA=="}' ELSE '{}' END,
    CASE WHEN i % 2 = 0 THEN 'FULL_OBJECT' END, '{}', '{}', '[]', :seq0 + i
FROM n
"""


def seed_plain(path: Path, bucket: Bucket, owner: str, blob_base: int) -> None:
    """The rows of an unversioned bucket, as `_records` makes them, by one INSERT ...
    SELECT in one transaction; the seq counter is advanced past them."""
    import sqlite3

    from objstore.meta.schema import OBJECTS_SEQ_NAME

    conn = sqlite3.connect(path)
    try:
        with conn:
            (seq0,) = conn.execute("SELECT value FROM seq_counter WHERE name = ?",
                                   (OBJECTS_SEQ_NAME,)).fetchone()
            conn.execute(_PLAIN_ROWS, {
                "count": bucket.keys, "bucket": bucket.name, "per_dir": KEYS_PER_DIR,
                "blob_base": blob_base, "t0": T0, "owner": owner, "seq0": int(seq0) + 1})
            conn.execute("UPDATE seq_counter SET value = value + ? WHERE name = ?",
                         (bucket.keys, OBJECTS_SEQ_NAME))
    finally:
        conn.close()


@dataclass(frozen=True)
class Seeded:
    rows: int
    seconds: float
    database_bytes: int
    storage_refresh_seconds: float  # the metrics timer's storage figures (usage counters)


def seed(data_dir: Path, buckets: Sequence[Bucket], say: Callable[[str], None]) -> Seeded:
    from objstore.blobs.control import ControlRecord
    from objstore.iam.bootstrap import ACCESS_KEY_ENV, SECRET_KEY_ENV, ensure_root
    from objstore.meta.dialect import create_db_engine
    from objstore.meta.records import BucketRecord
    from objstore.meta.store import SyncMetaStore

    started = time.monotonic()
    path = data_dir / "meta" / "objstore.db"  # where the daemon looks (sqlite_path_for)
    store = SyncMetaStore(create_db_engine("sqlite", str(path), None, 1))
    rows = 0
    try:
        store.migrate()
        control = ControlRecord(str(data_dir), fsync=False)
        control.prepare()
        owner = ensure_root(store, control, {ACCESS_KEY_ENV: ROOT_ACCESS_KEY,
                                             SECRET_KEY_ENV: ROOT_SECRET_KEY}).root_user_id
        for bucket in buckets:
            record = BucketRecord(bucket.name, owner, "us-east-1", T0,
                                  "Enabled" if bucket.versioned else "Disabled")
            store.create_bucket(record)
            control.write("buckets", bucket.name, dataclasses.asdict(record))
            if not bucket.versioned:
                seed_plain(path, bucket, owner, rows)
                rows += bucket.keys
                say(f"   {bucket.name}: {bucket.entries:,} rows (INSERT ... SELECT), "
                    f"{time.monotonic() - started:.0f} s so far")
                continue
            batch: list[ObjectRecord] = []
            for row in _records(bucket, owner, rows):
                batch.append(row)
                if len(batch) == BATCH:
                    store.insert_recovered(batch)
                    rows += len(batch)
                    batch = []
            if batch:
                store.insert_recovered(batch)
                rows += len(batch)
            say(f"   {bucket.name}: {bucket.entries:,} rows, "
                f"{time.monotonic() - started:.0f} s so far")
        seeded_at = time.monotonic()
        store.storage_totals()
        store.usage_by_bucket(1000)
        refresh = time.monotonic() - seeded_at
    finally:
        store.close()
    size = sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())
    return Seeded(rows, seeded_at - started, size, refresh)


# -- measuring ---------------------------------------------------------------------------


class Client:
    """One keep-alive connection; each request is signed before the clock starts."""

    def __init__(self, base_url: str) -> None:
        self.target = S3Target(base_url, ROOT_ACCESS_KEY, ROOT_SECRET_KEY)
        parts = urlsplit(base_url)
        self.pool = urllib3.HTTPConnectionPool(parts.hostname or "127.0.0.1", parts.port,
                                               maxsize=1, retries=False,
                                               timeout=REQUEST_TIMEOUT_SECONDS)

    def timed_get(self, path: str) -> tuple[float, bytes]:
        """Milliseconds from sending the request to its last byte, and the body."""
        headers = self.target.signed_headers("GET", path)
        started = time.perf_counter()
        response = self.pool.request("GET", path, headers=headers)
        elapsed = (time.perf_counter() - started) * 1e3
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {response.data[:300]!r}")
        return elapsed, response.data


def count_entries(body: bytes) -> int:
    root = etree.fromstring(body)
    return sum(1 for child in root
               if child.tag in (f"{_NS}Contents", f"{_NS}Version", f"{_NS}DeleteMarker",
                                f"{_NS}CommonPrefixes"))


def measure(client: Client, daemon_pid: int, page: Page, runs: int,
            deadline_seconds: float) -> Measured:
    path = f"/{page.bucket.name}?{page.query}"
    _, body = client.timed_get(path)  # warm-up: caches, and the entry count check
    entries = count_entries(body)
    if entries != page.expected:
        raise RuntimeError(f"{page.label} on {page.bucket.name}: {entries} entries, "
                           f"expected {page.expected}")
    timings: list[float] = []
    cpu = cpu_seconds(daemon_pid)
    stop_at = time.monotonic() + deadline_seconds
    while len(timings) < runs and time.monotonic() < stop_at:
        timings.append(client.timed_get(path)[0])
    cpu_ms = (cpu_seconds(daemon_pid) - cpu) * 1e3 / max(1, len(timings))
    return Measured(page, tuple(timings), cpu_ms, entries)


def wait_idle(pid: int, limit_seconds: float = 60.0) -> float:
    """Wait until the daemon stops working on its own (at start its metrics timer runs an
    aggregate over every row: 1-2 s on 2M rows); returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < limit_seconds:
        before = cpu_seconds(pid)
        time.sleep(1.0)
        if cpu_seconds(pid) - before < 0.05:
            break
    return time.monotonic() - started


class LoadMeter:
    """Cores used by processes other than the daemon and this harness while it ran."""

    def __init__(self, daemon_pid: int) -> None:
        self.pid = daemon_pid
        self.busy, self.total = busy_ticks(Path("/proc/stat").read_text())
        self.daemon = cpu_seconds(daemon_pid)
        self.own = self._own()
        self.wall = time.monotonic()

    @staticmethod
    def _own() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def other_cores(self) -> float:
        busy, _ = busy_ticks(Path("/proc/stat").read_text())
        wall = time.monotonic() - self.wall
        all_cpu = (busy - self.busy) / os.sysconf("SC_CLK_TCK")
        ours = (cpu_seconds(self.pid) - self.daemon) + (self._own() - self.own)
        return max(0.0, all_cpu - ours) / wall if wall > 0 else 0.0


# -- the run -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=None,
                        help="keys in the big bucket, and versions in the big versioned "
                             "bucket (default 1000000; --quick 20000)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 20,000 keys, 5 runs per page, not recorded")
    parser.add_argument("--runs", type=int, default=None,
                        help="timed requests per page (default 20; --quick 5)")
    parser.add_argument("--series-seconds", type=float, default=60.0,
                        help="most seconds spent timing one page (default 60)")
    parser.add_argument("--label", default="listing benchmark",
                        help="title of the section written to bench/RESULTS.md")
    parser.add_argument("--results", type=Path, default=None,
                        help="markdown file the figures are added to (default "
                             "bench/RESULTS.md; --quick: none)")
    parser.add_argument("--no-record", action="store_true", help="do not write any results")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="parent of the run's temporary directory (use a real disk)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--objects-only", action="store_true",
                        help="seed and measure only the unversioned buckets (the big one and "
                             "10k keys): ListObjectsV2 pages and issue 31's size ratio")
    args = parser.parse_args(argv)
    if args.keys is None:
        args.keys = 20_000 if args.quick else 1_000_000
    if args.runs is None:
        args.runs = 5 if args.quick else 20
    if args.keys < 4 * PAGE:
        parser.error(f"--keys must be at least {4 * PAGE}")
    if args.results is None and not args.quick:
        args.results = RESULTS
    if args.no_record:
        args.results = None
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A daemon opening a big database on a busy 2-core machine may take longer than the
    # default to answer its health check.
    servers.READY_TIMEOUT_SECONDS = max(servers.READY_TIMEOUT_SECONDS, 180.0)
    header = begin_command(REPO)
    big, big_versions, small, small_versions = buckets_for(args.keys)
    seeded_buckets = (big, small) if args.objects_only else (
        big, big_versions, small, small_versions)
    workdir = Path(tempfile.mkdtemp(prefix="objstore-bench-listing-", dir=args.tmp_dir))
    results: list[Measured] = []
    try:
        daemon = Objstore(workdir / "objstore", workers=1)  # its CPU is the worker's
        say(f"-- seeding {', '.join(f'{b.name} ({b.entries:,})' for b in seeded_buckets)} "
            f"into {workdir}")
        seeded = seed(daemon.workdir / "data", seeded_buckets, say)
        say(f"   {seeded.rows:,} rows in {seeded.seconds:.0f} s "
            f"({seeded.rows / seeded.seconds:,.0f} rows/s), database "
            f"{seeded.database_bytes / 1024**2:,.0f} MiB")
        try:
            daemon.start()
            assert daemon.process is not None
            pid = daemon.process.pid
            client = Client(daemon.base_url)
            load = LoadMeter(pid)
            started = time.monotonic()
            say(f"   daemon ready; idle after {wait_idle(pid):.0f} s")
            series = [(big, object_pages), (small, object_pages)]
            if not args.objects_only:
                series += [(big_versions, latest_of_versioned_pages),
                           (big_versions, version_pages), (small_versions, version_pages)]
            for bucket, pages in series:
                for page in pages(bucket):
                    result = measure(client, pid, page, args.runs, args.series_seconds)
                    results.append(result)
                    say(f"   {page.label} [{bucket.name}]: median {_ms(result.median)} ms, "
                        f"p95 {_ms(result.p95)} ms, {len(result.timings_ms)} runs")
            measuring_seconds = time.monotonic() - started
            others = load.other_cores()
        finally:
            daemon.stop()
    except KeyboardInterrupt:
        print("interrupted: the daemon has been stopped", file=sys.stderr)
        return 130
    finally:
        release_workdir(workdir, args.keep)

    table = format_listing_table(results)
    checks = verdicts(results, big, big_versions, small_versions, small)
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    notes = [
        f"seeding: {seeded.rows:,} rows (INSERT ... SELECT; insert_recovered for versioned "
        f"buckets) in {seeded.seconds:.0f} s; "
        f"SQLite database {seeded.database_bytes / 1024**2:,.0f} MiB",
        f"measuring: {measuring_seconds:.0f} s; other processes used {others:.2f} cores on "
        f"average meanwhile (of {os.cpu_count()}); load average at the end {loadavg}",
        f"the metrics timer's storage figures took {seeded.storage_refresh_seconds:.3f} s "
        "(they run every 60 s in the daemon)",
        *checks,
    ]
    say("\n" + table + "\n\n" + "\n".join(f"- {line}" for line in notes))
    if args.results is not None:
        date = header[0].removeprefix("date: ")
        section = (f"## {date[:10]}: {args.label}\n\n"
                   "Figures from `bench/listing.py` (see the listing section of "
                   "`bench/README.md`).\n\n"
                   + "\n".join(f"- {line}" for line in header) + "\n"
                   + "\n".join(f"- {line}" for line in notes) + "\n\n" + table + "\n")
        document = args.results.read_text() if args.results.exists() else ""
        args.results.write_text(insert_section(document, section))
        say(f"\nrecorded in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
