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
        self.in_place: list[str | None] = []  # removed without a withdrawn sidecar
        self.dropped: list[str] = []  # manifests, in order

    def delete_version(self, blob_id: str | None, part_ids: Sequence[str] = (), *,
                       sidecar_withdrawn: bool = True) -> None:
        if blob_id == self.failing:
            raise OSError("read-only file system")
        self.removed.append((blob_id, list(part_ids)))
        if not sidecar_withdrawn:
            self.in_place.append(blob_id)

    def drop_manifest(self, name: str) -> None:
        assert name not in self.dropped
        self.dropped.append(name)


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


def test_a_batch_s_manifest_goes_after_its_versions_whose_sidecars_are_in_place() -> None:
    io, blobs = ManualRunner(), Blobs()
    queue = RemovalQueue(blobs, io)  # type: ignore[arg-type]
    queue.remove([("a", [])])  # a single delete's: its sidecar was withdrawn alone
    queue.remove([("b", ["p"]), ("c", [])], in_place=True, then_drop="m1")
    queue.remove([], in_place=True, then_drop="m2")  # a batch that removed nothing
    assert queue.pending == 2
    io.step()
    io.step()
    assert blobs.removed == [("a", []), ("b", ["p"]), ("c", [])]
    assert blobs.in_place == ["b", "c"] and blobs.dropped == ["m1", "m2"]
    assert queue.drained().called


def test_a_batch_whose_version_could_not_be_removed_keeps_its_manifest() -> None:
    io, blobs = ManualRunner(), Blobs(failing="b")
    queue = RemovalQueue(blobs, io)  # type: ignore[arg-type]
    queue.remove([("a", []), ("b", [])], in_place=True, then_drop="m1")
    queue.remove([("c", [])], in_place=True, then_drop="m2")
    queue.remove([("d", [])], in_place=True)  # its manifest kept: a version in doubt
    io.step()
    io.step()
    assert blobs.removed == [("a", []), ("c", []), ("d", [])] and blobs.dropped == ["m2"]
    assert blobs.in_place == ["a", "c", "d"]
