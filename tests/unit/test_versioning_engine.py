"""The versioning use cases in memory (SQLite in a temp dir, inline DB and IO pools, a real
BlobStore with fsync off, an injected clock): delete markers and their sidecars, permanent
deletes under the lock rules with the seq guard (and the stamp their tombstone, change
and fan-out share), the null version of Suspended buckets,
changes of retention, legal hold and tags (sidecar rewritten, last_modified kept, fresh
seq), the bucket state service and its control record, ListObjectVersions grouping, and
the per-key lock."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from objstore.blobs.control import ControlRecord
from objstore.blobs.sidecar import record_from_sidecar, record_to_sidecar
from objstore.blobs.store import BlobStore
from objstore.cli.recover import restore_control_plane
from objstore.convergence import lww
from objstore.engine import lock_rules
from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.changes import Caller, ChangeHook, ChangeKind
from objstore.engine.objects import DeleteOutcome, ObjectAttrs, ObjectService
from objstore.engine.versioning import KeyLocks, list_version_page
from objstore.engine.versions import VersionService
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import (
    TOMBSTONE_OBJECT,
    RowChanged,
    SyncMetaStore,
    object_tombstone_key,
)
from objstore.threads import InlinePool
from tests.unit.conftest import LocalStores, fails, run
from tests.unit.test_changes import Recording
from tests.unit.test_cluster_fanout import FakeSender, fanout, membership

ALICE = Principal("u-alice", "alice", False, "AKALICE")
ROOT = Principal("u-root", "root", True, "AKROOT")
CALLER = Caller(ROOT)
FAR = 4_000_000_000.0


class Ticks:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class Authority:
    """Allows s3:BypassGovernanceRetention to the users named."""

    def __init__(self, *allowed: str) -> None:
        self.allowed_users = set(allowed)
        self.asked: list[str] = []

    async def allowed(self, principal: Principal, action: str, resource: str) -> bool:
        self.asked.append(action)
        return principal.user_id in self.allowed_users


@dataclass
class World:
    store: SyncMetaStore
    meta: MetaStore
    blobs: BlobStore
    control: ControlRecord
    objects: ObjectService
    versions: VersionService
    buckets: BucketConfigService
    authority: Authority
    clock: Ticks

    def bucket(self, name: str, versioning: str = "Enabled", lock: bool = False) -> None:
        self.store.create_bucket(BucketRecord(name, "u-root", "us-east-1", 1.0,
                                              versioning=versioning, object_lock=lock))

    def version(self, bucket: str, key: str, **fields: Any) -> ObjectRecord:
        """A stored version with a real blob and sidecar, as a PUT leaves it."""
        blob_id = str(uuid.uuid4())
        record = ObjectRecord(bucket=bucket, key=key, version_id=fields.pop(
            "version_id", str(uuid.uuid4())), blob_id=blob_id, size=1, etag="e",
            last_modified=self.clock(), **fields)
        self.blobs.commit_bytes(b"x", blob_id, record_to_sidecar(record))
        return self.store.put_object(record).record

    def sidecar(self, record: ObjectRecord) -> ObjectRecord:
        assert record.blob_id is not None
        return record_from_sidecar(self.blobs.read_sidecar(record.blob_id))


@pytest.fixture
def world(stores: LocalStores) -> World:
    store, meta, blobs, control = stores.sql, stores.meta, stores.blobs, stores.control
    clock, authority, locks = Ticks(), Authority("u-bypasser"), KeyLocks()
    return World(
        store, meta, blobs, control,
        ObjectService(meta, blobs, InlinePool(), clock=clock, authority=authority, locks=locks),
        VersionService(meta, blobs, InlinePool(), clock=clock, locks=locks,
                       authority=authority),
        BucketConfigService(meta, control, InlinePool(), clock=clock),
        authority, clock,
    )


# -- delete markers ------------------------------------------------------------------------


def test_a_delete_marker_has_a_sidecar_that_rebuilds_it(world: World) -> None:
    world.bucket("b")
    kept = world.version("b", "k")
    outcome = run(world.objects.delete(Caller(ALICE), "b", "k"))
    assert outcome.delete_marker and outcome.version_id not in (None, kept.version_id)
    marker = world.store.get_object("b", "k")
    assert marker is not None and marker.is_delete_marker and marker.is_latest
    assert marker.owner_name == "alice" and marker.blob_id is not None
    assert world.blobs.blob_size(marker.blob_id) is None  # a sidecar, no bytes
    assert world.sidecar(marker) == replace(marker, is_latest=False, seq=0)
    assert outcome == DeleteOutcome(marker.version_id, True)
    removed = run(world.objects.delete(Caller(ALICE), "b", "k", marker.version_id))
    assert removed == DeleteOutcome(marker.version_id, True)
    assert not os.path.exists(world.blobs.sidecar_path(marker.blob_id))
    latest = world.store.get_object("b", "k")
    assert latest is not None and latest.version_id == kept.version_id and latest.is_latest


def test_unversioned_delete_removes_the_null_version(world: World) -> None:
    world.bucket("plain", versioning="Disabled")
    record = world.version("plain", "k", version_id="null")
    assert run(world.objects.delete(Caller(ALICE), "plain", "k")) == DeleteOutcome(None)
    assert world.store.get_object("plain", "k") is None
    assert record.blob_id is not None and world.blobs.blob_size(record.blob_id) is None
    assert run(world.objects.delete(Caller(ALICE), "plain", "k")) == DeleteOutcome(None)


def test_suspended_delete_replaces_the_null_version_with_a_null_marker(world: World) -> None:
    world.bucket("s", versioning="Suspended")
    real = world.version("s", "k")
    null = world.version("s", "k", version_id="null")
    assert run(world.objects.delete(Caller(ALICE), "s", "k")) == DeleteOutcome("null", True)
    marker = world.store.get_object("s", "k", "null")
    assert marker is not None and marker.is_delete_marker
    assert null.blob_id is not None and world.blobs.blob_size(null.blob_id) is None
    assert world.store.get_object("s", "k", real.version_id) is not None


def test_deleting_an_unknown_version_is_no_error(world: World) -> None:
    world.bucket("b")
    unknown = str(uuid.uuid4())
    assert run(world.objects.delete(Caller(ALICE), "b", "k", unknown)) == DeleteOutcome(unknown)
    assert fails(world.objects.delete(Caller(ALICE), "b", "k", "bogus")).code == "InvalidArgument"
    assert fails(world.objects.delete(Caller(ALICE), "nope", "k")).code == "NoSuchBucket"


def test_a_permanent_delete_reports_and_fans_out_the_stamp_of_its_tombstone(
    world: World,
) -> None:
    """The version is stamped by the engine's clock, ahead of the database's (1000.0); the
    fan-out runs later still. Peers get the local tombstone's stamp, no other."""
    world.bucket("b")
    removed = world.version("b", "k")
    seen, sender, later = Recording(), FakeSender(), Clock()
    later.advance(removed.last_modified + 0.25)
    objects = ObjectService(world.meta, world.blobs, InlinePool(), clock=world.clock,
                            locks=KeyLocks(), changes=ChangeHook([
                                seen, fanout(sender, membership("a", "b"), clock=later)]))
    run(objects.delete(Caller(ALICE), "b", "k", removed.version_id))
    found = world.store.get_tombstone(
        TOMBSTONE_OBJECT, object_tombstone_key("b", "k", removed.version_id))
    # raised past 1000.0, to 1 µs after the removed row
    assert found is not None and found[0] == lww.stamp_write(0.0, removed.last_modified)
    [change] = seen.changes
    assert change.kind is ChangeKind.VERSION_DELETED and change.deleted_at == found[0]
    assert sorted(sender.calls) == [
        ("delete", f"http://{peer}:9000", "k", removed.version_id, found[0])
        for peer in ("a", "b")]


# -- the lock rules on deletes and overwrites ------------------------------------------------


def test_deletes_follow_the_lock_rules(world: World) -> None:
    world.bucket("l", lock=True)
    governed = world.version("l", "g", retention_mode="GOVERNANCE", retain_until_date=FAR)
    held = world.version("l", "h", legal_hold_status="ON")
    assert fails(world.objects.delete(Caller(ALICE), "l", "g", governed.version_id)).code == \
        "AccessDenied"
    assert world.authority.asked == []  # no bypass header: the authority is not asked
    assert fails(world.objects.delete(Caller(ALICE), "l", "g", governed.version_id,
                                      bypass_governance=True)).code == "AccessDenied"
    assert world.authority.asked == ["s3:BypassGovernanceRetention"]
    bypasser = replace(ALICE, user_id="u-bypasser")
    run(world.objects.delete(Caller(bypasser), "l", "g", governed.version_id,
                             bypass_governance=True))
    assert fails(world.objects.delete(Caller(bypasser), "l", "h", held.version_id,
                                      bypass_governance=True)).code == "AccessDenied"
    assert run(world.objects.delete(Caller(ALICE), "l", "h")).delete_marker  # markers always
    assert world.store.get_object("l", "h", held.version_id) is not None


def test_the_delete_guard_sees_a_lock_committed_after_the_check(world: World) -> None:
    """A legal hold set between the rule check and the delete is not ignored: the guarded
    delete fails, the version is read again, and the new state refuses the delete."""
    world.bucket("l", lock=True)
    record = world.version("l", "k")
    original = world.store.delete_object_versions
    calls: list[int | None] = []

    def racing(bucket: str, items: Any) -> Any:
        calls.extend(item.expected_seq for item in items)
        if len(calls) == 1:
            current = world.store.get_object(bucket, items[0].key, items[0].version_id)
            assert current is not None
            world.store.update_object(replace(current, legal_hold_status="ON"))
        return original(bucket, items)

    world.store.delete_object_versions = racing  # type: ignore[method-assign]
    assert fails(world.objects.delete(Caller(ROOT), "l", "k",
                                      record.version_id)).code == "AccessDenied"
    assert calls == [record.seq]
    assert world.store.get_object("l", "k", record.version_id) is not None


def test_a_locked_null_version_is_never_overwritten(world: World) -> None:
    world.bucket("s", versioning="Suspended")
    world.version("s", "k", version_id="null", retention_mode="COMPLIANCE",
                  retain_until_date=FAR)
    source = world.version("s", "src")
    error = fails(world.objects.copy(Caller(ALICE), source, "s", "k", ObjectAttrs()))
    assert error.code == "AccessDenied"
    assert fails(world.objects.delete(Caller(ROOT), "s", "k", bypass_governance=True)).code == \
        "AccessDenied"
    world.bucket("e")  # Enabled: a new version never replaces anything
    world.version("e", "k", version_id="null", retention_mode="COMPLIANCE",
                  retain_until_date=FAR)
    copied = run(world.objects.copy(Caller(ALICE), source, "e", "k", ObjectAttrs()))
    assert copied.version_id != "null"


def test_new_versions_are_born_with_the_default_retention(world: World) -> None:
    world.bucket("l", lock=True)
    run(world.buckets.put_lock_configuration(CALLER, "l", lock_rules.LockConfiguration(
        lock_rules.DefaultRetention("GOVERNANCE", days=2))))
    source = world.version("l", "src")
    copied = run(world.objects.copy(Caller(ALICE), source, "l", "dst", ObjectAttrs()))
    assert copied.retention_mode == "GOVERNANCE"
    assert copied.retain_until_date == copied.last_modified + 2 * 86400
    explicit = run(world.objects.copy(Caller(ALICE), source, "l", "dst", ObjectAttrs(
        lock=lock_rules.LockRequest("COMPLIANCE", FAR, "ON"))))
    assert (explicit.retention_mode, explicit.retain_until_date,
            explicit.legal_hold_status) == ("COMPLIANCE", FAR, "ON")
    assert world.sidecar(explicit).retention_mode == "COMPLIANCE"
    world.bucket("plain", versioning="Disabled")
    error = fails(world.objects.copy(Caller(ALICE), source, "plain", "dst", ObjectAttrs(
        lock=lock_rules.LockRequest(legal_hold="ON"))))
    assert (error.code, error.message) == ("InvalidRequest",
                                           "Bucket is missing Object Lock Configuration")


# -- retention, legal hold and tags of a version ---------------------------------------------


def test_changes_rewrite_the_sidecar_and_keep_last_modified(world: World) -> None:
    world.bucket("l", lock=True)
    record = world.version("l", "k", tags={"a": "1"})
    run(world.versions.put_retention(Caller(ALICE), "l", "k", None,
                                     lock_rules.Retention("GOVERNANCE", FAR),
                                     bypass_governance=False))
    held = run(world.versions.put_legal_hold(CALLER, "l", "k", record.version_id, "ON"))
    tagged = run(world.versions.put_tags(CALLER, "l", "k", record.version_id, {"b": "2"}))
    stored = world.store.get_object("l", "k")
    assert stored == tagged
    assert (stored.retention_mode, stored.retain_until_date) == ("GOVERNANCE", FAR)
    assert stored.legal_hold_status == "ON" and stored.tags == {"b": "2"}
    assert stored.last_modified == record.last_modified
    assert stored.lock_updated_at == held.lock_updated_at and stored.lock_updated_at
    assert stored.seq > held.seq > record.seq
    assert world.sidecar(stored) == replace(stored, is_latest=False, seq=0)


def test_a_tag_change_stamps_tags_updated_at_never_behind_the_last(world: World) -> None:
    world.bucket("b")
    record = world.version("b", "k", tags={"a": "1"})
    assert record.tags_updated_at is None  # the tags a version is written with
    first = run(world.versions.put_tags(CALLER, "b", "k", record.version_id, {"b": "2"}))
    assert first.tags_updated_at == world.clock.now
    assert world.sidecar(first).tags_updated_at == first.tags_updated_at
    world.clock.now -= 100  # a clock that went back still orders the next change after
    removed = run(world.versions.put_tags(CALLER, "b", "k", record.version_id, {}))
    assert first.tags_updated_at is not None and removed.tags_updated_at is not None
    assert removed.tags_updated_at > first.tags_updated_at and removed.tags == {}
    assert removed.last_modified == record.last_modified
    assert removed.lock_updated_at is None


def test_an_acl_change_is_a_stamped_change_of_the_row(world: World) -> None:
    """PutObjectAcl: the version's ACL replaced in the row and its sidecar, stamped as a
    tag change is (so last-writer-wins orders it), reported as ACL_CHANGED."""
    world.bucket("b")
    record = world.version("b", "k")
    assert record.acl is None
    seen = Recording()
    versions = VersionService(world.meta, world.blobs, InlinePool(), clock=world.clock,
                              locks=KeyLocks(), changes=ChangeHook([seen]))
    acl = '{"owner":"u","grants":[["u","FULL_CONTROL",""]]}'
    changed = run(versions.put_acl(CALLER, "b", "k", record.version_id, acl))
    assert changed.acl == acl and world.sidecar(changed).acl == acl
    assert changed.tags_updated_at == world.clock.now
    assert changed.last_modified == record.last_modified and changed.seq > record.seq
    world.clock.now -= 100
    cleared = run(versions.put_acl(CALLER, "b", "k", None, None))
    assert cleared.acl is None
    assert cleared.tags_updated_at is not None and changed.tags_updated_at is not None
    assert cleared.tags_updated_at > changed.tags_updated_at
    assert [c.kind for c in seen.changes] == [ChangeKind.ACL_CHANGED] * 2


def test_retention_changes_follow_the_rules(world: World) -> None:
    world.bucket("l", lock=True)
    world.version("l", "k", retention_mode="GOVERNANCE", retain_until_date=FAR)
    shorter = lock_rules.Retention("GOVERNANCE", FAR - 10)
    error = fails(world.versions.put_retention(Caller(ALICE), "l", "k", None, shorter,
                                               bypass_governance=True))
    assert error.code == "AccessDenied"
    bypasser = replace(ALICE, user_id="u-bypasser")
    run(world.versions.put_retention(Caller(bypasser), "l", "k", None, shorter,
                                     bypass_governance=True))
    past = lock_rules.Retention("GOVERNANCE", 10.0)
    assert fails(world.versions.put_retention(Caller(bypasser), "l", "k", None, past,
                                              bypass_governance=True)).code == "InvalidArgument"
    world.bucket("plain", versioning="Disabled")
    world.version("plain", "k", version_id="null")
    assert fails(world.versions.put_legal_hold(CALLER, "plain", "k", None, "ON")).code == \
        "InvalidRequest"
    assert run(world.versions.put_tags(CALLER, "plain", "k", None, {"t": "1"})).tags == {"t": "1"}


def test_a_change_that_loses_a_race_is_decided_again(world: World) -> None:
    world.bucket("b")
    record = world.version("b", "k", tags={"old": "1"}, content_type="text/plain")
    original = world.store.update_object
    calls: list[int | None] = []

    def racing(changed: ObjectRecord, expected_seq: int | None = None) -> ObjectRecord:
        calls.append(expected_seq)
        if len(calls) == 1:  # a concurrent writer changes the row first
            current = world.store.get_object("b", "k", record.version_id)
            assert current is not None
            original(replace(current, content_type="text/csv"))
        return original(changed, expected_seq)

    world.store.update_object = racing  # type: ignore[method-assign]
    stored = run(world.versions.put_tags(CALLER, "b", "k", record.version_id, {"new": "2"}))
    assert len(calls) == 2 and calls[0] == record.seq
    assert stored.tags == {"new": "2"} and stored.content_type == "text/csv"
    assert world.sidecar(stored) == replace(stored, is_latest=False, seq=0)


def test_guarded_store_mutations(world: World) -> None:
    world.bucket("b")
    record = world.version("b", "k")
    with pytest.raises(RowChanged):
        world.store.update_object(replace(record, tags={"a": "1"}), record.seq + 100)
    with pytest.raises(RowChanged):
        world.store.delete_object_version("b", "k", record.version_id, record.seq + 100)
    assert world.store.get_object("b", "k") == record
    assert world.store.delete_object_version("b", "k", "missing", 5).removed is None
    assert world.store.delete_object_version("b", "k", record.version_id,
                                             record.seq).removed == record


# -- bucket state ----------------------------------------------------------------------------


def test_bucket_state_changes_reach_the_control_record(world: World, tmp_path: Path) -> None:
    world.bucket("b", versioning="Disabled")
    run(world.buckets.set_versioning(CALLER, "b", "Suspended"))
    run(world.buckets.put_tags(CALLER, "b", {"team": "x"}))
    run(world.buckets.put_lock_configuration(CALLER, "b", lock_rules.LockConfiguration(
        lock_rules.DefaultRetention("COMPLIANCE", years=1))))
    bucket = world.store.get_bucket("b")
    assert bucket is not None and bucket.object_lock and bucket.versioning == "Enabled"
    assert fails(world.buckets.set_versioning(CALLER, "b",
                                              "Suspended")).code == "InvalidBucketState"
    buckets = dict(world.control.items("buckets"))
    assert buckets["b"]["versioning"] == "Enabled" and buckets["b"]["object_lock"] is True
    configs = dict(world.control.items("bucket_config"))
    assert set(configs) == {"b:object_lock", "b:tagging"}
    # a fresh database rebuilt from the control record holds the same state
    engine = create_db_engine("sqlite", str(tmp_path / "rebuilt.db"), None, 2)
    rebuilt = SyncMetaStore(engine)
    rebuilt.migrate()
    restore_control_plane(rebuilt, world.control)
    assert rebuilt.get_bucket("b") == world.store.get_bucket("b")
    assert rebuilt.list_bucket_config("b") == world.store.list_bucket_config("b")
    run(world.buckets.delete_tags(CALLER, "b"))
    assert "b:tagging" not in dict(world.control.items("bucket_config"))
    rebuilt.close()


def test_lock_is_enabled_only_on_an_empty_bucket(world: World) -> None:
    world.bucket("full", versioning="Enabled")
    world.version("full", "k")
    error = fails(world.buckets.put_lock_configuration(CALLER, "full",
                                                       lock_rules.LockConfiguration()))
    assert error.code == "InvalidBucketState"
    bucket = world.store.get_bucket("full")
    assert bucket is not None and not bucket.object_lock
    assert world.store.enable_object_lock("nope", 1.0) == "missing"
    assert fails(world.buckets.lock_configuration("full")).code == \
        "ObjectLockConfigurationNotFoundError"
    assert fails(world.buckets.tags("full")).code == "NoSuchTagSet"


def test_stale_bucket_config_is_not_restored(world: World, tmp_path: Path) -> None:
    world.bucket("b", versioning="Disabled")
    run(world.buckets.put_tags(CALLER, "b", {"a": "1"}))
    world.control.write("buckets", "b", {"name": "b", "owner_id": "u", "region": "us-east-1",
                                         "created_at": 99.0})  # re-created since
    engine = create_db_engine("sqlite", str(tmp_path / "rebuilt.db"), None, 2)
    rebuilt = SyncMetaStore(engine)
    rebuilt.migrate()
    restore_control_plane(rebuilt, world.control)
    assert rebuilt.list_bucket_config("b") == {}
    rebuilt.close()


# -- ListObjectVersions grouping ---------------------------------------------------------------


def listing_source(keys: dict[str, int]) -> tuple[Any, list[tuple[str, str, str]]]:
    rows = [ObjectRecord(bucket="b", key=key, version_id=f"{key}-v{n}", blob_id=None, size=0,
                         etag="", last_modified=float(-n))
            for key in sorted(keys) for n in range(keys[key])]
    calls: list[tuple[str, str, str]] = []

    async def fetch(prefix: str, key_marker: str, version_marker: str,
                    limit: int) -> list[ObjectRecord]:
        calls.append((prefix, key_marker, version_marker))
        start = 0
        if key_marker:
            start = next((i for i, r in enumerate(rows) if r.key > key_marker), len(rows))
            if version_marker:
                start = next(i for i, r in enumerate(rows)
                             if (r.key, r.version_id) == (key_marker, version_marker)) + 1
        return [r for r in rows[start:] if r.key.startswith(prefix)][:limit]

    return fetch, calls


def test_listing_groups_before_the_cut() -> None:
    fetch, calls = listing_source({"a": 2, "d/1": 3, "d/2": 2, "e": 1})
    page = run(list_version_page(fetch, prefix="", delimiter="/", key_marker="",
                                 version_marker="", max_keys=3))
    assert [(r.key, r.version_id) for r in page.entries] == [("a", "a-v0"), ("a", "a-v1")]
    assert page.common_prefixes == ["d/"] and page.is_truncated
    assert (page.next_key_marker, page.next_version_id_marker) == ("d/", None)
    assert calls[-1][1] == "d/\U0010ffff"  # the group was skipped with one range query
    rest = run(list_version_page(fetch, prefix="", delimiter="/", key_marker="d/",
                                 version_marker="", max_keys=3))
    assert [r.key for r in rest.entries] == ["e"] and not rest.is_truncated


def test_listing_resumes_inside_a_key_and_counts_exactly() -> None:
    fetch, _ = listing_source({"a": 3, "b": 1})
    page = run(list_version_page(fetch, prefix="", delimiter="", key_marker="",
                                 version_marker="", max_keys=2))
    assert page.is_truncated and (page.next_key_marker, page.next_version_id_marker) == (
        "a", "a-v1")
    rest = run(list_version_page(fetch, prefix="", delimiter="", key_marker="a",
                                 version_marker="a-v1", max_keys=2))
    assert [r.version_id for r in rest.entries] == ["a-v2", "b-v0"] and not rest.is_truncated
    exact = run(list_version_page(fetch, prefix="", delimiter="", key_marker="",
                                  version_marker="", max_keys=4))
    assert len(exact.entries) == 4 and not exact.is_truncated
    none = run(list_version_page(fetch, prefix="", delimiter="", key_marker="",
                                 version_marker="", max_keys=0))
    assert none.entries == [] and not none.is_truncated


# -- the per-key lock --------------------------------------------------------------------------


def test_key_locks_serialise_per_key_and_forget_idle_keys() -> None:
    locks = KeyLocks()
    order: list[str] = []
    gate: Deferred[None] = Deferred()

    async def first() -> str:
        order.append("first-in")
        await gate
        order.append("first-out")
        return "first"

    async def second() -> str:
        order.append("second")
        return "second"

    async def other() -> str:
        order.append("other")
        return "other"

    one = Deferred.fromCoroutine(locks.run("b", "k", first))
    two = Deferred.fromCoroutine(locks.run("b", "k", second))
    three = Deferred.fromCoroutine(locks.run("b", "other", other))
    assert order == ["first-in", "other"] and len(locks) == 1
    gate.callback(None)
    assert order == ["first-in", "other", "first-out", "second"]
    results: list[str] = []
    for d in (one, two, three):
        d.addCallback(results.append)
    assert results == ["first", "second", "other"] and len(locks) == 0


class OneSlotForAll:
    """Node-wide locks where every key falls in the same slot (the worst case)."""

    def __init__(self) -> None:
        self.held: list[int] = []
        self.taken = 0

    def slot_of(self, bucket: str, key: str) -> int:
        return 0

    def acquire(self, slot: int) -> Deferred[None]:
        assert slot not in self.held, "a slot taken twice by one holder: a deadlock"
        self.held.append(slot)
        self.taken += 1
        return succeed(None)

    def release(self, slot: int) -> None:
        self.held.remove(slot)


def test_key_locks_run_many_holds_every_key_and_each_slot_once() -> None:
    across = OneSlotForAll()
    locks = KeyLocks(across)
    order: list[str] = []
    gate: Deferred[None] = Deferred()

    async def batch() -> str:
        order.append("batch-in")
        await gate
        order.append("batch-out")
        return "batch"

    async def single() -> str:
        order.append("single")
        return "single"

    many = Deferred.fromCoroutine(locks.run_many(
        [("b", "k2"), ("b", "k1"), ("b", "k2")], batch))
    assert order == ["batch-in"] and across.taken == 1 and len(locks) == 2
    one = Deferred.fromCoroutine(locks.run("b", "k1", single))
    assert order == ["batch-in"]  # k1 is held by the batch
    gate.callback(None)
    assert order == ["batch-in", "batch-out", "single"]
    results: list[str] = []
    for d in (many, one):
        d.addCallback(results.append)
    assert results == ["batch", "single"] and len(locks) == 0 and across.held == []


def test_key_locks_run_many_waits_for_a_key_held_by_another() -> None:
    """Free keys are taken at once; a held one is waited for, in sorted order."""
    locks = KeyLocks()
    order: list[str] = []
    gate: Deferred[None] = Deferred()

    async def holder() -> None:
        order.append("holder-in")
        await gate
        order.append("holder-out")

    async def batch() -> None:
        order.append("batch")

    held = Deferred.fromCoroutine(locks.run("b", "k2", holder))
    many = Deferred.fromCoroutine(locks.run_many([("b", "k1"), ("b", "k2"), ("b", "k3")],
                                                 batch))
    assert order == ["holder-in"] and not many.called and len(locks) == 2  # k3 not yet
    gate.callback(None)
    assert order == ["holder-in", "holder-out", "batch"]
    assert held.called and many.called and len(locks) == 0
