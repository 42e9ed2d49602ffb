"""`[server.cache] objects_ttl_seconds` end to end: a real daemon (SQLite, one worker)
driven by boto3, and a write to its database by another program (sqlite3), which the
node's coherence counter does not see. Within the TTL the worker still answers from the
record it cached; once the TTL has run out it answers with the foreign write.
(meta/object_cache.py `objects_ttl_seconds` has the rule for the default.)"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon

TTL_SECONDS = 2.0
ATTEMPTS = 5
FOREIGN_ETAG = "0123456789abcdef0123456789abcdef"  # stored bare, answered quoted
ANSWERED_FOREIGN = f'"{FOREIGN_ETAG}"'


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path / "node", workers=1,
                    extra_config=f"[server.cache]\nobjects_ttl_seconds = {TTL_SECONDS}\n")
    daemon.start()
    yield daemon
    daemon.cleanup()


def _foreign_write(database: Path, bucket: str, key: str) -> None:
    """Another program changes the object's ETag in the database, behind the node."""
    with sqlite3.connect(database, timeout=30) as connection:
        changed = connection.execute(
            "UPDATE objects SET etag = ? WHERE bucket = ? AND key = ? AND is_latest = 1",
            (FOREIGN_ETAG, bucket, key)).rowcount
    connection.close()
    assert changed == 1


def test_a_foreign_write_stays_unseen_until_the_object_ttl_runs_out(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="ttl")
    database = node.data_dir / "meta" / "objstore.db"
    assert database.exists()
    for attempt in range(ATTEMPTS):
        key = f"k{attempt}"
        s3.put_object(Bucket="ttl", Key=key, Body=b"written through the node")
        cached_at = time.monotonic()
        written = s3.head_object(Bucket="ttl", Key=key)["ETag"]  # the worker caches it
        _foreign_write(database, "ttl", key)
        seen = s3.head_object(Bucket="ttl", Key=key)["ETag"]
        if time.monotonic() - cached_at >= TTL_SECONDS:
            continue  # too slow to tell the cache from the database: another key
        assert seen == written != ANSWERED_FOREIGN  # within the TTL: the cached record
        deadline = cached_at + TTL_SECONDS + 10
        while seen != ANSWERED_FOREIGN:
            assert time.monotonic() < deadline, "the foreign write was never seen"
            time.sleep(0.2)
            seen = s3.head_object(Bucket="ttl", Key=key)["ETag"]
        assert time.monotonic() - cached_at >= TTL_SECONDS * 0.9  # not before the TTL
        return
    pytest.fail(f"no attempt of {ATTEMPTS} was fast enough to observe the cache")
