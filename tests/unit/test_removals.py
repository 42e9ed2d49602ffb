"""RemovalQueue (engine/removals.py): the files of deleted versions go after the answer,
one IO job at a time; what is asked meanwhile goes in the next job; a failure of one
version leaves the others to be removed. The IO pool is a fake the test runs by hand."""

from __future__ import annotations

from collections.abc import Sequence

from objstore.engine.removals import RemovalQueue
from tests.unit.conftest import ManualRunner


class Blobs:
    def __init__(self, failing: str = "") -> None:
        self.removed: list[tuple[str | None, list[str]]] = []
        self.failing = failing

    def delete_version(self, blob_id: str | None, part_ids: Sequence[str] = ()) -> None:
        if blob_id == self.failing:
            raise OSError("read-only file system")
        self.removed.append((blob_id, list(part_ids)))


def test_removals_asked_while_a_job_runs_share_the_next_job() -> None:
    io, blobs = ManualRunner(), Blobs()
    queue = RemovalQueue(blobs, io)  # type: ignore[arg-type]
    queue.remove([("a", [])])
    queue.remove([("b", ["p1", "p2"])])
    queue.remove([("c", [])])
    drained = queue.drained()
    assert len(io.jobs) == 1 and queue.pending == 2
    io.step()
    assert blobs.removed == [("a", [])] and len(io.jobs) == 1
    io.step()
    assert blobs.removed == [("a", []), ("b", ["p1", "p2"]), ("c", [])]
    assert io.jobs == [] and drained.called


def test_a_version_that_can_not_be_removed_leaves_the_others_to_go() -> None:
    io, blobs = ManualRunner(), Blobs(failing="b")
    queue = RemovalQueue(blobs, io)  # type: ignore[arg-type]
    queue.remove([("a", []), ("b", []), ("c", [])])
    io.step()
    assert blobs.removed == [("a", []), ("c", [])]
    assert queue.drained().called


def test_nothing_to_remove_starts_no_job() -> None:
    io = ManualRunner()
    queue = RemovalQueue(Blobs(), io)  # type: ignore[arg-type]
    queue.remove([])
    assert io.jobs == [] and queue.drained().called


def test_a_full_queue_makes_its_callers_wait_until_the_next_job_takes_it() -> None:
    io, blobs = ManualRunner(), Blobs()
    queue = RemovalQueue(blobs, io, max_waiting=3)  # type: ignore[arg-type]
    assert queue.remove([("a", [])]).called  # taken by the first job at once
    assert queue.remove([("b", []), ("c", [])]).called  # 2 waiting: room left
    full = queue.remove([("d", [])])
    also = queue.remove([])
    assert not full.called and not also.called and queue.pending == 3
    io.step()  # the first job ends; the next one takes the three waiting
    assert full.called and also.called and queue.pending == 0
    io.step()
    assert [blob for blob, _ in blobs.removed] == ["a", "b", "c", "d"]
