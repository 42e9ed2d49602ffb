"""The durable outbox's delivery (engine/outbox.py) over the engine services, on SQLite and
PostgreSQL: no consumer, no entry; every object change of a client (put, overwrite, tags,
delete marker, version delete, completed upload) delivered once in commit order with who
asked; a failing consumer gets the same page again after its backoff and its cursor stays
(at-least-once); cursors per consumer and the purge behind the slowest; past the bound a
client's write is refused with 503 SlowDown and nothing is written, background work is
not; a peer's applied change leaves nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore
from objstore.engine.buckets import BucketService
from objstore.engine.changes import Caller, ChangeKind, Origin
from objstore.engine.multipart import (
    ChecksumMode,
    CompletionClaims,
    MultipartService,
    RequestedPart,
)
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.engine.outbox import OutboxDelivery, backoff, env_consumers
from objstore.engine.versioning import KeyLocks
from objstore.engine.versions import VersionService
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.outbox_queries import OutboxEntry
from objstore.meta.pool import SyncDbPool
from objstore.meta.store import SyncMetaStore
from objstore.metrics.collectors import OutboxCollector
from objstore.threads import InlinePool
from tests.unit.conftest import fails, run
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

ALICE = Principal("u-alice", "alice", True, "AKALICE")
CALLER = Caller(ALICE, request_id="req-1", source_address="192.0.2.7", operation="PutObject")


class Recording:
    def __init__(self, name: str) -> None:
        self.name = name
        self.pages: list[list[OutboxEntry]] = []
        self.failing = False

    async def deliver(self, entries: Sequence[OutboxEntry]) -> None:
        self.pages.append(list(entries))
        if self.failing:
            raise ConnectionError("target down")

    def delivered(self) -> list[tuple[str, str]]:
        return [(e.kind, e.key) for page in self.pages for e in page]


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Node:
    sql: SyncMetaStore
    blobs: BlobStore
    buckets: BucketService
    objects: ObjectService
    multipart: MultipartService
    versions: VersionService
    outbox: OutboxDelivery
    clock: Clock

    def body(self, data: bytes) -> BodySpool:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=1024)
        spool.write(data)
        return spool

    def put(self, key: str, data: bytes = b"data", caller: Caller = CALLER) -> None:
        run(self.objects.put(caller, "bkt", key, self.body(data), ObjectAttrs()))


def node(sql: SyncMetaStore, directory: Path, *consumers: Recording,
         max_backlog: int = 100, page_size: int = 200, pages_per_tick: int = 25) -> Node:
    meta = MetaStore(sql, SyncDbPool())
    blobs = BlobStore(str(directory / "data"), fsync=False)
    blobs.prepare()
    control = ControlRecord(str(directory / "data"), fsync=False)
    control.prepare()
    io, clock, locks = InlinePool(), Clock(), KeyLocks()
    outbox = OutboxDelivery(meta, clock=clock, max_backlog=max_backlog, consumers=consumers,
                            page_size=page_size, pages_per_tick=pages_per_tick)
    built = Node(
        sql, blobs,
        BucketService(meta, control, io, region="us-east-1", clock=clock),
        ObjectService(meta, blobs, io, clock=clock, locks=locks, outbox=outbox),
        MultipartService(meta, blobs, io, clock=clock, outbox=outbox),
        VersionService(meta, blobs, io, clock=clock, locks=locks, outbox=outbox),
        outbox, clock)
    run(built.buckets.create(CALLER, "bkt", location=None, object_lock=False))
    return built


def test_without_a_consumer_nothing_is_written(meta_store: SyncMetaStore,  # noqa: F811
                                               tmp_path: Path) -> None:
    engine = node(meta_store, tmp_path)
    engine.put("k")
    run(engine.outbox.tick())
    assert meta_store.outbox_read_after(0, 10).entries == () and not engine.outbox.active
    assert env_consumers({}) == []


def test_every_change_is_delivered_in_commit_order_with_who_asked(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    hooks = Recording("hooks")
    engine = node(meta_store, tmp_path, hooks)
    engine.put("k", b"one")
    engine.put("k", b"two")  # replaces the null version's row: both are delivered
    run(engine.versions.put_tags(CALLER, "bkt", "k", None, {"t": "1"}))
    run(engine.objects.delete(CALLER, "bkt", "k"))  # unversioned: the version goes
    upload = run(engine.multipart.create(CALLER, "bkt", "big", ObjectAttrs(), ChecksumMode()))
    part = run(engine.multipart.upload_part(CALLER, upload, 1, engine.body(b"part"), {}))
    run(engine.multipart.complete(CALLER, upload, [RequestedPart(1, part.etag)],
                                  CompletionClaims()))
    run(engine.outbox.tick())
    assert hooks.delivered() == [
        (ChangeKind.OBJECT_WRITTEN.value, "k"), (ChangeKind.OBJECT_WRITTEN.value, "k"),
        (ChangeKind.TAGS_CHANGED.value, "k"), (ChangeKind.VERSION_DELETED.value, "k"),
        (ChangeKind.OBJECT_WRITTEN.value, "big")]
    entries = hooks.pages[0]
    assert [e.size for e in entries[:2]] == [3, 3] and entries[0].etag != entries[1].etag
    seqs = [e.seq for e in entries]
    assert seqs == sorted(set(seqs))
    first = entries[0]
    assert (first.principal, first.source_address, first.request_id, first.operation) == (
        "u-alice", "192.0.2.7", "req-1", "PutObject")
    assert meta_store.outbox_cursor("hooks") == seqs[-1]
    assert meta_store.outbox_read_after(0, 10).entries == ()  # purged once passed
    assert engine.outbox.backlog == 0 and engine.outbox.delivered == 5
    run(engine.outbox.tick())
    assert len(hooks.pages) == 1  # nothing new: nothing delivered again


def test_a_failing_consumer_gets_the_page_again_after_its_backoff(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    hooks = Recording("hooks")
    engine = node(meta_store, tmp_path, hooks)
    engine.put("a")
    hooks.failing = True
    run(engine.outbox.tick())
    assert meta_store.outbox_cursor("hooks") == 0 and engine.outbox.backlog == 1
    engine.put("b")
    engine.clock.now += backoff(1) / 2
    run(engine.outbox.tick())
    assert len(hooks.pages) == 1  # still backing off
    engine.clock.now += backoff(1)
    run(engine.outbox.tick())  # fails again: the wait doubles
    assert len(hooks.pages) == 2 and meta_store.outbox_cursor("hooks") == 0
    hooks.failing = False
    engine.clock.now += backoff(2)
    run(engine.outbox.tick())
    assert [[e.key for e in page] for page in hooks.pages] == [["a"], ["a", "b"], ["a", "b"]]
    assert engine.outbox.backlog == 0


def test_full_pages_are_followed_by_the_next_up_to_the_bound_per_tick(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    hooks = Recording("hooks")
    engine = node(meta_store, tmp_path, hooks, page_size=2, pages_per_tick=2)
    for key in "abcde":
        engine.put(key)
    run(engine.outbox.tick())  # two full pages, the bound: the fifth waits
    assert [[e.key for e in page] for page in hooks.pages] == [["a", "b"], ["c", "d"]]
    assert engine.outbox.backlog == 1 and engine.outbox.delivered == 4
    engine.put("f")
    engine.put("g")
    run(engine.outbox.tick())  # a full page, then a short one ends the tick
    assert [[e.key for e in page] for page in hooks.pages[2:]] == [["e", "f"], ["g"]]
    assert engine.outbox.backlog == 0
    hooks.failing = True
    engine.put("h")
    engine.put("i")
    engine.put("j")
    run(engine.outbox.tick())  # a failure ends the tick: the cursor stays before it
    assert [e.key for e in hooks.pages[-1]] == ["h", "i"] and engine.outbox.backlog == 3


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff(n, 1.0, 5.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]


def test_cursors_are_per_consumer_and_the_purge_waits_for_the_slowest(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    fast, slow = Recording("fast"), Recording("slow")
    engine = node(meta_store, tmp_path, fast, slow)
    slow.failing = True
    engine.put("a")
    run(engine.outbox.tick())
    assert meta_store.outbox_cursor("fast") > 0 and meta_store.outbox_cursor("slow") == 0
    assert len(meta_store.outbox_read_after(0, 10).entries) == 1 and engine.outbox.backlog == 1
    slow.failing = False
    engine.clock.now += 3600
    run(engine.outbox.tick())
    assert slow.delivered() == [("object_written", "a")] * 2 and fast.delivered() == [
        ("object_written", "a")]
    assert meta_store.outbox_read_after(0, 10).entries == ()


def test_past_the_bound_client_writes_are_refused_and_nothing_is_dropped(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    hooks = Recording("hooks")
    engine = node(meta_store, tmp_path, hooks, max_backlog=2)
    hooks.failing = True
    engine.put("a")
    engine.put("b")
    run(engine.outbox.tick())
    assert engine.outbox.backlog == 2
    error = fails(engine.objects.put(CALLER, "bkt", "c", engine.body(b"c"), ObjectAttrs()))
    assert (error.code, error.status) == ("SlowDown", 503)
    assert meta_store.get_object("bkt", "c", "null") is None
    lifecycle = Caller(ALICE, origin=Origin.LIFECYCLE, operation="Lifecycle::ExpireObject")
    run(engine.objects.delete(lifecycle, "bkt", "a"))  # background work is not refused
    peer = Caller(ALICE, origin=Origin.PEER)
    engine.put("p", caller=peer)  # not refused either, and leaves no entry
    assert [e.key for e in meta_store.outbox_read_after(0, 10).entries] == ["a", "b", "a"]
    hooks.failing = False
    engine.clock.now += 3600
    run(engine.outbox.tick())
    assert engine.outbox.backlog == 0
    engine.put("c")  # admitted again
    assert hooks.pages[-1][-1].kind == "version_deleted"


def test_the_backlog_and_deliveries_are_metrics() -> None:
    class Figures:
        backlog, delivered = 7, 3

    registry = CollectorRegistry()
    registry.register(OutboxCollector(Figures()))
    text = generate_latest(registry).decode()
    assert "objstore_outbox_backlog 7.0" in text
    assert "objstore_outbox_delivered_total 3.0" in text
