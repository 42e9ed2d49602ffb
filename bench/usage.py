"""The usage benchmark: PUTs into a bucket with a quota that holds N objects (default 1M)
against PUTs into an empty bucket with the same quota, same daemon, same run.

Usage (from the repository root):  .venv/bin/python -m bench.usage [--keys N] [--puts M]

A quota is checked inside every PUT's transaction against the bucket's usage; that usage
must cost the same whatever the bucket holds. Seeding: the harness builds a fresh SQLite
metadata database (migrated, root user and credential, two buckets with their control
records and the same quota document) and inserts the N rows of the big bucket with ONE
SQL statement (a recursive CTE: rows made inside SQLite, no Python per row; the seq
counter is advanced past them), so a million rows take seconds to tens of seconds, not the
hours of a million PUTs. Blob ids point at nothing: nothing reads those blobs. Then it
starts the real daemon (`bench.servers.Objstore`: SQLite, fsync on, one worker) and sends
signed 4 KiB PUTs of new keys, one at a time over one keep-alive connection, alternating
between the two buckets in rounds, and prints the median and p95 of each, their ratio,
and the daemon's CPU per PUT.

Bounded: every request has a timeout; Ctrl-C stops the daemon; the temporary directory
is deleted unless --keep.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench import listing
from bench.report import begin_command, percentile, release_workdir, say
from bench.servers import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Objstore, cpu_seconds

REPO = Path(__file__).resolve().parents[1]
BIG, EMPTY = "bench-quota-big", "bench-quota-empty"
QUOTA = json.dumps({"max_bytes": 10**15, "max_objects": 10**9}, sort_keys=True)
T0 = 1_767_225_600.0
BODY = b"q" * 4096

# Columns of an object row the CTE fills; every NOT NULL column of `objects`.
_INSERT = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
INSERT INTO objects (bucket, key, version_id, blob_id, size, etag, last_modified, is_latest,
    is_delete_marker, owner_id, owner_name, content_type, user_metadata, system_headers,
    storage_class, checksums, tags, encryption_params, parts, seq)
SELECT :bucket, printf('k/%09d', i), 'null', printf('%032x', i), 4096,
    printf('%032x', i), :t0 + i * 0.001, 1, 0, :owner, 'root', 'application/octet-stream',
    '{}', '{}', 'STANDARD', '{}', '{}', '{}', '[]', :seq0 + i
FROM n
"""


def seed(data_dir: Path, keys: int) -> float:
    """The database of the run; returns the seconds the N rows took."""
    from objstore.blobs.control import ControlRecord
    from objstore.iam.bootstrap import ACCESS_KEY_ENV, SECRET_KEY_ENV, ensure_root
    from objstore.meta import schema
    from objstore.meta.dialect import create_db_engine
    from objstore.meta.records import BucketRecord
    from objstore.meta.store import SyncMetaStore

    path = data_dir / "meta" / "objstore.db"
    store = SyncMetaStore(create_db_engine("sqlite", str(path), None, 1))
    try:
        store.migrate()
        control = ControlRecord(str(data_dir), fsync=False)
        control.prepare()
        owner = ensure_root(store, control, {ACCESS_KEY_ENV: ROOT_ACCESS_KEY,
                                             SECRET_KEY_ENV: ROOT_SECRET_KEY}).root_user_id
        for name in (BIG, EMPTY):
            record = BucketRecord(name, owner, "us-east-1", T0, "Disabled")
            store.create_bucket(record)
            control.write("buckets", name, dataclasses.asdict(record))
            store.put_bucket_config(name, "quota", QUOTA)
    finally:
        store.close()
    started = time.monotonic()
    conn = sqlite3.connect(path)
    try:
        with conn:
            (seq0,) = conn.execute("SELECT value FROM seq_counter WHERE name = ?",
                                   (schema.OBJECTS_SEQ_NAME,)).fetchone()
            conn.execute(_INSERT, {"count": keys, "bucket": BIG, "t0": T0, "owner": owner,
                                   "seq0": int(seq0) + 1})
            conn.execute("UPDATE seq_counter SET value = value + ? WHERE name = ?",
                         (keys, schema.OBJECTS_SEQ_NAME))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.monotonic() - started


class Client(listing.Client):
    """bench.listing's keep-alive client, with PUTs of BODY signed before the clock starts."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.digest = hashlib.sha256(BODY).hexdigest()

    def timed_put(self, path: str) -> float:
        headers = self.target.signed_headers("PUT", path, self.digest)
        started = time.perf_counter()
        response = self.pool.request("PUT", path, body=BODY, headers=headers)
        elapsed = (time.perf_counter() - started) * 1e3
        if response.status != 200:
            raise RuntimeError(f"PUT {path}: {response.status} {response.data[:300]!r}")
        return elapsed


def measure(client: Client, pid: int, rounds: int, per_round: int
            ) -> dict[str, tuple[list[float], float]]:
    """Timings (ms) and daemon CPU ms per PUT, per bucket; the buckets take turns."""
    timings: dict[str, list[float]] = {BIG: [], EMPTY: []}
    cpu = {BIG: 0.0, EMPTY: 0.0}
    n = 0
    for _ in range(rounds):
        for bucket in (BIG, EMPTY):
            before = cpu_seconds(pid)
            for _ in range(per_round):
                n += 1
                timings[bucket].append(client.timed_put(f"/{bucket}/new/{n:08d}"))
            cpu[bucket] += cpu_seconds(pid) - before
    return {b: (t, cpu[b] * 1e3 / max(1, len(t))) for b, t in timings.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=1_000_000,
                        help="objects in the big bucket (default 1000000)")
    parser.add_argument("--rounds", type=int, default=6, help="turns per bucket (default 6)")
    parser.add_argument("--puts", type=int, default=50, help="PUTs per turn (default 50)")
    parser.add_argument("--tmp-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    begin_command(REPO)
    workdir = Path(tempfile.mkdtemp(prefix="objstore-bench-usage-", dir=args.tmp_dir))
    try:
        daemon = Objstore(workdir / "objstore", workers=1)
        seconds = seed(daemon.workdir / "data", args.keys)
        say(f"-- seeded {args.keys:,} rows into {BIG} in {seconds:.1f} s (one INSERT ... "
            f"SELECT); {EMPTY} is empty; both have the same quota")
        try:
            daemon.start()
            assert daemon.process is not None
            client = Client(daemon.base_url)
            client.timed_put(f"/{EMPTY}/warm-up")
            result = measure(client, daemon.process.pid, args.rounds, args.puts)
        finally:
            daemon.stop()
    except KeyboardInterrupt:
        print("interrupted: the daemon has been stopped", file=sys.stderr)
        return 130
    finally:
        release_workdir(workdir, args.keep)
    medians = {b: statistics.median(t) for b, (t, _) in result.items()}
    say("\n| bucket | objects | PUTs | median ms | p95 ms | server CPU ms per PUT |")
    say("|---|--:|--:|--:|--:|--:|")
    for bucket, held in ((BIG, args.keys), (EMPTY, 0)):
        timings, cpu_ms = result[bucket]
        say(f"| {bucket} (quota) | {held:,} | {len(timings)} | {medians[bucket]:.2f} | "
            f"{percentile(timings, 0.95):.2f} | {cpu_ms:.2f} |")
    say(f"\nratio of medians, {args.keys:,}-object bucket / empty bucket: "
        f"{medians[BIG] / medians[EMPTY]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
