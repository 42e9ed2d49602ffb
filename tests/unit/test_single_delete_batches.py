"""Concurrent single DeleteObjects share their steps (engine/coalesce.py): the deletes
that arrive while one withdrawal runs on the IO pool are withdrawn together by the next
job (one `withdraw_sidecars`, one sync), each is answered only after its own row is
gone, and their files go after the answers. SQLite in a temp dir, the DB pool inline, an
IO pool whose jobs the test runs by hand; fsync off."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, ensureDeferred, maybeDeferred

from objstore.blobs.store import BlobStore
from objstore.engine.changes import Caller
from objstore.engine.objects import DeleteOutcome, ObjectAttrs, ObjectService
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import SyncMetaStore
from tests.unit.conftest import run

CALLER = Caller(Principal("u-alice", "alice", False, "AKALICE"))


class HeldPool:
    """Runs jobs at once until `hold`; then keeps them until `step` runs the first."""

    name = "held"

    def __init__(self) -> None:
        self.held = False
        self.jobs: list[tuple[Callable[[], Any], Deferred[Any]]] = []

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred[Any]:
        if not self.held:
            return maybeDeferred(fn, *args, **kwargs)
        done: Deferred[Any] = Deferred()
        self.jobs.append((lambda: fn(*args, **kwargs), done))
        return done

    def step(self) -> None:
        job, done = self.jobs.pop(0)
        done.callback(job())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[ObjectService, SyncMetaStore, BlobStore, HeldPool]]:
    store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2))
    store.migrate()
    store.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    io = HeldPool()
    clock = iter(range(1000, 1_000_000)).__next__
    objects = ObjectService(MetaStore(store, SyncDbPool()), blobs, io,
                            clock=lambda: float(clock()))
    yield objects, store, blobs, io
    store.close()


def put(objects: ObjectService, blobs: BlobStore, key: str) -> None:
    spool = BodySpool(blobs.tmp_dir, memory_limit=64 * 1024)
    spool.write(key.encode())
    run(objects.put(CALLER, "b", key, spool, ObjectAttrs()))


def test_deletes_arriving_during_a_withdrawal_are_withdrawn_together(
        world: tuple[ObjectService, SyncMetaStore, BlobStore, HeldPool]) -> None:
    objects, store, blobs, io = world
    keys = ["a", "b", "c", "d"]
    for key in keys:
        put(objects, blobs, key)
    records: dict[str, ObjectRecord] = {}
    for key in keys:
        record = store.get_object("b", key)
        assert record is not None and record.blob_id is not None
        records[key] = record
    withdrawn: list[list[str]] = []
    withdraw_sidecars = blobs.withdraw_sidecars
    blobs.withdraw_sidecars = (  # type: ignore[method-assign]
        lambda blob_ids: (withdrawn.append(list(blob_ids)), withdraw_sidecars(blob_ids))[1])
    io.held = True
    answers: dict[str, list[Any]] = {key: [] for key in keys}
    for key in keys:
        ensureDeferred(objects.delete(CALLER, "b", key)).addBoth(answers[key].append)
    assert len(io.jobs) == 1  # the first delete's withdrawal; the others wait for it
    io.step()
    assert answers["a"] == [DeleteOutcome(None)] and store.get_object("b", "a") is None
    assert all(answers[key] == [] for key in "bcd")  # not answered before their rows go
    assert all(store.get_object("b", key) is not None for key in "bcd")
    while io.jobs:
        io.step()
    assert withdrawn == [[records["a"].blob_id],
                         [records[key].blob_id for key in "bcd"]]  # in arrival order
    assert all(answers[key] == [DeleteOutcome(None)] for key in keys)
    assert all(store.get_object("b", key) is None for key in keys)
    for record in records.values():  # the files went after the answers
        assert record.blob_id is not None
        assert blobs.blob_size(record.blob_id) is None
        assert not os.path.exists(blobs.sidecar_path(record.blob_id))
    assert blobs.withdrawn_ids() == []
