"""The outbox notes only buckets a consumer is interested in (engine/outbox_interest.py),
on SQLite and PostgreSQL: a bucket without a notification or replication document leaves
no entry, one with either does; storing or deleting a document is seen by the next write
(through the configuration cache's invalidation, in this process or as a cluster merge's
bump of the shared counter); a write judged "no interest" before a configuration was
stored and committed after it still leaves its entry (the transaction looks again); a
consumer registered without documents (the test file consumer) gets every bucket's."""

from __future__ import annotations

from pathlib import Path

from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore
from objstore.engine.buckets import BucketService
from objstore.engine.changes import Caller, ChangeKind
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.engine.outbox import OutboxDelivery, note_for
from objstore.engine.outbox_interest import BucketInterest
from objstore.engine.versioning import KeyLocks
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.bucket_cache import BucketConfigCache
from objstore.meta.coherence import BUCKETS, LocalCounters
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import ObjectRecord
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)
from tests.unit.test_outbox import Clock, Recording

ALICE = Principal("u-alice", "alice", True, "AKALICE")
CALLER = Caller(ALICE, request_id="req-1", operation="PutObject")
DOC = '{"rules": []}'


class Setup:
    def __init__(self, sql: SyncMetaStore, directory: Path, *, every_bucket: bool = False
                 ) -> None:
        self.sql = sql
        self.clock = Clock()
        self.counters = LocalCounters()
        self.meta = MetaStore(sql, SyncDbPool(), config_cache=BucketConfigCache(
            size=100, ttl_seconds=60, clock=self.clock, counters=self.counters))
        self.blobs = BlobStore(str(directory / "data"), fsync=False)
        self.blobs.prepare()
        control = ControlRecord(str(directory / "data"), fsync=False)
        control.prepare()
        self.notes, self.journal = Recording("notifications"), Recording("replication")
        interest = BucketInterest(self.meta.cached_bucket_config, self.counters,
                                  clock=self.clock)
        self.outbox = OutboxDelivery(self.meta, clock=self.clock, max_backlog=100,
                                     interest=interest)
        self.outbox.register(self.notes, documents=("notification",))
        self.outbox.register(self.journal, documents=("replication",))
        if every_bucket:
            self.outbox.register(Recording("everything"))
        io = InlinePool()
        self.objects = ObjectService(self.meta, self.blobs, io, clock=self.clock,
                                     locks=KeyLocks(), outbox=self.outbox)
        buckets = BucketService(self.meta, control, io, region="us-east-1", clock=self.clock)
        for name in ("plain", "hooked", "replicated"):
            run(buckets.create(CALLER, name, location=None, object_lock=False))
        run(self.meta.put_bucket_config("hooked", "notification", DOC))
        run(self.meta.put_bucket_config("replicated", "replication", DOC))

    def put(self, bucket: str, key: str) -> None:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=1024)
        spool.write(b"data")
        run(self.objects.put(CALLER, bucket, key, spool, ObjectAttrs()))

    def noted(self) -> list[tuple[str, str]]:
        return [(e.bucket, e.key) for e in self.sql.outbox_read_after(0, 100).entries]


def test_only_buckets_with_a_notification_or_replication_document_are_noted(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    node = Setup(meta_store, tmp_path)
    for bucket in ("plain", "hooked", "replicated", "plain"):
        node.put(bucket, "k")
    assert node.noted() == [("hooked", "k"), ("replicated", "k")]


def test_a_stored_or_deleted_document_is_seen_by_the_next_write(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    node = Setup(meta_store, tmp_path)
    node.put("plain", "before")  # judged and cached: no interest
    run(node.meta.put_bucket_config("plain", "replication", DOC))
    node.put("plain", "after")
    run(node.meta.delete_bucket_config("hooked", "notification"))
    node.put("hooked", "gone")
    assert node.noted() == [("plain", "after")]


def test_a_document_merged_from_a_cluster_peer_is_seen_after_the_buckets_bump(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    node = Setup(meta_store, tmp_path)
    node.put("plain", "before")
    meta_store.put_bucket_config("plain", "notification", DOC)  # the merge's own write
    node.counters.bump(BUCKETS)  # what the control listeners' bucket_cache.invalidate does
    node.put("plain", "after")
    assert node.noted() == [("plain", "after")]


def record(key: str) -> ObjectRecord:
    return ObjectRecord("plain", key, "null", "b-1", size=4, etag="e", last_modified=10.0)


def test_a_write_judged_before_a_configuration_and_committed_after_it_is_noted(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    node = Setup(meta_store, tmp_path)
    early = run(note_for(node.outbox, CALLER, ChangeKind.OBJECT_WRITTEN, "plain"))
    unchanged = run(note_for(node.outbox, CALLER, ChangeKind.OBJECT_WRITTEN, "plain"))
    meta_store.put_object(record("quiet"), **unchanged)  # nothing changed: no entry
    run(node.meta.put_bucket_config("plain", "notification", DOC))  # answered here
    meta_store.put_object(record("raced"), **early)
    assert node.noted() == [("plain", "raced")]


def test_a_moved_counter_without_a_document_still_leaves_no_entry(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    node = Setup(meta_store, tmp_path)
    note = run(note_for(node.outbox, CALLER, ChangeKind.OBJECT_WRITTEN, "plain"))
    run(node.meta.put_bucket_config("plain", "lifecycle", DOC))  # another document
    meta_store.put_object(record("k"), **note)
    assert node.noted() == []


def test_a_consumer_without_documents_gets_every_bucket(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    node = Setup(meta_store, tmp_path, every_bucket=True)
    node.put("plain", "k")
    assert node.noted() == [("plain", "k")]
