"""A request body (BodySpool feeding a BlobWriter) with its MD5 and SHA-256 computed
off-thread (FileDigest), with a runner whose jobs run when the test says so: order,
completeness, discarded bodies, the early flush."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer

from objstore.blobs.writer import SpoolFile
from objstore.http.spool import BodySpool
from objstore.threads import InlinePool


class ManualRunner:
    """Queues jobs; `run_all` runs them (and the jobs they queue) in order."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[..., Any], tuple[Any, ...], defer.Deferred[Any]]] = []

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
        d: defer.Deferred[Any] = defer.Deferred()
        self.jobs.append((fn, args, d))
        return d

    def run_all(self) -> int:
        count = 0
        while self.jobs:
            fn, args, d = self.jobs.pop(0)
            d.callback(fn(*args))
            count += 1
        return count


def _body(size: int) -> bytes:
    return os.urandom(size)


def _feed(spool: BodySpool, data: bytes, chunk: int = 65536) -> None:
    for start in range(0, len(data), chunk):
        spool.write(data[start:start + chunk])


def test_offloaded_digests_match_inline_ones(tmp_path: Path) -> None:
    data = _body(9 * 1024 * 1024 + 123)
    runner = ManualRunner()
    spool = BodySpool(str(tmp_path), want_sha256=True, memory_limit=1024 * 1024,
                      hash_runner=runner)
    _feed(spool, data)
    assert not spool.in_memory
    assert runner.jobs  # hashing started while the body was still arriving
    with pytest.raises(RuntimeError):
        spool.md5_hex  # noqa: B018 - not computed yet
    ready = spool.digests_ready()
    assert not ready.called
    runner.run_all()
    assert ready.called
    assert spool.md5_hex == hashlib.md5(data).hexdigest()
    assert spool.md5_b64 and spool.md5_digest == hashlib.md5(data).digest()
    assert spool.sha256_hex == hashlib.sha256(data).hexdigest()
    spool.close()


def test_inline_runner_and_no_sha256(tmp_path: Path) -> None:
    data = _body(6 * 1024 * 1024)
    spool = BodySpool(str(tmp_path), memory_limit=1024 * 1024, hash_runner=InlinePool())
    _feed(spool, data, chunk=100_000)
    spool.digests_ready()
    assert spool.md5_hex == hashlib.md5(data).hexdigest()
    assert spool.sha256_hex is None
    spool.close()


def test_small_bodies_are_hashed_inline(tmp_path: Path) -> None:
    runner = ManualRunner()
    spool = BodySpool(str(tmp_path), want_sha256=True, hash_runner=runner)
    spool.write(b"hello")
    assert spool.in_memory and not runner.jobs
    assert spool.digests_ready().called
    assert spool.md5_hex == hashlib.md5(b"hello").hexdigest()
    assert spool.sha256_hex == hashlib.sha256(b"hello").hexdigest()


def test_digests_survive_the_file_being_handed_over(tmp_path: Path) -> None:
    data = _body(5 * 1024 * 1024)
    runner = ManualRunner()
    spool = BodySpool(str(tmp_path), want_sha256=True, memory_limit=1024 * 1024,
                      hash_runner=runner)
    _feed(spool, data)
    ready = spool.digests_ready()
    held = spool.detach()
    assert isinstance(held, SpoolFile)
    os.close(held.fd)
    os.unlink(held.path)  # the digest reads through its own descriptor
    spool.close()
    runner.run_all()
    assert ready.called
    assert spool.md5_hex == hashlib.md5(data).hexdigest()
    assert spool.sha256_hex == hashlib.sha256(data).hexdigest()


def test_a_discarded_body_stops_hashing(tmp_path: Path) -> None:
    runner = ManualRunner()
    spool = BodySpool(str(tmp_path), want_sha256=True, memory_limit=1024 * 1024,
                      hash_runner=runner)
    _feed(spool, _body(6 * 1024 * 1024))
    spool.close()
    runner.run_all()  # the jobs in flight end; no new ones start
    assert not runner.jobs
    assert not list(tmp_path.iterdir())


def test_one_job_per_digest_keeps_up_with_a_writer_that_stays_ahead(tmp_path: Path) -> None:
    data = _body(13 * 1024 * 1024)
    runner = ManualRunner()
    spool = BodySpool(str(tmp_path), want_sha256=True, memory_limit=1024 * 1024,
                      hash_runner=runner)
    _feed(spool, data)
    # Each digest queued one job at its first 4 MiB; run now, it reads all 13 MiB.
    assert runner.run_all() == 2
    ready = spool.digests_ready()
    assert ready.called and not runner.jobs
    assert spool.md5_hex == hashlib.md5(data).hexdigest()
    assert spool.sha256_hex == hashlib.sha256(data).hexdigest()
    spool.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_complete_body_on_disk_is_flushed_early_on_its_own_descriptor(
        tmp_path: Path) -> None:
    syncs = ManualRunner()
    spool = BodySpool(str(tmp_path), memory_limit=1024 * 1024, hash_runner=InlinePool(),
                      sync_runner=syncs)
    _feed(spool, _body(3 * 1024 * 1024))
    before = _open_fds()
    spool.flush_early()
    spool.flush_early()  # once per body
    assert len(syncs.jobs) == 1 and _open_fds() == before + 1
    held = spool.detach()  # the blob store may take the file meanwhile
    assert isinstance(held, SpoolFile)
    assert syncs.run_all() == 1
    assert spool.early_flush is not None and spool.early_flush.called
    assert _open_fds() == before  # the duplicate is closed; the detached fd stays open
    assert os.fstat(held.fd).st_size == 3 * 1024 * 1024
    os.close(held.fd)
    os.unlink(held.path)


def test_no_early_flush_without_a_file_a_runner_or_a_valid_body(tmp_path: Path) -> None:
    syncs = ManualRunner()
    small = BodySpool(str(tmp_path), sync_runner=syncs)
    small.write(b"in memory")
    small.flush_early()
    unsynced = BodySpool(str(tmp_path), memory_limit=1024, hash_runner=InlinePool())
    _feed(unsynced, _body(4096))
    unsynced.flush_early()  # fsync = false: no runner
    too_large = BodySpool(str(tmp_path), memory_limit=1024, max_length=2048,
                          hash_runner=InlinePool(), sync_runner=syncs)
    _feed(too_large, _body(4096), chunk=1024)
    too_large.flush_early()
    assert not syncs.jobs
    assert small.early_flush is None and too_large.early_flush is None
    for spool in (small, unsynced, too_large):
        spool.close()


@pytest.mark.parametrize("size", [4096, 3 * 1024 * 1024])
def test_a_body_released_by_a_lost_connection_is_an_s3_error_not_an_assertion(
        tmp_path: Path, size: int) -> None:
    """twisted.web closes a request's content when its connection is lost, while the
    shielded request work still runs: handing the body over then is a quiet S3 error
    (the shield drops those), not an AssertionError logged as a traceback."""
    from objstore.errors import S3Error

    spool = BodySpool(str(tmp_path), want_sha256=False, memory_limit=1024 * 1024,
                      hash_runner=InlinePool())
    _feed(spool, _body(size))
    spool.finish_decoding()
    spool.close()
    with pytest.raises(S3Error) as raised:
        spool.detach()
    assert raised.value.code == "IncompleteBody"
    assert os.listdir(tmp_path) == []  # the spool file went with the connection
