"""A SIGKILL inside a shared sync barrier (blobs/barrier.py), under a burst of concurrent
small PUTs, against the real daemon.

The kill is injected, not timed: the daemon runs with a `sitecustomize` module (on its
PYTHONPATH only) that SIGKILLs the process when a round of the barrier that covers two or
more writes is about to sync (two callers, or one caller asking for a whole-volume sync:
the small bodies that arrived together, committed as one batch by blobs/store.py
`commit_bytes_many`), on the third such round after the switch file appears (once the
burst is in full flow). The writes of that round have created their blob and sidecar at
their final names (a small body is made durable in one sync) and wait for that sync.
None of them was answered. After the restart:

* every answered PUT reads back exact (bytes by MD5), and every listed key was written
  (an unanswered PUT is absent or whole, never torn);
* `objstore check --deep` finds nothing but orphans, and none once repaired;
* `objstore recover` from the sidecars alone rebuilds the same listing (keys, sizes, ETags).

A SIGKILL keeps the page cache, so this proves the order of renames and answers, not that
a sync reached the disk; that the barrier's syncs cover a write before it is answered is
what tests/unit/test_sync_barrier.py checks.
"""

from __future__ import annotations

import hashlib
import os
import random
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.faults.test_recover import CrashingDaemon
from tests.integration.conftest import BACKENDS, make_client
from tests.integration.daemon import (
    ORPHANS,
    check_findings,
    drop_database,
    objstore_cli,
)

WRITERS = 12
GROUPED_ROUND_TO_DIE_IN = 3
ANSWERED_BEFORE_THE_SWITCH = 40

CRASH_HOOK = textwrap.dedent('''
    """Test-only: SIGKILL this process in a grouped round of the sync barrier."""
    import os
    import signal

    from objstore.blobs import barrier

    _switch = os.environ["OBJSTORE_TEST_CRASH_SWITCH"]
    _run = barrier.SyncBarrier._run
    _grouped = [0]
    GROUPED_ROUND_TO_DIE_IN = {round}


    def _crashing_run(self, joined):
        grouped = len(joined.alone) >= 2 or joined.wants_whole
        if grouped and os.path.exists(_switch):
            _grouped[0] += 1
            if _grouped[0] >= GROUPED_ROUND_TO_DIE_IN:
                os.kill(os.getpid(), signal.SIGKILL)
        return _run(self, joined)


    barrier.SyncBarrier._run = _crashing_run
''').replace("{round}", str(GROUPED_ROUND_TO_DIE_IN))


@pytest.fixture(params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CrashingDaemon]:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(CRASH_HOOK)
    daemon = CrashingDaemon(tmp_path / "node", backend=request.param, workers=1,
                            hook_dir=hook_dir)
    daemon.start()
    yield daemon
    daemon.cleanup()


class Burst:
    """Writers PUTting small bodies to keys of their own until the daemon dies; each
    knows what was answered and what was in flight when the answers stopped."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.answered: dict[str, str] = {}  # key -> MD5 of what was sent
        self.unanswered: dict[str, str] = {}
        self._lock = threading.Lock()

    def write(self, writer: int) -> None:
        s3: Any = make_client(self.endpoint)
        draw = random.Random(writer)
        for number in range(100_000):
            key = f"w{writer}/{number}"
            body = os.urandom(draw.choice((0, 1, 100, 4096, 20_000, 200_000)))
            digest = hashlib.md5(body).hexdigest()
            try:
                etag = s3.put_object(Bucket="burst", Key=key, Body=body)["ETag"]
            except (BotoCoreError, ClientError):
                with self._lock:
                    self.unanswered[key] = digest
                return
            assert etag.strip('"') == digest
            with self._lock:
                self.answered[key] = digest


def _listing(s3: Any) -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="burst"):
        found += [(o["Key"], o["Size"], o["ETag"]) for o in page.get("Contents", [])]
    return found


def test_a_kill_inside_a_grouped_sync_loses_no_answered_put(node: CrashingDaemon) -> None:
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="burst")
    s3.put_object(Bucket="burst", Key="before", Body=b"before the burst")
    burst = Burst(node.endpoint)
    writers = [threading.Thread(target=burst.write, args=(n,)) for n in range(WRITERS)]

    for thread in writers:
        thread.start()
    deadline = time.monotonic() + 60
    while len(burst.answered) < ANSWERED_BEFORE_THE_SWITCH:  # the writes are in full flow
        assert time.monotonic() < deadline and all(t.is_alive() for t in writers)
        time.sleep(0.05)
    node.switch.touch()
    for thread in writers:
        thread.join(120)
    assert node.process is not None
    code = node.process.wait(30)  # -9 only when a grouped round was reached
    node.process = None
    node.switch.unlink()
    assert code == -9, f"the daemon was expected to die, exit status {code}"
    assert burst.answered, "no PUT was answered before the kill"
    burst.answered["before"] = hashlib.md5(b"before the burst").hexdigest()

    node.hook_dir = None
    node.start()
    s3 = make_client(node.endpoint)
    for key, digest in burst.answered.items():
        body = s3.get_object(Bucket="burst", Key=key)["Body"].read()
        assert hashlib.md5(body).hexdigest() == digest, key
    written = burst.answered | burst.unanswered
    listed = _listing(s3)
    for key, size, etag in listed:
        assert key in written, f"{key} was never written"
        body = s3.get_object(Bucket="burst", Key=key)["Body"].read()
        assert (len(body), hashlib.md5(body).hexdigest()) == (size, written[key]), key
        assert etag.strip('"') == written[key]
    node.stop()

    report, findings = check_findings(node, "--deep", "--orphan-grace-seconds", "0")
    assert set(findings) <= {ORPHANS}, report.stdout + report.stderr
    repaired = objstore_cli(node, "check", "--repair", "--orphan-grace-seconds", "0")
    assert repaired.returncode in (0, 1), repaired.stdout + repaired.stderr
    report, findings = check_findings(node, "--deep")
    assert report.returncode == 0 and not findings, report.stdout + report.stderr

    drop_database(node)
    recovered = objstore_cli(node, "recover")
    assert recovered.returncode == 0, recovered.stderr
    node.start()
    assert _listing(make_client(node.endpoint)) == listed
