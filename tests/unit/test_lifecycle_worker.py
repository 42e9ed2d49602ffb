"""The lifecycle worker on a `task.Clock` with in-memory fakes of the store and the engine:
which versions and uploads each rule acts on, the budgets per rule and cycle, object lock,
pacing by the interval setting, and a timer that survives every failure. No reactor, no
sleeps: every fake answers with an already-fired Deferred, so a tick runs a whole cycle."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.internet.defer import Deferred

from objstore.audit.changes import AuditChangeSink
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind, Origin
from objstore.engine.lifecycle_rules import (
    Expiration,
    LifecycleConfiguration,
    LifecycleRule,
    NoncurrentExpiration,
    RuleFilter,
)
from objstore.engine.lock_rules import may_delete
from objstore.errors import S3Error
from objstore.iam.identity import Principal
from objstore.meta.records import (
    NULL_VERSION,
    BucketRecord,
    ObjectRecord,
    UploadRecord,
    UserRecord,
)
from objstore.workers.lifecycle import (
    INTERVAL_SETTING,
    OP_ABORT,
    OP_EXPIRE,
    OP_MARKER,
    OP_NONCURRENT,
    LifecycleSettings,
    LifecycleWorker,
    parse_interval,
)

DAY = 10.0  # a lifecycle "day" of ten seconds
INTERVAL = 1.0  # every tick starts a cycle, unless a test says otherwise
OWNER = UserRecord("u-owner", "owner", 0.0)


# -- fakes ------------------------------------------------------------------------------


@dataclass
class FakeStore:
    """Object rows, uploads, settings and users, queried the way MetaStore answers."""

    buckets: dict[str, BucketRecord] = field(default_factory=dict)
    rows: list[ObjectRecord] = field(default_factory=list)
    uploads: list[UploadRecord] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    seqs: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    fail_listing: bool = False

    def add_bucket(self, name: str, versioning: str = "Disabled") -> None:
        self.buckets[name] = BucketRecord(name, OWNER.user_id, "us-east-1", 0.0, versioning)

    def put(self, bucket: str, key: str, when: float, *, version_id: str = NULL_VERSION,
            marker: bool = False, size: int = 1, **fields: Any) -> ObjectRecord:
        for index, row in enumerate(self.rows):
            if (row.bucket, row.key) == (bucket, key) and row.is_latest:
                self.rows[index] = replace(row, is_latest=False)
        self.rows = [r for r in self.rows
                     if (r.bucket, r.key, r.version_id) != (bucket, key, version_id)]
        record = ObjectRecord(bucket, key, version_id, None if marker else "blob", size, "e",
                              when, is_latest=True, is_delete_marker=marker,
                              seq=next(self.seqs), **fields)
        self.rows.append(record)
        return record

    def remove(self, bucket: str, key: str, version_id: str) -> ObjectRecord | None:
        found = self.version(bucket, key, version_id)
        if found is None:
            return None
        self.rows.remove(found)
        if found.is_latest:
            rest = self.versions_of(bucket, key)
            if rest:
                newest = rest[0]
                self.rows[self.rows.index(newest)] = replace(newest, is_latest=True,
                                                             seq=next(self.seqs))
        return found

    def version(self, bucket: str, key: str, version_id: str) -> ObjectRecord | None:
        return next((r for r in self.rows
                     if (r.bucket, r.key, r.version_id) == (bucket, key, version_id)), None)

    def versions_of(self, bucket: str, key: str) -> list[ObjectRecord]:
        return sorted((r for r in self.rows if (r.bucket, r.key) == (bucket, key)),
                      key=lambda r: (-r.last_modified, -r.seq))

    def keys(self, bucket: str) -> list[str]:
        return sorted({r.key for r in self.rows if r.bucket == bucket})

    # -- the LifecycleReads protocol ---------------------------------------------------
    def list_buckets(self) -> Deferred[list[BucketRecord]]:
        if self.fail_listing:
            return defer.fail(RuntimeError("database down"))
        return defer.succeed([self.buckets[name] for name in sorted(self.buckets)])

    def list_latest(self, bucket: str, prefix: str = "", start_after: str = "",
                    limit: int = 1000) -> Deferred[list[ObjectRecord]]:
        found = sorted((r for r in self.rows if r.bucket == bucket and r.is_latest
                        and not r.is_delete_marker and r.key.startswith(prefix)
                        and r.key > start_after), key=lambda r: r.key)
        return defer.succeed(found[:limit])

    def list_versions(self, bucket: str, prefix: str = "", key_marker: str = "",
                      version_marker: str = "", limit: int = 1000
                      ) -> Deferred[list[ObjectRecord]]:
        ordered = [v for key in self.keys(bucket) if key.startswith(prefix)
                   for v in self.versions_of(bucket, key)]
        start = 0
        if key_marker:
            names = [(r.key, r.version_id) for r in ordered]
            if version_marker and (key_marker, version_marker) in names:
                start = names.index((key_marker, version_marker)) + 1
            else:
                start = next((i for i, r in enumerate(ordered) if r.key > key_marker),
                             len(ordered))
        return defer.succeed(ordered[start:start + limit])

    def list_uploads(self, bucket: str, prefix: str = "", key_marker: str = "",
                     upload_id_marker: str = "", limit: int = 1000
                     ) -> Deferred[list[UploadRecord]]:
        found = sorted((u for u in self.uploads if u.bucket == bucket
                        and u.key.startswith(prefix)
                        and (u.key, u.upload_id) > (key_marker, upload_id_marker)),
                       key=lambda u: (u.key, u.upload_id))
        return defer.succeed(found[:limit])

    def get_object(self, bucket: str, key: str, version_id: str | None = None
                   ) -> Deferred[ObjectRecord | None]:
        if version_id is not None:
            return defer.succeed(self.version(bucket, key, version_id))
        latest = [r for r in self.rows if (r.bucket, r.key) == (bucket, key) and r.is_latest]
        return defer.succeed(latest[0] if latest else None)

    def get_setting(self, key: str) -> Deferred[str | None]:
        return defer.succeed(self.settings.get(key))

    def get_user(self, user_id: str) -> Deferred[UserRecord | None]:
        return defer.succeed(OWNER if user_id == OWNER.user_id else None)


@dataclass
class FakeObjects:
    """ObjectService.delete over the fake store, with the engine's lock refusal and its
    report of each committed change to the hook."""

    store: FakeStore
    clock: task.Clock
    changes: ChangeHook
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)
    callers: list[Caller] = field(default_factory=list)

    async def delete(self, caller: Caller, bucket_name: str, key: str,
                     version_id: str | None = None, *, bypass_governance: bool = False) -> Any:
        assert not bypass_governance
        self.calls.append((bucket_name, key, version_id))
        self.callers.append(caller)
        bucket = self.store.buckets[bucket_name]
        if version_id is None and bucket.versioning != "Disabled":
            marker_id = f"m{len(self.calls)}"
            self.store.put(bucket_name, key, self.clock.seconds(), version_id=marker_id,
                           marker=True)
            await self.changes.committed(Change(ChangeKind.DELETE_MARKER_WRITTEN, caller,
                                                bucket_name, key, marker_id))
            return None
        target = self.store.version(bucket_name, key, version_id or NULL_VERSION)
        if target is not None and may_delete(target, self.clock.seconds(), False, False):
            raise S3Error("AccessDenied", "object protected by object lock")
        self.store.remove(bucket_name, key, version_id or NULL_VERSION)
        await self.changes.committed(Change(ChangeKind.VERSION_DELETED, caller, bucket_name,
                                            key, version_id or NULL_VERSION))
        return None


@dataclass
class FakeUploads:
    store: FakeStore
    changes: ChangeHook

    async def abort(self, caller: Caller, upload: UploadRecord) -> None:
        self.store.uploads.remove(upload)
        await self.changes.committed(Change(ChangeKind.UPLOAD_ABORTED, caller, upload.bucket,
                                            upload.key, subject=upload.upload_id))


@dataclass
class FakeConfigs:
    configs: dict[str, LifecycleConfiguration] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)

    async def load(self, bucket: str) -> LifecycleConfiguration | None:
        if bucket in self.broken:
            raise ValueError("unreadable configuration")
        return self.configs.get(bucket)

    def set(self, bucket: str, *rules: LifecycleRule) -> None:
        self.configs[bucket] = LifecycleConfiguration(tuple(rules))


@dataclass
class RecordingAudit:
    entries: list[dict[str, Any]] = field(default_factory=list)

    def record(self, operation: str, *, bucket: str = "", key: str = "", status: int = 200,
               user: str = "system", error_code: str = "", **extra: object) -> None:
        self.entries.append({"operation": operation, "bucket": bucket, "key": key,
                             "status": status, "error_code": error_code, **extra})

    def operations(self) -> list[tuple[str, str, int]]:
        return [(e["operation"], e["key"], e["status"]) for e in self.entries]


@dataclass
class Harness:
    clock: task.Clock
    store: FakeStore
    objects: FakeObjects
    configs: FakeConfigs
    audit: RecordingAudit
    worker: LifecycleWorker

    def cycle(self) -> None:
        """Advance to the next due cycle (the tick runs it to its end)."""
        self.clock.advance(self.worker.interval_seconds)

    def advance_to(self, when: float) -> None:
        self.clock.advance(when - self.clock.seconds())


def make(**settings: Any) -> Harness:
    clock = task.Clock()
    store = FakeStore()
    audit = RecordingAudit()
    changes = ChangeHook([AuditChangeSink(audit)])  # the engine's hook, as the node wires it
    objects = FakeObjects(store, clock, changes)
    configs = FakeConfigs()
    values = {"interval_seconds": INTERVAL, "day_seconds": DAY, **settings}
    worker = LifecycleWorker(reads=store, configs=configs, objects=objects,
                             uploads=FakeUploads(store, changes), audit=audit,
                             settings=LifecycleSettings(**values), clock=clock)
    return Harness(clock, store, objects, configs, audit, worker)


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = make()
    yield harness
    if harness.worker.running:
        harness.worker.stopService()


def expire(days: int, prefix: str = "", rule_id: str = "expire") -> LifecycleRule:
    return LifecycleRule(rule_id, "Enabled", RuleFilter("prefix", prefix), Expiration(days=days))


# -- current versions ----------------------------------------------------------------------


def test_expires_due_current_versions_of_an_unversioned_bucket(h: Harness) -> None:
    h.store.add_bucket("b")
    h.store.put("b", "logs/old", 0.0)
    h.store.put("b", "logs/young", 25.0)
    h.store.put("b", "keep/old", 0.0)
    h.configs.set("b", expire(2, "logs/"))
    h.advance_to(19.0)
    h.worker.startService()  # the first tick runs a cycle at once
    assert h.store.keys("b") == ["keep/old", "logs/old", "logs/young"]  # due at 20
    h.advance_to(20.0)
    assert h.store.keys("b") == ["keep/old", "logs/young"]
    assert h.audit.operations() == [(OP_EXPIRE, "logs/old", 204)]
    assert h.audit.entries[0]["rule_id"] == "expire"
    assert h.objects.callers[0].principal == Principal("u-owner", "owner", False, "")
    assert h.objects.callers[0].origin is Origin.LIFECYCLE
    h.advance_to(49.0)
    assert h.store.keys("b") == ["keep/old", "logs/young"]  # 25 + 20, rounded up to 50
    h.advance_to(50.0)
    assert h.store.keys("b") == ["keep/old"]


def test_versioned_bucket_gets_a_delete_marker(h: Harness) -> None:
    h.store.add_bucket("v", "Enabled")
    h.store.put("v", "k", 0.0, version_id="v1")
    h.configs.set("v", expire(1))
    h.advance_to(10.0)
    h.worker.startService()
    versions = h.store.versions_of("v", "k")
    assert [(r.version_id, r.is_delete_marker, r.is_latest) for r in versions] == [
        ("m1", True, True), ("v1", False, False)]
    assert h.objects.calls == [("v", "k", None)]
    h.cycle()  # the marker is the latest now: nothing more to expire, and it is not alone
    assert h.objects.calls == [("v", "k", None)]


def test_tags_and_size_filters(h: Harness) -> None:
    h.store.add_bucket("b")
    h.store.put("b", "a", 0.0, size=50, tags={"t": "x"})
    h.store.put("b", "b", 0.0, size=500, tags={"t": "x"})
    h.store.put("b", "c", 0.0, size=50, tags={"t": "y"})
    rule = LifecycleRule("r", "Enabled", RuleFilter("and", "", (("t", "x"),), None, 100),
                         Expiration(days=1))
    h.configs.set("b", rule)
    h.advance_to(10.0)
    h.worker.startService()
    assert h.store.keys("b") == ["b", "c"]


def test_disabled_rules_and_buckets_without_configuration_are_left_alone(h: Harness) -> None:
    h.store.add_bucket("b")
    h.store.add_bucket("c")
    h.store.put("b", "k", 0.0)
    h.store.put("c", "k", 0.0)
    h.configs.set("b", replace(expire(1), status="Disabled"))
    h.advance_to(100.0)
    h.worker.startService()
    assert h.store.keys("b") == ["k"] and h.store.keys("c") == ["k"]
    assert h.objects.calls == []


def test_date_rules_expire_everything_matching_once_the_date_passed(h: Harness) -> None:
    h.store.add_bucket("b")
    h.store.put("b", "k", 95.0)
    h.configs.set("b", LifecycleRule("d", "Enabled", RuleFilter(), Expiration(date=100.0)))
    h.advance_to(99.0)
    h.worker.startService()
    assert h.store.keys("b") == ["k"]
    h.advance_to(100.0)
    assert h.store.keys("b") == []


def test_at_most_100_objects_per_rule_per_cycle() -> None:
    h = make()
    h.store.add_bucket("b")
    for n in range(250):
        h.store.put("b", f"k{n:03d}", 0.0)
    h.configs.set("b", expire(1))
    h.advance_to(10.0)
    h.worker.startService()
    assert len(h.store.keys("b")) == 150
    assert h.worker.last_report is not None and h.worker.last_report.expired == 100
    h.cycle()
    assert len(h.store.keys("b")) == 50
    h.cycle()
    assert h.store.keys("b") == []
    h.worker.stopService()


def test_the_budget_is_shared_by_the_actions_of_a_rule() -> None:
    h = make()
    h.store.add_bucket("b")
    for n in range(80):
        h.store.put("b", f"k{n:02d}", 0.0)
    h.store.uploads += [UploadRecord(f"u{n:02d}", "b", f"up{n:02d}", 0.0) for n in range(50)]
    h.configs.set("b", LifecycleRule("both", "Enabled", RuleFilter(), Expiration(days=1),
                                     abort_days=1))
    h.advance_to(10.0)
    h.worker.startService()
    assert h.store.keys("b") == [] and len(h.store.uploads) == 30
    h.cycle()
    assert h.store.uploads == []
    h.worker.stopService()


def test_the_scan_resumes_where_it_stopped() -> None:
    h = make(scan_rows_per_rule=3, page_size=2)
    h.store.add_bucket("b")
    for n in range(7):
        h.store.put("b", f"young{n}", 1000.0)
    h.store.put("b", "zz-old", 0.0)
    h.configs.set("b", expire(1))
    h.advance_to(10.0)
    h.worker.startService()  # sees young0..young2
    assert "zz-old" in h.store.keys("b")
    h.cycle()  # young3..young5
    h.cycle()  # young6, zz-old
    assert "zz-old" not in h.store.keys("b")
    h.worker.stopService()


def test_an_object_rewritten_after_listing_is_judged_again(h: Harness) -> None:
    h.store.add_bucket("b")
    h.store.put("b", "k", 0.0)
    h.configs.set("b", expire(1))
    original = h.store.get_object

    def rewritten(bucket: str, key: str, version_id: str | None = None
                  ) -> Deferred[ObjectRecord | None]:
        h.store.put("b", "k", h.clock.seconds())  # a client overwrites it meanwhile
        h.store.get_object = original  # type: ignore[method-assign]
        return original(bucket, key, version_id)

    h.store.get_object = rewritten  # type: ignore[method-assign]
    h.advance_to(10.0)
    h.worker.startService()
    assert h.store.keys("b") == ["k"] and h.objects.calls == []


# -- noncurrent versions and delete markers ---------------------------------------------


def versioned(h: Harness, key: str, *times: float) -> list[ObjectRecord]:
    """Versions of `key` written at `times` (the last one is current)."""
    return [h.store.put("v", key, when, version_id=f"{key}-{n}")
            for n, when in enumerate(times)]


def test_noncurrent_versions_go_after_noncurrent_days(h: Harness) -> None:
    h.store.add_bucket("v", "Enabled")
    versioned(h, "k", 0.0, 12.0, 31.0)  # k-0 noncurrent since 12, k-1 since 31
    h.configs.set("v", LifecycleRule("n", "Enabled", RuleFilter(),
                                     noncurrent_expiration=NoncurrentExpiration(1)))
    h.advance_to(29.0)
    h.worker.startService()
    assert [r.version_id for r in h.store.versions_of("v", "k")] == ["k-2", "k-1", "k-0"]
    h.advance_to(30.0)  # k-0 is due at 20 -> 30 (the boundary after 12 + 10)
    assert [r.version_id for r in h.store.versions_of("v", "k")] == ["k-2", "k-1"]
    assert h.audit.operations() == [(OP_NONCURRENT, "k", 204)]
    assert h.audit.entries[0]["version_id"] == "k-0"
    h.advance_to(50.0)
    assert [r.version_id for r in h.store.versions_of("v", "k")] == ["k-2"]


def test_newer_noncurrent_versions_are_kept(h: Harness) -> None:
    h.store.add_bucket("v", "Enabled")
    versioned(h, "k", 0.0, 1.0, 2.0, 3.0, 4.0)
    h.configs.set("v", LifecycleRule("n", "Enabled", RuleFilter(),
                                     noncurrent_expiration=NoncurrentExpiration(1, 2)))
    h.advance_to(100.0)
    h.worker.startService()
    assert [r.version_id for r in h.store.versions_of("v", "k")] == ["k-4", "k-3", "k-2"]


def test_locked_and_held_versions_survive(h: Harness) -> None:
    h.store.add_bucket("v", "Enabled")
    h.store.put("v", "k", 0.0, version_id="held", legal_hold_status="ON")
    h.store.put("v", "k", 1.0, version_id="compliance", retention_mode="COMPLIANCE",
                retain_until_date=10_000.0)
    h.store.put("v", "k", 2.0, version_id="governance", retention_mode="GOVERNANCE",
                retain_until_date=10_000.0)
    h.store.put("v", "k", 3.0, version_id="expired-lock", retention_mode="COMPLIANCE",
                retain_until_date=5.0)
    h.store.put("v", "k", 4.0, version_id="current")
    h.configs.set("v", LifecycleRule("n", "Enabled", RuleFilter(),
                                     noncurrent_expiration=NoncurrentExpiration(1)))
    h.advance_to(100.0)
    h.worker.startService()
    assert [r.version_id for r in h.store.versions_of("v", "k")] == [
        "current", "governance", "compliance", "held"]
    assert h.worker.last_report is not None and h.worker.last_report.skipped_locked == 3
    assert all(call[2] == "expired-lock" for call in h.objects.calls)


def test_expired_delete_markers_are_removed_when_alone(h: Harness) -> None:
    h.store.add_bucket("v", "Enabled")
    h.store.put("v", "alone", 0.0, version_id="m-alone", marker=True)
    h.store.put("v", "shadow", 0.0, version_id="old")
    h.store.put("v", "shadow", 1.0, version_id="m-shadow", marker=True)
    h.configs.set("v", LifecycleRule("e", "Enabled", RuleFilter(),
                                     Expiration(expired_object_delete_marker=True)))
    h.advance_to(5.0)
    h.worker.startService()
    assert h.store.keys("v") == ["shadow"]
    assert h.audit.operations() == [(OP_MARKER, "alone", 204)]


def test_a_marker_left_alone_in_the_same_cycle_goes_too(h: Harness) -> None:
    h.store.add_bucket("v", "Enabled")
    h.store.put("v", "k", 0.0, version_id="old")
    h.store.put("v", "k", 1.0, version_id="marker", marker=True)
    h.configs.set("v", LifecycleRule("both", "Enabled", RuleFilter(),
                                     Expiration(expired_object_delete_marker=True),
                                     NoncurrentExpiration(1)))
    h.advance_to(20.0)
    h.worker.startService()
    assert h.store.keys("v") == []
    assert [op for op, _, _ in h.audit.operations()] == [OP_NONCURRENT, OP_MARKER]


def test_days_expiration_also_cleans_old_lone_markers(h: Harness) -> None:
    h.store.add_bucket("v", "Enabled")
    h.store.put("v", "k", 3.0, version_id="marker", marker=True)
    h.configs.set("v", expire(1))
    h.advance_to(19.0)
    h.worker.startService()
    assert h.store.keys("v") == ["k"]  # due at 20
    h.advance_to(20.0)
    assert h.store.keys("v") == []


def test_a_whole_versioned_life(h: Harness) -> None:
    """Expire -> marker; the version becomes noncurrent and goes; the lone marker goes."""
    h.store.add_bucket("v", "Enabled")
    h.store.put("v", "k", 0.0, version_id="v1")
    h.configs.set("v", LifecycleRule("all", "Enabled", RuleFilter(), Expiration(days=1),
                                     NoncurrentExpiration(1)))
    h.advance_to(10.0)
    h.worker.startService()
    assert [r.is_delete_marker for r in h.store.versions_of("v", "k")] == [True, False]
    h.advance_to(20.0)
    assert h.store.keys("v") == []
    assert [op for op, _, _ in h.audit.operations()] == [OP_EXPIRE, OP_NONCURRENT, OP_MARKER]


def test_version_scan_resumes_across_cycles_with_small_budgets() -> None:
    h = make(scan_rows_per_rule=3, page_size=2, max_actions_per_rule=2)
    h.store.add_bucket("v", "Enabled")
    for key in ("a", "b", "c"):
        versioned(h, key, 0.0, 1.0, 2.0)
    h.configs.set("v", LifecycleRule("n", "Enabled", RuleFilter(),
                                     noncurrent_expiration=NoncurrentExpiration(1)))
    h.advance_to(100.0)
    for _ in range(6):
        if not h.worker.running:
            h.worker.startService()
        else:
            h.cycle()
    assert [len(h.store.versions_of("v", key)) for key in ("a", "b", "c")] == [1, 1, 1]
    h.worker.stopService()


def test_engine_refusals_are_audited_and_do_not_stop_the_cycle(h: Harness) -> None:
    h.store.add_bucket("b")
    h.store.put("b", "a", 0.0)
    h.store.put("b", "b", 0.0)
    h.configs.set("b", expire(1))

    deleting = h.objects.delete

    async def refusing(caller: Caller, bucket_name: str, key: str,
                       version_id: str | None = None, *, bypass_governance: bool = False
                       ) -> Any:
        if key == "a":
            raise S3Error("AccessDenied")
        return await deleting(caller, bucket_name, key, version_id)

    h.objects.delete = refusing  # type: ignore[method-assign]
    h.advance_to(10.0)
    h.worker.startService()
    assert h.store.keys("b") == ["a"]
    assert h.audit.operations() == [(OP_EXPIRE, "a", 403), (OP_EXPIRE, "b", 204)]
    assert h.audit.entries[0]["error_code"] == "AccessDenied"


def test_suspended_bucket_never_replaces_a_locked_null_version(h: Harness) -> None:
    h.store.add_bucket("s", "Suspended")
    h.store.put("s", "k", 0.0, legal_hold_status="ON")
    h.configs.set("s", expire(1))
    h.advance_to(10.0)
    h.worker.startService()
    assert h.objects.calls == []
    assert h.worker.last_report is not None and h.worker.last_report.skipped_locked == 1


# -- multipart uploads ------------------------------------------------------------------


def test_stale_uploads_are_aborted(h: Harness) -> None:
    h.store.add_bucket("b")
    h.store.uploads += [UploadRecord("u1", "b", "tmp/a", 0.0),
                        UploadRecord("u2", "b", "tmp/b", 15.0),
                        UploadRecord("u3", "b", "other", 0.0)]
    h.configs.set("b", LifecycleRule("a", "Enabled", RuleFilter("prefix", "tmp/"),
                                     abort_days=1))
    h.advance_to(10.0)
    h.worker.startService()
    assert [u.upload_id for u in h.store.uploads] == ["u2", "u3"]
    assert h.audit.operations() == [(OP_ABORT, "tmp/a", 204)]
    assert h.audit.entries[0]["upload_id"] == "u1"
    h.advance_to(30.0)
    assert [u.upload_id for u in h.store.uploads] == ["u3"]


# -- pacing and robustness ------------------------------------------------------------------


def test_cycles_follow_the_interval_and_its_setting() -> None:
    h = make(interval_seconds=5.0)
    cycles: list[float] = []
    original = h.worker.run_cycle

    async def counted() -> Any:
        cycles.append(h.clock.seconds())
        return await original()

    h.worker.run_cycle = counted  # type: ignore[method-assign]
    h.worker.startService()
    h.clock.pump([1.0] * 12)
    assert cycles == [0.0, 5.0, 10.0]
    h.store.settings[INTERVAL_SETTING] = "3"
    h.clock.pump([1.0] * 6)  # read by the cycle at 15: the next one is at 18
    assert cycles[-2:] == [15.0, 18.0]
    h.store.settings[INTERVAL_SETTING] = "100"
    h.worker.interval_changed()  # from the settings endpoint: applies at once
    assert h.worker.interval_seconds == 100
    h.clock.pump([1.0] * 50)
    assert cycles[-1] == 18.0
    del h.store.settings[INTERVAL_SETTING]
    h.worker.interval_changed()  # back to [lifecycle] interval_seconds: 18 + 5 is past
    h.clock.pump([1.0] * 5)
    assert cycles[-2:] == [18.0, 69.0]
    assert h.worker.interval_seconds == 5.0
    h.worker.stopService()


@pytest.mark.parametrize(("text", "value"), [
    (None, None), ("", None), ("abc", None), ("0", None), ("0.5", None), ("nan", None),
    ("inf", None), ("1", 1.0), ("2.5", 2.5), ("3600", 3600.0),
])
def test_parse_interval(text: str | None, value: float | None) -> None:
    assert parse_interval(text) == value


def test_the_timer_survives_every_failure(h: Harness) -> None:
    h.store.add_bucket("broken")
    h.store.add_bucket("fine")
    h.store.put("fine", "k", 0.0)
    h.configs.broken.add("broken")
    h.configs.set("fine", expire(1))
    h.store.fail_listing = True
    h.advance_to(10.0)
    h.worker.startService()  # the whole cycle fails: logged, the timer goes on
    assert h.store.keys("fine") == ["k"]
    h.store.fail_listing = False
    h.cycle()  # one bucket fails, the other is served
    assert h.store.keys("fine") == []
    assert h.worker.last_report is not None and h.worker.last_report.failures == 1
    assert h.worker.running


def test_stopping_waits_for_the_cycle_in_progress(h: Harness) -> None:
    h.store.add_bucket("b")
    for n in range(3):
        h.store.put("b", f"k{n}", 0.0)
    h.configs.set("b", expire(1))
    gate: Deferred[None] = Deferred()

    async def slow_abort_then_delete(principal: Principal, bucket_name: str, key: str,
                                     version_id: str | None = None, *,
                                     bypass_governance: bool = False) -> Any:
        await gate
        h.store.remove(bucket_name, key, NULL_VERSION)

    h.objects.delete = slow_abort_then_delete  # type: ignore[method-assign]
    h.advance_to(10.0)
    h.worker.startService()
    stopped = h.worker.stopService()
    assert not stopped.called  # the cycle is waiting on its first delete
    gate.callback(None)
    assert stopped.called
    assert h.store.keys("b") == ["k1", "k2"]  # it stopped at its next action
