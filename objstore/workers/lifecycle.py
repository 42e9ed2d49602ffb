"""The lifecycle worker: applies every bucket's enabled lifecycle rules, now and then.

Owns the evaluation cycle and its pacing. Every action goes through the engine's use cases
(`ObjectService.delete`, `MultipartService.abort`), never straight to the store or the
blobs, so durability, object lock, events and cluster fan-out hold for it exactly
as for a client. What it does per enabled rule:

* Expiration (Days/Date): expire each matching current version that is due: deleted on an
  unversioned bucket, hidden behind a new delete marker on a versioned one;
* NoncurrentVersionExpiration: permanently delete noncurrent versions that became
  noncurrent NoncurrentDays ago, keeping the NewerNoncurrentVersions newest ones;
* ExpiredObjectDeleteMarker (and, as on AWS, Expiration Days): remove a current delete
  marker that is the only version left of its key;
* AbortIncompleteMultipartUpload: abort uploads started DaysAfterInitiation ago.

It never permanently deletes a version that object lock protects (retention or legal
hold; the engine refuses too), touches at most `max_actions_per_rule` objects and uploads
per rule per cycle, and examines at most `scan_rows_per_rule` rows per rule per cycle,
resuming where it stopped on the next cycle. Each action goes through the engine with a
`Caller` of origin lifecycle naming it Lifecycle::ExpireObject,
Lifecycle::DeleteNoncurrentVersion, Lifecycle::DeleteExpiredMarker or
Lifecycle::AbortMultipartUpload: the engine's change hook records it in the audit log
(audit/changes.py); an action the engine refused is recorded here, on the same
`AuditSink`.

Pacing: a `TimerService` ticks every second on an injected clock; a tick starts a cycle
when one is due. The interval is `[lifecycle] interval_seconds`, overridden at run time by
the setting `lifecycle_evaluation_interval` (read at each cycle, and at once when
`interval_changed` is called). A tick catches and logs everything: an exception escaping
it would stop the timer for good. Cycles never overlap, and stopping the service waits for
the cycle in progress, which stops at its next action.

In a cluster only the worker leader runs it; a single node always does.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.audit.log import AuditSink
from objstore.engine import lifecycle_rules as rules
from objstore.engine.changes import Caller, Origin, background_caller
from objstore.engine.lifecycle_rules import LifecycleConfiguration, LifecycleRule
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

log = Logger()

OP_EXPIRE = "Lifecycle::ExpireObject"
OP_NONCURRENT = "Lifecycle::DeleteNoncurrentVersion"
OP_MARKER = "Lifecycle::DeleteExpiredMarker"
OP_ABORT = "Lifecycle::AbortMultipartUpload"
INTERVAL_SETTING = "lifecycle_evaluation_interval"
TICK_SECONDS = 1.0
LIFECYCLE_USER = "lifecycle"
SUSPENDED = "Suspended"


# -- what the worker talks to ----------------------------------------------------------


class Clock(Protocol):
    """The reactor, or `twisted.internet.task.Clock` in tests (TimerService schedules its
    ticks on it too)."""

    def seconds(self) -> float: ...


class LifecycleReads(Protocol):
    """The reads the worker needs (`MetaStore`)."""

    def list_buckets(self) -> Deferred[list[BucketRecord]]: ...

    def list_latest(self, bucket: str, prefix: str = ..., start_after: str = ...,
                    limit: int = ...) -> Deferred[list[ObjectRecord]]: ...

    def list_versions(self, bucket: str, prefix: str = ..., key_marker: str = ...,
                      version_marker: str = ..., limit: int = ...
                      ) -> Deferred[list[ObjectRecord]]: ...

    def list_uploads(self, bucket: str, prefix: str = ..., key_marker: str = ...,
                     upload_id_marker: str = ..., limit: int = ...
                     ) -> Deferred[list[UploadRecord]]: ...

    def get_object(self, bucket: str, key: str, version_id: str | None = ...
                   ) -> Deferred[ObjectRecord | None]: ...

    def get_setting(self, key: str) -> Deferred[str | None]: ...

    def get_user(self, user_id: str) -> Deferred[UserRecord | None]: ...


class ConfigSource(Protocol):
    """A bucket's lifecycle configuration (`LifecycleService`)."""

    def load(self, bucket: str) -> Awaitable[LifecycleConfiguration | None]: ...


class ObjectRemover(Protocol):
    """`ObjectService.delete`: no version id expires the current version (a delete marker
    on a versioned bucket); a version id deletes that version permanently."""

    def delete(self, caller: Caller, bucket_name: str, key: str,
               version_id: str | None = None, *, bypass_governance: bool = False
               ) -> Awaitable[Any]: ...


class UploadAborter(Protocol):
    def abort(self, caller: Caller, upload: UploadRecord) -> Awaitable[None]: ...


@dataclass(frozen=True)
class LifecycleSettings:
    interval_seconds: float = 3600.0
    day_seconds: float = rules.DAY_SECONDS
    max_actions_per_rule: int = 100
    scan_rows_per_rule: int = 10_000
    page_size: int = 1000


def parse_interval(text: str | None) -> float | None:
    """The value of the `lifecycle_evaluation_interval` setting (seconds, at least 1), or
    None when it is unset or unusable."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 1 else None


# -- one cycle's state ---------------------------------------------------------------------


@dataclass
class CycleReport:
    """What one cycle did (for logs and tests)."""

    expired: int = 0
    noncurrent_deleted: int = 0
    markers_removed: int = 0
    uploads_aborted: int = 0
    skipped_locked: int = 0
    failures: int = 0

    @property
    def actions(self) -> int:
        return self.expired + self.noncurrent_deleted + self.markers_removed \
            + self.uploads_aborted


@dataclass
class RuleRun:
    """One rule of one bucket during one cycle, with what is left of its budgets."""

    bucket: BucketRecord
    rule: LifecycleRule
    principal: Principal
    now: float
    report: CycleReport
    actions_left: int
    rows_left: int

    @property
    def exhausted(self) -> bool:
        return self.actions_left <= 0 or self.rows_left <= 0

    def cursor_name(self, what: str) -> tuple[str, str, str]:
        return (self.bucket.name, self.rule.rule_id, what)


@dataclass
class KeyWalk:
    """The versions of one key seen so far, newest first, while walking ListObjectVersions
    order. `newer_time` is when the previous (newer) version was written: the moment the
    next one became noncurrent."""

    key: str | None = None
    newer_time: float | None = None
    noncurrent_seen: int = 0
    remaining: int = 0
    marker: ObjectRecord | None = None  # the key's current version, when a delete marker


@dataclass
class VersionCursor:
    key_marker: str = ""
    version_marker: str = ""
    walk: KeyWalk = field(default_factory=KeyWalk)


# -- the service ---------------------------------------------------------------------------


class LifecycleWorker(TimerService):
    def __init__(
        self,
        *,
        reads: LifecycleReads,
        configs: ConfigSource,
        objects: ObjectRemover,
        uploads: UploadAborter,
        audit: AuditSink,
        settings: LifecycleSettings,
        clock: Clock,
    ) -> None:
        super().__init__(TICK_SECONDS, self._tick)
        self.clock = clock  # TimerService's LoopingCall runs on it
        self._clock = clock
        self._reads = reads
        self._configs = configs
        self._objects = objects
        self._uploads = uploads
        self._audit = audit
        self._settings = settings
        self.interval_seconds = settings.interval_seconds
        self._next_due = 0.0  # the first tick runs a cycle
        self._last_start: float | None = None
        self._stopping = False
        self._cursors: dict[tuple[str, str, str], Any] = {}
        self.last_report: CycleReport | None = None
        self.setName("lifecycle")

    # -- pacing ------------------------------------------------------------------------
    def _tick(self) -> Deferred[None] | None:
        """Start a cycle when one is due; never raises (the timer would stop for good)."""
        try:
            now = self._clock.seconds()
            if self._stopping or now < self._next_due:
                return None
            self._last_start = now
            self._next_due = now + self.interval_seconds
            running: Deferred[Any] = Deferred.fromCoroutine(self.run_cycle())
            return running.addCallbacks(lambda _: None, self._cycle_failed)
        except Exception:
            log.failure("lifecycle: a timer tick failed")
            return None

    def _cycle_failed(self, failure: Failure) -> None:
        log.failure("lifecycle: a cycle failed", failure)

    def interval_changed(self) -> None:
        """Re-read the interval setting now (the settings endpoint calls this)."""
        refresh: Deferred[Any] = Deferred.fromCoroutine(self._refresh_interval())
        refresh.addErrback(lambda f: log.failure("lifecycle: reading the interval failed", f))

    async def _refresh_interval(self) -> None:
        configured = self._settings.interval_seconds
        interval = parse_interval(await self._reads.get_setting(INTERVAL_SETTING)) or configured
        if interval != self.interval_seconds:
            log.info("lifecycle: evaluating every {seconds:g}s", seconds=interval)
        self.interval_seconds = interval
        if self._last_start is not None:
            self._next_due = self._last_start + interval

    def startService(self) -> None:  # noqa: N802 (Twisted's name)
        self._stopping = False
        super().startService()

    def stopService(self) -> Deferred[None]:  # noqa: N802
        self._stopping = True  # a running cycle stops at its next action
        stopped: Deferred[None] = super().stopService()
        return stopped

    # -- a cycle -------------------------------------------------------------------------
    async def run_cycle(self) -> CycleReport:
        """Evaluate every bucket once; a failing bucket is logged and skipped."""
        await self._refresh_interval()
        now = self._clock.seconds()
        report = CycleReport()
        for bucket in await self._reads.list_buckets():
            if self._stopping:
                break
            try:
                await self._bucket_cycle(bucket, now, report)
            except Exception:
                report.failures += 1
                log.failure("lifecycle: evaluating bucket {bucket} failed", bucket=bucket.name)
        self.last_report = report
        if report.actions or report.failures:
            log.info("lifecycle: cycle done: {report}", report=report)
        return report

    async def _bucket_cycle(self, bucket: BucketRecord, now: float, report: CycleReport
                            ) -> None:
        config = await self._configs.load(bucket.name)
        if config is None:
            return
        principal = await self._principal(bucket)
        for rule in config.enabled_rules():
            # One budget per rule, shared by its passes.
            run = RuleRun(bucket, rule, principal, now, report,
                          self._settings.max_actions_per_rule,
                          self._settings.scan_rows_per_rule)
            for applies, run_pass in self._PASSES:
                if self._stopping:
                    return
                if applies(rule):
                    await run_pass(self, run)

    async def _principal(self, bucket: BucketRecord) -> Principal:
        """The engine acts for the bucket owner: delete markers the worker creates are the
        owner's, as on AWS."""
        owner = await self._reads.get_user(bucket.owner_id)
        name = owner.username if owner is not None else LIFECYCLE_USER
        return Principal(bucket.owner_id, name, False, "")

    # -- Expiration of current versions ------------------------------------------------
    async def _expire_current(self, run: RuleRun) -> None:
        name = run.cursor_name("current")
        start_after: str = self._cursors.pop(name, "")
        while not run.exhausted and not self._stopping:
            limit = min(self._settings.page_size, run.rows_left)
            page = await self._reads.list_latest(run.bucket.name, run.rule.filter.prefix,
                                                 start_after, limit)
            for record in page:
                run.rows_left -= 1
                start_after = record.key
                if self._current_due(run, record):
                    await self._expire(run, record)
                if run.exhausted or self._stopping:
                    break
            else:
                if len(page) < limit:
                    return  # the whole key space was seen: start over next cycle
        self._cursors[name] = start_after

    def _current_due(self, run: RuleRun, record: ObjectRecord) -> bool:
        expiry = rules.current_expiry(run.rule, record.last_modified, self._settings.day_seconds)
        return expiry is not None and expiry <= run.now and run.rule.filter.matches(
            record.key, record.size, record.tags)

    async def _expire(self, run: RuleRun, record: ObjectRecord) -> None:
        fresh = await self._reads.get_object(record.bucket, record.key)
        if fresh is None or fresh.seq != record.seq:
            return  # rewritten since it was listed: it is judged again next cycle
        if run.bucket.versioning == SUSPENDED and fresh.version_id == NULL_VERSION \
                and may_delete(fresh, run.now, False, False) is not None:
            run.report.skipped_locked += 1  # the null marker would replace a locked version
            return
        run.actions_left -= 1
        if await self._act(OP_EXPIRE, run, record, None):
            run.report.expired += 1

    # -- noncurrent versions and expired delete markers ----------------------------------
    async def _scan_versions(self, run: RuleRun) -> None:
        name = run.cursor_name("versions")
        cursor: VersionCursor = self._cursors.pop(name, None) or VersionCursor()
        while not run.exhausted and not self._stopping:
            limit = min(self._settings.page_size, run.rows_left)
            page = await self._reads.list_versions(run.bucket.name, run.rule.filter.prefix,
                                                   cursor.key_marker, cursor.version_marker,
                                                   limit)
            for record in page:
                run.rows_left -= 1
                if await self._visit_version(run, cursor.walk, record):
                    cursor.key_marker, cursor.version_marker = record.key, record.version_id
                if run.exhausted or self._stopping:
                    break
            else:
                if len(page) < limit:
                    await self._finish_key(run, cursor.walk)
                    return
        self._cursors[name] = cursor

    async def _visit_version(self, run: RuleRun, walk: KeyWalk, record: ObjectRecord) -> bool:
        """Judge one version in listing order; True when it is still there afterwards."""
        if record.key != walk.key:
            await self._finish_key(run, walk)
            walk.key, walk.newer_time, walk.noncurrent_seen = record.key, None, 0
            walk.remaining, walk.marker = 0, None
        if record.is_latest:
            walk.newer_time, walk.remaining = record.last_modified, 1
            walk.marker = record if record.is_delete_marker else None
            return True
        since, walk.newer_time = walk.newer_time, record.last_modified
        rank, walk.noncurrent_seen = walk.noncurrent_seen, walk.noncurrent_seen + 1
        deleted = since is not None and await self._maybe_delete_noncurrent(
            run, record, since, rank)
        if not deleted:
            walk.remaining += 1
        return not deleted

    async def _maybe_delete_noncurrent(self, run: RuleRun, record: ObjectRecord, since: float,
                                       rank: int) -> bool:
        due = rules.noncurrent_due(run.rule, since, rank, self._settings.day_seconds)
        if due is None or due > run.now or run.actions_left <= 0:
            return False
        if not run.rule.filter.matches(record.key, record.size, record.tags):
            return False
        if may_delete(record, run.now, False, False) is not None:
            run.report.skipped_locked += 1
            return False
        fresh = await self._reads.get_object(record.bucket, record.key, record.version_id)
        if fresh is None or fresh.is_latest or fresh.seq != record.seq:
            return fresh is None  # changed since it was listed (promoted, or gone)
        run.actions_left -= 1
        deleted = await self._act(OP_NONCURRENT, run, record, record.version_id)
        if deleted:
            run.report.noncurrent_deleted += 1
        return deleted

    async def _finish_key(self, run: RuleRun, walk: KeyWalk) -> None:
        """A key's versions are all seen: remove its current delete marker when it is the
        only version left and the rule says so."""
        marker = walk.marker
        walk.marker = None
        if marker is None or walk.remaining != 1 or run.actions_left <= 0:
            return
        due = rules.marker_due(run.rule, marker.last_modified, self._settings.day_seconds)
        if due is None or due > run.now or not run.rule.filter.matches(marker.key, 0, {}):
            return
        if not await self._alone(marker):
            return
        run.actions_left -= 1
        if await self._act(OP_MARKER, run, marker, marker.version_id):
            run.report.markers_removed += 1

    async def _alone(self, marker: ObjectRecord) -> bool:
        """Checked again just before removing it: the marker is still its key's only
        version (the walk may have resumed after versions it never saw)."""
        listed = await self._reads.list_versions(marker.bucket, marker.key, "", "", 2)
        same_key = [v for v in listed if v.key == marker.key]
        return len(same_key) == 1 and same_key[0].version_id == marker.version_id \
            and same_key[0].is_delete_marker

    # -- incomplete multipart uploads ----------------------------------------------------
    async def _abort_uploads(self, run: RuleRun) -> None:
        name = run.cursor_name("uploads")
        key_marker, upload_marker = self._cursors.pop(name, ("", ""))
        while not run.exhausted and not self._stopping:
            limit = min(self._settings.page_size, run.rows_left)
            page = await self._reads.list_uploads(run.bucket.name, run.rule.filter.prefix,
                                                  key_marker, upload_marker, limit)
            for upload in page:
                run.rows_left -= 1
                key_marker, upload_marker = upload.key, upload.upload_id
                await self._maybe_abort(run, upload)
                if run.exhausted or self._stopping:
                    break
            else:
                if len(page) < limit:
                    return
        self._cursors[name] = (key_marker, upload_marker)

    async def _maybe_abort(self, run: RuleRun, upload: UploadRecord) -> None:
        due = rules.upload_due(run.rule, upload.initiated_at, self._settings.day_seconds)
        if due is None or due > run.now:
            return
        run.actions_left -= 1
        caller = background_caller(run.principal, Origin.LIFECYCLE, OP_ABORT,
                                   rule_id=run.rule.rule_id, upload_id=upload.upload_id)
        try:
            await self._uploads.abort(caller, upload)
        except Exception as error:
            self._action_failed(OP_ABORT, run, upload.key, error, upload_id=upload.upload_id)
            return
        run.report.uploads_aborted += 1

    # -- acting through the engine -------------------------------------------------------
    async def _act(self, operation: str, run: RuleRun, record: ObjectRecord,
                   version_id: str | None) -> bool:
        """Delete through the engine (never bypassing governance); the engine's change hook
        records it in the audit log as `operation` (audit.changes), a refusal is recorded
        here."""
        caller = background_caller(run.principal, Origin.LIFECYCLE, operation,
                                   rule_id=run.rule.rule_id, version_id=record.version_id)
        try:
            await self._objects.delete(caller, record.bucket, record.key, version_id)
        except Exception as error:
            self._action_failed(operation, run, record.key, error, version_id=record.version_id)
            return False
        return True

    def _action_failed(self, operation: str, run: RuleRun, key: str, error: Exception,
                       **extra: object) -> None:
        run.report.failures += 1
        if isinstance(error, S3Error):
            status, code = error.status, error.code
            log.warn("lifecycle: {operation} {bucket}/{key} refused: {code} {message}",
                     operation=operation, bucket=run.bucket.name, key=key, code=code,
                     message=error.message)
        else:
            status, code = 500, "InternalError"
            log.failure("lifecycle: {operation} {bucket}/{key} failed", Failure(error),
                        operation=operation, bucket=run.bucket.name, key=key)
        self._audit.record(operation, bucket=run.bucket.name, key=key, status=status,
                           user=LIFECYCLE_USER, error_code=code, rule_id=run.rule.rule_id,
                           **extra)

    # Which pass runs for a rule, in this order.
    _PASSES: tuple[tuple[Callable[[LifecycleRule], bool],
                         Callable[[LifecycleWorker, RuleRun], Awaitable[None]]], ...] = (
        (lambda rule: rule.expiration is not None and (
            rule.expiration.days is not None or rule.expiration.date is not None),
         _expire_current),
        (lambda rule: rule.noncurrent_expiration is not None or rules.cleans_markers(rule),
         _scan_versions),
        (lambda rule: rule.abort_days is not None, _abort_uploads),
    )


__all__ = [
    "INTERVAL_SETTING",
    "OP_ABORT",
    "OP_EXPIRE",
    "OP_MARKER",
    "OP_NONCURRENT",
    "CycleReport",
    "LifecycleSettings",
    "LifecycleWorker",
    "parse_interval",
]
