"""Cache coherence across worker processes: shared counters and the TtlCache rule."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from objstore.meta.coherence import BUCKETS, IAM, LocalCounters, SharedCounters, TtlCache

NOW = [1000.0]


def cache(counters: LocalCounters | SharedCounters, scope: str = BUCKETS) -> TtlCache[str, int]:
    return TtlCache(size=10, ttl_seconds=60.0, clock=lambda: NOW[0], counters=counters,
                    scope=scope)


def test_a_change_in_one_process_empties_the_other_processes_cache(tmp_path: Path) -> None:
    path = str(tmp_path / "generations")
    worker_a, worker_b = SharedCounters(path), SharedCounters(path)  # two mappings, one file
    a, b = cache(worker_a), cache(worker_b)
    a.store("k", 1, a.token())
    b.store("k", 1, b.token())
    b.invalidate("other")  # a change answered by worker b
    assert a.get("k") == (False, None)
    assert b.get("k") == (True, 1)  # its own bump does not cost b its other entries


def test_a_load_that_straddles_a_foreign_change_is_not_kept(tmp_path: Path) -> None:
    path = str(tmp_path / "generations")
    a, b = cache(SharedCounters(path)), cache(SharedCounters(path))
    token = a.token()  # a starts loading
    b.invalidate("k")  # b changes the record meanwhile
    a.store("k", 1, token)  # what a read may predate the change
    assert a.get("k") == (False, None)


def test_scopes_are_independent(tmp_path: Path) -> None:
    path = str(tmp_path / "generations")
    buckets = cache(SharedCounters(path), BUCKETS)
    buckets.store("k", 1, buckets.token())
    cache(SharedCounters(path), IAM).invalidate()
    assert buckets.get("k") == (True, 1)


def _bump_many(path: str, times: int) -> None:
    counters = SharedCounters(path)
    for _ in range(times):
        counters.bump(IAM)


def test_concurrent_bumps_from_processes_are_not_lost(tmp_path: Path) -> None:
    path = str(tmp_path / "generations")
    SharedCounters(path)
    workers = [multiprocessing.Process(target=_bump_many, args=(path, 500)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert SharedCounters(path).read(IAM) == 1500


def test_local_counters_invalidate_within_one_process() -> None:
    counters = LocalCounters()
    first, second = cache(counters, IAM), cache(counters, IAM)
    first.store("k", 1, first.token())
    second.invalidate()
    assert first.get("k") == (False, None)
