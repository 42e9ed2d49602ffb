"""The audit log service: accepts records from the request path (`add`) and from background
actions (`record`, the `AuditSink` protocol), and writes them to the metadata database off
the request path.

Records wait in a bounded queue (full: the oldest is dropped and counted); a timer flushes
what is queued at each tick (and any full batch that arrives meanwhile) in batches of
`batch_size` rows, one INSERT statement per batch, through the DB writer pool, one flush
at a time. A batch that fails is retried on the next ticks and
dropped (and counted) after `max_attempts`. A second timer purges rows older than
`[audit] retention_days`, a bounded batch per transaction. Stopping the service stops both
timers and then flushes everything still queued, so the service must stop after the
listener has drained and before the DB pool stops. `[audit] enabled = false` stops
recording; the purge keeps running so old rows still expire. With `[audit] strict = true`
request records skip the queue: `write_now` writes them before their answers leave, in
batches of those that arrive while the previous batch is written (audit/strict.py);
background actions are still queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from twisted.application import service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.audit.queue import BoundedQueue
from objstore.audit.redact import redact_text, safe_details, storable_record
from objstore.errors import condition_of
from objstore.meta.audit_queries import PURGE_BATCH, AuditRecord
from objstore.timers import ReactorClock, safe_timer

log = Logger()

SECONDS_PER_DAY = 86400.0
QUEUE_CAPACITY = 10_000
BATCH_SIZE = 500
FLUSH_INTERVAL_SECONDS = 1.0
PURGE_INTERVAL_SECONDS = 3600.0
MAX_ATTEMPTS = 5

# Extra keyword arguments of `record` that fill a column of their own, with their types.
_COLUMNS: dict[str, type] = {
    "request_id": str, "user_id": str, "access_key": str, "source_ip": str,
    "user_agent": str, "duration_ms": float, "bytes_in": int, "bytes_out": int,
}


class AuditSink(Protocol):
    """What code outside the request path (workers) records its actions through."""

    def record(
        self, operation: str, *, bucket: str = "", key: str = "", status: int = 200,
        user: str = "system", error_code: str = "", **extra: object,
    ) -> None: ...


class AuditStore(Protocol):
    def insert_audit_records(self, records: Sequence[AuditRecord]) -> Deferred[int]: ...

    def purge_audit(self, before_ts: float, batch_size: int = ...) -> Deferred[int]: ...


class AuditLog(service.MultiService):
    def __init__(
        self,
        store: AuditStore,
        *,
        node_id: str,
        clock: ReactorClock,
        enabled: bool = True,
        retention_days: float = 30.0,
        capacity: int = QUEUE_CAPACITY,
        batch_size: int = BATCH_SIZE,
        flush_interval_seconds: float = FLUSH_INTERVAL_SECONDS,
        purge_interval_seconds: float = PURGE_INTERVAL_SECONDS,
        max_attempts: int = MAX_ATTEMPTS,
        purge: bool = True,  # False in all but one process of a node
    ) -> None:
        super().__init__()
        self._store = store
        self.node_id = node_id
        self._clock = clock
        self.enabled = enabled
        self._retention_seconds = retention_days * SECONDS_PER_DAY
        self._batch_size = batch_size
        self._max_attempts = max_attempts
        self.queue: BoundedQueue[AuditRecord] = BoundedQueue(capacity, clock=clock.seconds)
        self._pending: list[AuditRecord] = []  # the batch being written or to retry
        self._attempts = 0
        self._flushing = False
        # [audit] strict: records whose answers wait (`write_now`), and their waiters.
        self._urgent: list[tuple[AuditRecord, Deferred[None]]] = []
        self._urgent_writing = False
        self.failed_writes = 0
        safe_timer(flush_interval_seconds, self.flush, clock=clock,
                   what="audit flush").setServiceParent(self)
        if purge:
            safe_timer(purge_interval_seconds, self.purge, clock=clock,
                       what="audit purge").setServiceParent(self)

    # -- recording (reactor thread, never blocks) ----------------------------------------
    def add(self, record: AuditRecord) -> None:
        """Queue a record of a request (its fields are already redacted; text the database
        would refuse is escaped here, or it would fail its whole batch)."""
        if self.enabled:
            self.queue.put(storable_record(record))

    def record(
        self, operation: str, *, bucket: str = "", key: str = "", status: int = 200,
        user: str = "system", error_code: str = "", **extra: object,
    ) -> None:
        """Record an action taken outside a request (e.g. Lifecycle::ExpireObject).
        Extras named like a column (request_id, user_id, access_key, source_ip,
        user_agent, duration_ms, bytes_in, bytes_out) fill it; others go to `details`;
        secret-looking names are dropped."""
        if not self.enabled:
            return
        columns, others = _split_extra(extra)
        self.queue.put(storable_record(AuditRecord(
            ts=self._clock.seconds(), operation=operation, node_id=self.node_id,
            bucket=bucket, key=redact_text(key), status=status, username=user,
            error_code=error_code, details=safe_details(others), **columns,
        )))

    def write_now(self, record: AuditRecord) -> Deferred[None]:
        """[audit] strict: write one request's record before its answer; fires once it is
        committed, fails (counted in `failed_writes`, never retried here) when it could
        not be. One write is in flight at a time: the records that arrive meanwhile go
        together in the next, one multi-row INSERT (which may share a group commit with
        object writes), so under load a record costs a share of a write and waits for at
        most two. Recording disabled: fires at once."""
        if not self.enabled:
            return defer.succeed(None)
        waiter: Deferred[None] = Deferred()
        self._urgent.append((storable_record(record), waiter))
        if not self._urgent_writing:
            self._write_urgent()
        return waiter

    def _write_urgent(self) -> None:
        batch = self._urgent[:self._batch_size]
        del self._urgent[:self._batch_size]
        self._urgent_writing = True
        written = self._store.insert_audit_records([record for record, _ in batch])
        written.addBoth(self._urgent_written, batch)

    def _urgent_written(self, result: object,
                        batch: list[tuple[AuditRecord, Deferred[None]]]) -> None:
        self._urgent_writing = False
        if isinstance(result, Failure):
            self.failed_writes += 1
        for _, waiter in batch:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(None)
        if self._urgent:  # including records of answers just released
            self._write_urgent()

    @property
    def depth(self) -> int:
        return len(self.queue) + len(self._pending)

    # -- writing -------------------------------------------------------------------------
    async def flush(self) -> int:
        """Write what is queued now, batch by batch, and then any full batch that arrived
        meanwhile; stops at the first write that fails. Returns the number written. A
        flush already running makes this a no-op.

        Records that arrive while it writes otherwise wait for the next tick: a flush that
        chased the queue until it was empty wrote, under a steady load, back-to-back
        batches of the few dozen records that came in during the previous write, each its
        own transaction and sync (4 KiB GETs on one worker: batches of 26 records on
        average, 83 us of the writer thread's CPU per record)."""
        if self._flushing:
            return 0
        self._flushing = True
        written = 0
        due = len(self.queue)
        try:
            while True:
                if not self._pending:
                    if not due and len(self.queue) >= self._batch_size:
                        due = self._batch_size
                    self._pending = self.queue.take(min(self._batch_size, due))
                    due -= len(self._pending)
                if not self._pending:
                    return written
                if not await self._write_pending():
                    return written
                written += len(self._pending)
                self._pending = []
        finally:
            self._flushing = False

    async def _write_pending(self) -> bool:
        try:
            await self._store.insert_audit_records(self._pending)
        except Exception as exc:
            self._attempts += 1
            self.failed_writes += 1
            if self._attempts == 1 and condition_of(exc) is not None:  # e.g. a full disk
                log.warn("writing {n} audit records failed ({error}); will retry",
                         n=len(self._pending), error=exc)
            elif self._attempts == 1:
                log.failure("writing {n} audit records failed; will retry",
                            n=len(self._pending))
            if self._attempts >= self._max_attempts:
                self.queue.drop(len(self._pending))
                self._pending, self._attempts = [], 0
            return False
        self._attempts = 0
        return True

    async def purge(self) -> int:
        """Delete rows older than the retention, a batch per transaction."""
        cutoff = self._clock.seconds() - self._retention_seconds
        total = 0
        while True:
            removed = await self._store.purge_audit(cutoff, PURGE_BATCH)
            total += removed
            if removed < PURGE_BATCH or not self.running:
                break
        if total:
            log.info("audit log: purged {n} records older than the retention", n=total)
        return total

    # -- service -------------------------------------------------------------------------
    @defer.inlineCallbacks
    def stopService(self) -> Any:  # noqa: N802 (Twisted's name)
        if not self.running:
            return
        yield super().stopService()  # the timers, after a tick in progress
        for _ in range(self._max_attempts):
            yield defer.ensureDeferred(self.flush())
            if not self.depth:
                return
        log.warn("audit log: {n} records not written at shutdown", n=self.depth)


def _split_extra(extra: dict[str, object]) -> tuple[dict[str, Any], dict[str, object]]:
    columns: dict[str, Any] = {}
    others: dict[str, object] = {}
    for name, value in extra.items():
        kind = _COLUMNS.get(name)
        if kind is None:
            others[name] = value
            continue
        try:
            columns[name] = kind(value) if kind is not str else redact_text(str(value))
        except (TypeError, ValueError):
            others[name] = value
    return columns, others
