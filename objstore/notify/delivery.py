"""Delivery of the queued bucket notifications (`notification_events`) to their targets.

`tick` (on a short timer, in the node's leading process, clock injected) starts one
delivery run per target that has pending rows and is not already running: a run takes the
target's oldest pending rows (at most `[notifications] channel_size`) and delivers them in
order. A run is its own coroutine, never awaited by the tick: a slow or dead target holds
up only itself, never another target and never a client write (writes only add outbox
entries; the consumer only adds rows).

Each attempt is recorded on its row: delivered; or, after a failure, its error and the
next attempt at `retry_base_seconds * 2**(attempts-1)` (capped at an hour), the run
stopping there so that a target's events stay in order; FAILED once `max_retries` retries
have failed too (the rows after it then go on). Delivered and failed rows are purged
after `event_retention_days`. Figures for the metrics: delivered, failed and retried
counts and, refreshed each tick, the queue depth and oldest pending age per target.

Rows become pending only in this process: queued by the outbox consumer (whose `queued`
count the delivery is given) or put back for a retry by a run. So once a tick found no
pending row and the count has not moved since, the ticks skip the database until it
moves, or until FIGURES_SECONDS passed (a safety net, and the figures' own refresh): an
idle node no longer reads the queue four times a second.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from objstore.config import SECONDS_PER_DAY, Notifications
from objstore.meta.notification_queries import (
    DELIVERED,
    FAILED,
    PENDING,
    NotificationEvent,
    QueueFigures,
)
from objstore.notify.targets.base import DeliveryError, Event, Target

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

log = Logger()

TICK_SECONDS = 0.25
FIGURES_SECONDS = 5.0  # queue figures and the retention purge, at most this often
MAX_BACKOFF_SECONDS = 3600.0
BATCH = 100  # first-attempt deliveries marked per transaction


def retry_delay(attempts: int, base: float) -> float:
    """Seconds before the next attempt after `attempts` failed ones."""
    return min(MAX_BACKOFF_SECONDS, base * 2.0 ** max(0, attempts - 1))


_TIME_KEY = '"eventTime":"'


def event_time_of(body: str) -> str:
    """The first record's eventTime of an event document, "" when it has none. The
    documents `records.event_document` writes (compact JSON, the record's eventTime
    before any value a client chose) give it by a search, not a parse: a client's
    string cannot hold the key's pattern (its quotes are escaped); any other document
    (a test event) is parsed."""
    start = body.find(_TIME_KEY)
    if start >= 0:
        start += len(_TIME_KEY)
        end = body.find('"', start)
        if end >= 0 and "\\" not in body[start:end]:
            return body[start:end]
    try:
        return str(json.loads(body)["Records"][0].get("eventTime", ""))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""


def event_of(row: NotificationEvent) -> Event:
    return Event(body=row.body.encode(), event_name=row.event_name, bucket=row.bucket,
                 key=row.key, event_time=event_time_of(row.body),
                 deleted=row.event_name.startswith(("s3:ObjectRemoved:",
                                                     "s3:LifecycleExpiration:")))


class NotificationDelivery:
    def __init__(self, meta: MetaStore, targets: Mapping[str, Target], *,
                 settings: Notifications, clock: Callable[[], float],
                 adhoc: Callable[[str], Target],
                 queued: Callable[[], int] | None = None) -> None:
        """`targets`: the configured ones by name; `adhoc(url)`: the webhook of an
        http(s) URL used as an ARN (built on first use, kept); `queued()`: the rows the
        consumer has queued so far, counted after each commit (None: every tick reads
        the queue)."""
        self._meta = meta
        self._queued = queued
        self._idle_at: int | None = None  # `queued()` when a read found nothing pending
        self._last_read = float("-inf")
        self._targets = dict(targets)
        self._settings = settings
        self._clock = clock
        self._adhoc = adhoc
        self._running: set[str] = set()
        self._last_figures = float("-inf")
        self.delivered: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.retried: Counter[str] = Counter()
        self.figures = QueueFigures()

    def target(self, name: str) -> Target | None:
        found = self._targets.get(name)
        if found is None and name.startswith(("http://", "https://")):
            found = self._targets[name] = self._adhoc(name)
        return found

    @property
    def target_names(self) -> list[str]:
        return sorted(self._targets)

    async def tick(self) -> None:
        now = self._clock()
        if self._queue_may_have_changed(now):
            await self._start_runs(now)
            now = self._clock()
        if now - self._last_figures >= FIGURES_SECONDS:
            self._last_figures = now
            self.figures = await self._meta.notification_queue_figures()
            retention = self._settings.event_retention_days * SECONDS_PER_DAY
            await self._meta.notification_purge(now - retention)

    def _queue_may_have_changed(self, now: float) -> bool:
        """False while the last read found nothing pending, nothing was queued since,
        no run is going (a run may put a row back for a retry) and the last read is less
        than FIGURES_SECONDS old."""
        return (self._queued is None or self._idle_at is None or bool(self._running)
                or self._queued() != self._idle_at
                or now - self._last_read >= FIGURES_SECONDS)

    async def _start_runs(self, now: float) -> None:
        queued = None if self._queued is None else self._queued()  # before the read
        self._last_read = now
        pending = await self._meta.notification_pending_targets()
        self._idle_at = queued if not pending and not self._running else None
        for name in pending:
            if name not in self._running:  # started, never awaited here
                self._running.add(name)
                Deferred.fromCoroutine(self._guarded_run(name))

    async def _guarded_run(self, name: str) -> None:
        try:
            await self._run(name)
        except Exception:  # the database out of reach: the next tick tries again
            log.failure("notification delivery to {target} failed", target=name)
        finally:
            self._running.discard(name)

    async def _run(self, name: str) -> None:
        """Deliver the target's due rows in order. Rows delivered at the first attempt are
        marked in one transaction per BATCH (a crash before it delivers them again:
        at-least-once); any other outcome is recorded at once."""
        rows = await self._meta.notification_due(name, self._clock(),
                                                 self._settings.channel_size)
        target = self.target(name)
        done: list[int] = []
        try:
            for row in rows:
                if len(done) >= BATCH:
                    await self._meta.notification_delivered(done, self._clock())
                    done = []
                if not await self._attempt(target, name, row, done):
                    return
        finally:
            await self._meta.notification_delivered(done, self._clock())

    async def _attempt(self, target: Target | None, name: str, row: NotificationEvent,
                       done: list[int]) -> bool:
        """One attempt at `row`; False when the run must stop (the row waits to retry).
        A first-attempt success joins `done`."""
        if target is None:
            await self._record(row, FAILED, f"no target named {name!r} is configured", 0.0)
            self.failed[name] += 1
            return True
        try:
            await target.deliver(event_of(row))
        except DeliveryError as refused:
            error = str(refused) or type(refused).__name__
        except Exception as unexpected:  # a connector's bug must not stop the others
            log.failure("notification target {target} raised", target=name)
            error = f"{type(unexpected).__name__}"
        else:
            if row.attempts == 0:
                done.append(row.id)
            else:
                await self._record(row, DELIVERED, "", 0.0)
            self.delivered[name] += 1
            return True
        attempts = row.attempts + 1
        if attempts > self._settings.max_retries:
            await self._record(row, FAILED, error, 0.0)
            self.failed[name] += 1
            log.warn("notification {id} to {target} FAILED after {n} attempts: {error}",
                     id=row.id, target=name, n=attempts, error=error)
            return True
        delay = retry_delay(attempts, self._settings.retry_base_seconds)
        await self._record(row, PENDING, error, self._clock() + delay)
        self.retried[name] += 1
        return False

    async def _record(self, row: NotificationEvent, status: str, error: str,
                      next_attempt_at: float) -> None:
        await self._meta.notification_attempted(row.id, status, error, next_attempt_at,
                                                self._clock())

    async def close(self) -> None:
        for target in self._targets.values():
            try:
                await target.close()
            except Exception:  # noqa: BLE001 - stopping anyway
                log.failure("closing notification target {target}", target=target.name)


__all__ = ["TICK_SECONDS", "NotificationDelivery", "event_of", "event_time_of", "retry_delay"]
