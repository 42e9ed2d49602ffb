"""The change hook: every committed change of the engine services reaches the hook once,
with its caller, after its commit; refused changes never do. The hook's rules (an S3Error of
a sink reaches the caller after every sink ran, other failures are only logged) and the
audit log as a sink (background changes recorded, client changes left to the request
observer). In memory: SQLite in a temp dir, inline pools, a real BlobStore (fsync off)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from objstore.audit.changes import AuditChangeSink
from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore
from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.buckets import BucketService
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind, Origin
from objstore.engine.iam import IamService
from objstore.engine.multipart import (
    ChecksumMode,
    CompletionClaims,
    MultipartService,
    RequestedPart,
)
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.engine.settings import SettingsService
from objstore.engine.versioning import KeyLocks
from objstore.engine.versions import VersionService
from objstore.errors import AdminError, S3Error
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.records import WritePrecondition
from tests.unit.conftest import LocalStores, run

ALICE = Principal("u-alice", "alice", True, "AKALICE")
CALLER = Caller(ALICE, request_id="req-1", source_address="192.0.2.7")


class Recording:
    def __init__(self) -> None:
        self.changes: list[Change] = []

    def committed(self, change: Change) -> None:
        self.changes.append(change)

    def kinds(self) -> list[tuple[ChangeKind, str, str]]:
        return [(c.kind, c.key, c.subject) for c in self.changes]


@dataclass
class Engine:
    sink: Recording
    blobs: BlobStore
    buckets: BucketService
    config: BucketConfigService
    objects: ObjectService
    multipart: MultipartService
    versions: VersionService
    iam: IamService
    settings: SettingsService
    control: ControlRecord
    restamping: BucketService  # a cluster node's: re-stamps an owner's repeated create

    def body(self, data: bytes) -> BodySpool:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=1024)
        spool.write(data)
        return spool


@pytest.fixture
def engine(stores: LocalStores) -> Engine:
    meta, blobs, control = stores.meta, stores.blobs, stores.control
    io, clock = stores.io, lambda: 2000.0
    sink = Recording()
    hook = ChangeHook([sink])
    locks = KeyLocks()
    return Engine(
        sink, blobs,
        BucketService(meta, control, io, region="us-east-1", clock=clock, changes=hook),
        BucketConfigService(meta, control, io, clock=clock, locks=locks, changes=hook),
        ObjectService(meta, blobs, io, clock=clock, locks=locks, changes=hook),
        MultipartService(meta, blobs, io, clock=clock, changes=hook),
        VersionService(meta, blobs, io, clock=clock, locks=locks, changes=hook),
        IamService(meta, control, io, clock=clock, on_change=lambda: None, changes=hook),
        SettingsService(meta, control, io, changes=hook),
        control,
        BucketService(meta, control, io, region="us-east-1", clock=clock, changes=hook,
                      restamp_on_repeat=True),
    )


def test_object_writes_and_deletes_report_their_rows(engine: Engine) -> None:
    run(engine.buckets.create(CALLER, "bkt", location=None, object_lock=False))
    run(engine.config.set_versioning(CALLER, "bkt", "Enabled"))
    written = run(engine.objects.put(CALLER, "bkt", "k", engine.body(b"data"), ObjectAttrs()))
    run(engine.versions.put_tags(CALLER, "bkt", "k", None, {"t": "1"}))
    marker = run(engine.objects.delete(CALLER, "bkt", "k"))
    run(engine.objects.delete(CALLER, "bkt", "k", marker.version_id))
    assert engine.sink.kinds() == [
        (ChangeKind.BUCKET_CREATED, "", ""),
        (ChangeKind.BUCKET_CONFIGURED, "", "versioning"),
        (ChangeKind.OBJECT_WRITTEN, "k", ""),
        (ChangeKind.TAGS_CHANGED, "k", ""),
        (ChangeKind.DELETE_MARKER_WRITTEN, "k", ""),
        (ChangeKind.VERSION_DELETED, "k", ""),
    ]
    put = engine.sink.changes[2]
    assert put.caller is CALLER and put.bucket == "bkt"
    assert put.record is not None and put.record.version_id == written.version_id
    assert put.record.seq == written.seq  # the committed row, as stored
    assert engine.sink.changes[3].record is not None
    assert engine.sink.changes[3].record.tags == {"t": "1"}
    assert engine.sink.changes[5].version_id == marker.version_id


def test_refused_changes_report_nothing(engine: Engine) -> None:
    run(engine.buckets.create(CALLER, "bkt", location=None, object_lock=False))
    run(engine.objects.put(CALLER, "bkt", "k", engine.body(b"one"), ObjectAttrs()))
    engine.sink.changes.clear()
    with pytest.raises(S3Error):
        run(engine.objects.put(CALLER, "bkt", "k", engine.body(b"two"), ObjectAttrs(),
                               WritePrecondition(if_absent=True)))
    with pytest.raises(S3Error):
        run(engine.objects.put(CALLER, "missing", "k", engine.body(b"x"), ObjectAttrs()))
    with pytest.raises(S3Error):
        run(engine.buckets.delete(CALLER, "bkt"))  # not empty
    with pytest.raises(AdminError):
        run(engine.settings.put(CALLER, "lifecycle_evaluation_interval", 0))
    assert engine.sink.changes == []


def test_a_completed_upload_is_one_object_written(engine: Engine) -> None:
    run(engine.buckets.create(CALLER, "bkt", location=None, object_lock=False))
    upload = run(engine.multipart.create(CALLER, "bkt", "big", ObjectAttrs(), ChecksumMode()))
    part = run(engine.multipart.upload_part(CALLER, upload, 1, engine.body(b"part"), {}))
    record = run(engine.multipart.complete(
        CALLER, upload, [RequestedPart(1, part.etag)], CompletionClaims()))
    assert engine.sink.kinds()[1:] == [
        (ChangeKind.UPLOAD_CREATED, "big", upload.upload_id),
        (ChangeKind.PART_WRITTEN, "big", f"{upload.upload_id}/1"),
        (ChangeKind.UPLOAD_COMPLETED, "big", upload.upload_id),
        (ChangeKind.OBJECT_WRITTEN, "big", ""),
    ]
    assert engine.sink.changes[-1].record == record


def test_iam_and_settings_changes_name_their_subject(engine: Engine) -> None:
    user = run(engine.iam.create_user(CALLER, "bob", ""))
    run(engine.iam.delete_user(CALLER, user.user_id))
    run(engine.settings.put(CALLER, "region", "eu-west-1"))
    run(engine.settings.delete(CALLER, "region"))
    assert engine.sink.kinds() == [
        (ChangeKind.IAM_CHANGED, "", f"user/{user.user_id}"),
        (ChangeKind.IAM_CHANGED, "", f"user/{user.user_id}"),
        (ChangeKind.SETTING_CHANGED, "", "region"),
        (ChangeKind.SETTING_CHANGED, "", "region"),
    ]


# -- the hook's own rules ------------------------------------------------------------------


class Refusing:
    def committed(self, change: Change) -> None:
        raise S3Error("ServiceUnavailable", "write quorum not met")


class Broken:
    def committed(self, change: Change) -> None:
        raise RuntimeError("a bug in a sink")


class Waiting:
    def __init__(self) -> None:
        self.pending: Deferred[None] = Deferred()
        self.seen = 0

    def committed(self, change: Change) -> Deferred[None]:
        self.seen += 1
        return self.pending


def test_a_sink_refusal_reaches_the_caller_after_every_sink_ran() -> None:
    after = Recording()
    hook = ChangeHook([Refusing(), Broken(), after])
    change = Change(ChangeKind.BUCKET_CREATED, CALLER, "b")
    with pytest.raises(S3Error) as raised:
        run(hook.committed(change))
    assert raised.value.code == "ServiceUnavailable"
    assert after.changes == [change]


def test_a_broken_sink_does_not_fail_a_committed_change() -> None:
    after = Recording()
    run(ChangeHook([Broken(), after]).committed(Change(ChangeKind.BUCKET_DELETED, CALLER)))
    assert len(after.changes) == 1


def test_the_caller_waits_for_a_sink_that_asks_it_to() -> None:
    waiting = Waiting()
    done: list[object] = []
    hook = ChangeHook([waiting])
    Deferred.fromCoroutine(hook.committed(Change(ChangeKind.BUCKET_CREATED, CALLER))
                           ).addCallback(done.append)
    assert waiting.seen == 1 and done == []
    waiting.pending.callback(None)
    assert done == [None]


# -- the audit log as a sink ---------------------------------------------------------------


class Audit:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def record(self, operation: str, *, bucket: str = "", key: str = "", status: int = 200,
               user: str = "system", error_code: str = "", **extra: object) -> None:
        self.entries.append({"operation": operation, "bucket": bucket, "key": key,
                             "status": status, "user": user, **extra})


def test_the_audit_sink_records_background_changes_only() -> None:
    audit = Audit()
    sink = AuditChangeSink(audit)
    sink.committed(Change(ChangeKind.OBJECT_WRITTEN, CALLER, "b", "k", "v1"))
    peer = Caller(ALICE, origin=Origin.PEER)
    sink.committed(Change(ChangeKind.OBJECT_WRITTEN, peer, "b", "k", "v1"))
    lifecycle = Caller(ALICE, origin=Origin.LIFECYCLE, operation="Lifecycle::ExpireObject",
                       details={"rule_id": "r1"})
    sink.committed(Change(ChangeKind.DELETE_MARKER_WRITTEN, lifecycle, "b", "k", "m1"))
    assert audit.entries == [{
        "operation": "Lifecycle::ExpireObject", "bucket": "b", "key": "k", "status": 204,
        "user": "lifecycle", "rule_id": "r1", "version_id": "m1", "request_id": "",
        "source_ip": "",
    }]


def control_files(control: ControlRecord, family: str) -> dict[str, tuple[int, bytes]]:
    """Each file of a control-record family: its inode (a rewrite replaces the file) and
    its bytes."""
    directory = Path(control.root) / family
    return {path.name: (path.stat().st_ino, path.read_bytes())
            for path in sorted(directory.iterdir())}


def test_an_owner_creating_its_bucket_again_on_a_single_node_changes_nothing(
        engine: Engine) -> None:
    """CreateBucket is idempotent for the owner: without peers the repeat answers the
    bucket as it is, and leaves its row, its control record and the change hook alone."""
    first = run(engine.buckets.create(CALLER, "bkt", location=None, object_lock=False))
    recorded = control_files(engine.control, "buckets")
    engine.sink.changes.clear()
    again = run(engine.buckets.create(CALLER, "bkt", location=None, object_lock=False))
    assert again == first
    assert run(engine.buckets.get("bkt")).updated_at == first.updated_at
    assert control_files(engine.control, "buckets") == recorded
    assert engine.sink.changes == []


def test_another_callers_create_of_an_existing_bucket_is_refused_either_way(
        engine: Engine) -> None:
    run(engine.buckets.create(CALLER, "bkt", location=None, object_lock=False))
    bob = Caller(Principal("u-bob", "bob", False, "AKBOB"), request_id="req-2")
    for buckets in (engine.buckets, engine.restamping):
        with pytest.raises(S3Error) as refused:
            run(buckets.create(bob, "bkt", location=None, object_lock=False))
        assert refused.value.code == "BucketAlreadyExists"


def test_an_owner_creating_its_bucket_again_on_a_cluster_node_restamps_it_and_reports_it(
        engine: Engine) -> None:
    """On a cluster node the repeat is still the newest word on the bucket: its stamp
    moves (above the row's, whatever the clock says), its control record is rewritten and
    the change is reported, so that a peer's older deletion of the bucket loses to it
    (cluster last-writer-wins)."""
    first = run(engine.restamping.create(CALLER, "bkt", location=None, object_lock=False))
    recorded = control_files(engine.control, "buckets")
    engine.sink.changes.clear()
    again = run(engine.restamping.create(CALLER, "bkt", location=None, object_lock=False))
    assert again.created_at == first.created_at
    assert again.updated_at > first.updated_at
    stored = run(engine.restamping.get("bkt"))
    assert stored.updated_at == again.updated_at
    ((name, (inode, data)),) = control_files(engine.control, "buckets").items()
    assert inode != recorded[name][0]
    assert json.loads(data)["data"]["updated_at"] == again.updated_at
    assert [(c.kind, c.bucket) for c in engine.sink.changes] == [
        (ChangeKind.BUCKET_CREATED, "bkt")]


class _DeletedBetweenStatements:
    """A metadata store on which the bucket is deleted (a DeleteBucket, a peer's
    replicated deletion) right after a create found it existing, before its look-up."""

    def __init__(self, meta: Any) -> None:
        self._meta = meta
        self.raced = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._meta, name)

    async def _create_then_lose(self, bucket: Any) -> bool:
        created: bool = await self._meta.create_bucket(bucket)
        if not created and not self.raced:
            self.raced += 1
            assert await self._meta.delete_bucket(bucket.name) == "deleted"
        return created

    def create_bucket(self, bucket: Any) -> Deferred[bool]:
        return Deferred.fromCoroutine(self._create_then_lose(bucket))


@pytest.mark.parametrize("restamp", [False, True], ids=["single", "cluster"])
def test_a_create_racing_a_deletion_makes_the_bucket_and_never_answers_no_such_bucket(
        stores: LocalStores, restamp: bool) -> None:
    """The race CI met on a cluster: b still held the bucket a had just deleted, b's
    CreateBucket found it existing, and the replicated deletion removed it before the
    create looked it up: the create answered NoSuchBucket."""
    sink = Recording()
    racing = _DeletedBetweenStatements(stores.meta)
    buckets = BucketService(racing, stores.control, stores.io,  # type: ignore[arg-type]
                            region="us-east-1", clock=lambda: 2000.0,
                            changes=ChangeHook([sink]), restamp_on_repeat=restamp)
    run(buckets.create(CALLER, "bkt", location=None, object_lock=False))
    sink.changes.clear()
    made = run(buckets.create(CALLER, "bkt", location=None, object_lock=False))
    assert racing.raced == 1
    assert run(stores.meta.get_bucket("bkt")) == made
    assert [(c.kind, c.bucket) for c in sink.changes] == [
        (ChangeKind.BUCKET_CREATED, "bkt")]
