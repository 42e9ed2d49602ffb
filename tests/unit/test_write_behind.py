"""Write-behind of a large body's spool file (blobs/writebehind.py): a window at a time,
one job in flight, each on its own duplicate descriptor; a spool with an IO runner asks
for it as the body arrives, one without (fsync off) never does."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer

from objstore.blobs.writebehind import WriteBehind, start_writeback
from objstore.blobs.writer import SpoolFile
from objstore.http.spool import BodySpool
from objstore.threads import InlinePool

MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(not WriteBehind.available(), reason="no sync_file_range")


class ManualRunner:
    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[..., Any], tuple[Any, ...], defer.Deferred[Any]]] = []

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
        d: defer.Deferred[Any] = defer.Deferred()
        self.jobs.append((fn, args, d))
        return d

    def step(self) -> tuple[Any, ...]:
        fn, args, d = self.jobs.pop(0)
        d.callback(fn(*args))
        return args

    def run_all(self) -> list[tuple[Any, ...]]:
        done = []
        while self.jobs:
            done.append(self.step())
        return done


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_window_at_a_time_and_one_job_in_flight(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, os.urandom(3 * MIB))
        runner = ManualRunner()
        behind = WriteBehind(runner, window_bytes=MIB)
        before = _open_fds()
        behind.advance(fd, MIB // 2)
        assert not runner.jobs  # less than a window waits
        behind.advance(fd, MIB + 10)
        behind.advance(fd, 2 * MIB + 10)  # a job runs: no second one
        assert len(runner.jobs) == 1 and _open_fds() == before + 1
        assert runner.step()[1:] == (0, MIB + 10)
        assert _open_fds() == before  # the job closed its duplicate
        behind.advance(fd, 3 * MIB)
        assert runner.step()[1:] == (MIB + 10, 2 * MIB - 10)
    finally:
        os.close(fd)


def test_a_failed_call_is_left_to_the_fsync(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT, 0o600)
    start_writeback(fd, 0, MIB)  # nothing dirty, nothing to fail; the fd is closed
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_large_spool_is_written_behind_as_it_arrives(tmp_path: Path) -> None:
    syncs = ManualRunner()
    spool = BodySpool(str(tmp_path), memory_limit=MIB, hash_runner=InlinePool(),
                      sync_runner=syncs)
    data = os.urandom(20 * MIB)
    before = _open_fds()
    for start in range(0, len(data), MIB):
        spool.write(data[start:start + MIB])
        syncs.run_all()  # each job ends before the next window: one per window
    spool.flush_early()
    syncs.run_all()
    assert spool.digests_ready().called  # (an inline hash runner)
    held = spool.detach()
    assert isinstance(held, SpoolFile)
    assert _open_fds() == before + 1  # only the spool's own descriptor
    with open(held.path, "rb") as spooled:
        assert spooled.read() == data
    os.close(held.fd)
    os.unlink(held.path)
    assert spool.md5_hex  # digests unaffected


def test_windows_cover_the_file_in_order(tmp_path: Path) -> None:
    syncs = ManualRunner()
    spool = BodySpool(str(tmp_path), memory_limit=MIB, hash_runner=InlinePool(),
                      sync_runner=syncs)
    started: list[tuple[int, int]] = []
    for _ in range(20):
        spool.write(os.urandom(MIB))
        for args in syncs.run_all():
            started.append(args[1:])
    assert started[0][0] == 0 and len(started) == 2  # 8 MiB windows of a 20 MiB body
    for (offset, count), (following, _) in zip(started, started[1:], strict=False):
        assert offset + count == following
    spool.close()


def test_no_write_behind_without_an_io_runner(tmp_path: Path) -> None:
    hashes = ManualRunner()
    spool = BodySpool(str(tmp_path), memory_limit=MIB, hash_runner=hashes)
    for _ in range(20):
        spool.write(os.urandom(MIB))
    assert all(fn is not start_writeback for fn, _args, _d in hashes.jobs)
    spool.close()
    hashes.run_all()
