"""The maintenance-job worker: runs the active job (engine/job_rules.py), step by step, and
the table of runners, one per job type that can run here.

Owns the run loop and nothing else: the job records are the store's (meta/job_queries.py),
whose compare-and-set moves make the database the one place where a job's state lives, so
an operator's pause or cancel made through any process of the node is seen by the worker at
its next step. After every step the worker records the runner's cursor, the counters and the
rate, and only while the job is still running: a paused or cancelled job stops there, a
resumed one restarts from the recorded cursor, and so does a job found running at start-up
(the process stopped or was killed mid-job). A step may therefore run twice (the one after
the last recorded cursor): runners make their steps idempotent.

Pacing: a `TimerService` ticks every `TICK_SECONDS` on an injected clock; a tick with no job
in progress looks for one that is pending or running. A tick catches and logs everything.
Stopping the service stops the run at its next step (a runner's wait is cut short).

A runner is `factory(job, context) -> JobRunner`; its `step(cursor)` does a bounded piece of
work and answers a `Progress`. Job types without a runner (encrypt, decrypt, compress,
decompress, rotate-key, migrate-db, until they are built) are refused when created
(`runnable`); a job of such a type found in the database fails with a message.

In a cluster only the worker leader runs it (roles.py); a single node always does (worker 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.application.internet import TimerService
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.engine import job_rules as rules
from objstore.engine.job_rules import JobRecord, Progress
from objstore.errors import condition_of
from objstore.meta.job_queries import MoveRefused

log = Logger()

TICK_SECONDS = 1.0
# noop steps without a delay advance this many items at once (one progress write each).
NOOP_BATCH = 100


class Clock(Protocol):
    """The reactor, or `twisted.internet.task.Clock` in tests."""

    def seconds(self) -> float: ...

    def callLater(self, delay: float, callable: Callable[..., Any],  # noqa: N802
                  *args: Any, **kw: Any) -> Any: ...


class JobStore(Protocol):
    """The store's job queries the worker uses (`MetaStore`)."""

    def active_job(self) -> Deferred[JobRecord | None]: ...

    def move_job(self, job_id: str, move: str, *, error: str | None = ...
                 ) -> Deferred[JobRecord | None]: ...

    def record_progress(self, job_id: str, *, cursor: str | None, done: int, total: int,
                        rate: float) -> Deferred[bool]: ...

    def append_job_log(self, job_id: str, level: str, message: str) -> Deferred[None]: ...

    def claim_job(self, job_id: str, runner: str) -> Deferred[bool]: ...


@dataclass
class JobContext:
    """What a runner may use: the clock, a wait that stopping the worker cuts short, the
    job's log, and the node's services the runner's type needs (filled in as types that
    rewrite objects or the database arrive)."""

    clock: Clock
    sleep: Callable[[float], Deferred[None]]
    log: Callable[[str, str], Deferred[None]]
    services: Mapping[str, Any] = field(default_factory=dict)


class JobRunner(Protocol):
    async def step(self, cursor: str | None) -> Progress:
        """Do the piece of work after `cursor` (None: the start); where that leaves the job."""


RunnerFactory = Callable[[JobRecord, JobContext], JobRunner]


class NoopRunner:
    """`noop`: n steps, delay_ms apart; its cursor is the number of steps done."""

    def __init__(self, job: JobRecord, context: JobContext) -> None:
        self._n = int(job.params.get("n", 0))
        self._delay_seconds = int(job.params.get("delay_ms", 0)) / 1000.0
        self._context = context

    async def step(self, cursor: str | None) -> Progress:
        done = min(int(cursor or 0), self._n)
        if done < self._n:
            if self._delay_seconds > 0:
                await self._context.sleep(self._delay_seconds)
                done += 1
            else:
                done = min(done + NOOP_BATCH, self._n)
        return Progress(str(done), done, self._n, finished=done >= self._n)


def _rotate_key(job: JobRecord, context: JobContext) -> JobRunner:
    from objstore.workers.key_rotation import RotateKeyRunner

    return RotateKeyRunner(job, context)


def _stage_job(job: JobRecord, context: JobContext) -> JobRunner:
    from objstore.workers.stage_jobs import StageJobRunner

    return StageJobRunner(job, context)


def _migrate_db(job: JobRecord, context: JobContext) -> JobRunner:
    from objstore.workers.db_migration import MigrateDbRunner

    return MigrateDbRunner(job, context)


def _replicate_existing(job: JobRecord, context: JobContext) -> JobRunner:
    from objstore.workers.replicate_existing import ReplicateExistingRunner

    return ReplicateExistingRunner(job, context)


RUNNERS: Mapping[str, RunnerFactory] = {
    "noop": NoopRunner,
    "rotate-key": _rotate_key,
    "encrypt": _stage_job,
    "decrypt": _stage_job,
    "compress": _stage_job,
    "decompress": _stage_job,
    "migrate-db": _migrate_db,
    "replicate-existing": _replicate_existing,
}


def runnable(job_type: str) -> bool:
    """Whether jobs of this type can run on this build."""
    return job_type in RUNNERS


class JobWorker(TimerService):
    def __init__(self, *, store: JobStore, clock: Clock,
                 services: Mapping[str, Any] | None = None,
                 runners: Mapping[str, RunnerFactory] = RUNNERS,
                 node_id: str | None = None) -> None:
        super().__init__(TICK_SECONDS, self._tick)
        self.clock = clock  # TimerService's LoopingCall runs on it
        self._clock = clock
        self._store = store
        self._services = dict(services or {})
        self._runners = runners
        self._node_id = node_id  # recorded as the job's runner (None: not recorded)
        self._stopping = False
        self._waiting: Deferred[None] | None = None
        self.current: str | None = None  # the id of the job being run

    def startService(self) -> None:  # noqa: N802 (Twisted's name)
        self._stopping = False
        super().startService()

    def stopService(self) -> Deferred[None]:  # noqa: N802
        self._stopping = True
        if self._waiting is not None:
            self._waiting.cancel()
        stopped: Deferred[None] = super().stopService()
        return stopped

    def _tick(self) -> Deferred[None]:
        return ensureDeferred(self.run_once()).addErrback(self._tick_failed)

    def _tick_failed(self, failure: Failure) -> None:
        if failure.value is not None and condition_of(failure.value) is not None:
            log.warn("the maintenance-job worker's tick failed: {error}", error=failure.value)
            return
        log.failure("the maintenance-job worker's tick failed", failure)

    async def run_once(self) -> None:
        """Run the active job, if one is pending or running, until it ends, is paused or
        cancelled, or the worker stops."""
        if self._stopping:
            return
        job = await self._store.active_job()
        if job is None or job.status == rules.PAUSED:
            return
        factory = self._runners.get(job.job_type)
        if factory is None:
            await self._fail(job, f"the job type {job.job_type} is not available on this "
                             "build")
            return
        if job.status == rules.PENDING:
            try:
                started = await self._store.move_job(job.id, rules.START)
            except MoveRefused:
                return  # paused or cancelled since it was read
            if started is None:
                return
            job = started
            await self._log(job.id, "info", "started")
        else:
            await self._log(job.id, "info", f"resumed at {job.done}/{job.total}")
        if self._node_id is not None and job.runner != self._node_id \
                and not await self._store.claim_job(job.id, self._node_id):
            return  # paused or cancelled since it was read
        self.current = job.id
        try:
            await self._run(job, factory(job, self._context(job)))
        finally:
            self.current = None

    def _context(self, job: JobRecord) -> JobContext:
        def write(level: str, message: str) -> Deferred[None]:
            return self._store.append_job_log(job.id, level, message)

        return JobContext(clock=self._clock, sleep=self._sleep, log=write,
                          services=self._services)

    def _sleep(self, seconds: float) -> Deferred[None]:
        def cancel(_: Deferred[None]) -> None:
            call.cancel()

        waiting: Deferred[None] = Deferred(cancel)
        call = self._clock.callLater(seconds, waiting.callback, None)
        self._waiting = waiting

        def done(result: Any) -> Any:
            self._waiting = None
            return result

        return waiting.addBoth(done)

    async def _run(self, job: JobRecord, runner: JobRunner) -> None:
        began, done_before = self._clock.seconds(), job.done
        cursor = job.cursor
        while not self._stopping:
            try:
                progress = await runner.step(cursor)
            except CancelledError:
                return  # the worker is stopping: the job resumes from `cursor` later
            except rules.JobError as error:
                log.warn("maintenance job {id} failed: {error}", id=job.id, error=error)
                await self._fail(job, str(error))
                return
            except Exception as error:  # noqa: BLE001 (a runner's failure fails its job)
                log.failure("maintenance job {id} failed", id=job.id)
                await self._fail(job, f"{type(error).__name__}: {error}")
                return
            rate = rules.rate_per_second(progress.done - done_before,
                                         self._clock.seconds() - began)
            if not await self._store.record_progress(
                    job.id, cursor=progress.cursor, done=progress.done, total=progress.total,
                    rate=rate):
                return  # paused or cancelled: the API logged the move
            cursor = progress.cursor
            if progress.finished:
                try:
                    await self._store.move_job(job.id, rules.COMPLETE)
                except MoveRefused:
                    return
                await self._log(job.id, "info", f"completed: {progress.done} done")
                return

    async def _fail(self, job: JobRecord, message: str) -> None:
        try:
            if job.status == rules.PENDING:
                await self._store.move_job(job.id, rules.START)
            await self._store.move_job(job.id, rules.FAIL, error=message)
        except MoveRefused:
            return
        await self._log(job.id, "error", message)

    async def _log(self, job_id: str, level: str, message: str) -> None:
        await self._store.append_job_log(job_id, level, message)


class MaintenanceWatch:
    """Whether this node runs a job in maintenance mode, as every process's health check
    must tell (the job runs in one process; the database says which job is running, and
    which node runs it: in a cluster the job rows reach every node, and only the runner
    drains). `refresh` is ticked every second; `job_id` is read by the health check."""

    def __init__(self, store: JobStore, node_id: str | None = None) -> None:
        self._store = store
        self._node_id = node_id
        self.job_id: str | None = None

    async def refresh(self) -> None:
        job = await self._store.active_job()
        self.job_id = (job.id if job is not None and job.status == rules.RUNNING
                       and job.mode == rules.MAINTENANCE
                       and (self._node_id is None or job.runner == self._node_id)
                       else None)

    def __call__(self) -> str | None:
        return self.job_id
