"""The durable outbox: what a consumer (bucket notifications, the replication journal) must
get of the node's object changes, delivered from the `outbox` table with a cursor per
consumer (meta/outbox_queries.py writes the entry in the change's own transaction).

`OutboxDelivery` owns both ends. The engine's object writes ask it for the note of their
entry (`note`): None while no consumer is registered (nothing is written: the hot path
stays as it was), for a change of origin `peer` (an applied row is never sent on) and for
a bucket no consumer is interested in (`engine/outbox_interest.py`: a bucket without a
notification or replication document; the note then only asks the write's transaction
to look again if a configuration changed meanwhile);
for a client's write past the bound (`[outbox] max_backlog` undelivered entries) it raises
503 SlowDown, which clients retry after Retry-After: the write is refused before anything
changes rather than an event dropped (SlowDown and not ServiceUnavailable: the node is up,
the client must back off, and SDKs retry SlowDown with backoff). Background work
(lifecycle) is never refused.

`tick` (on a timer, clock injected): for each consumer, the page after its cursor is handed
to `Consumer.deliver`; the cursor moves past the page only once it returned (at-least-once:
a crash or a failure before then delivers the page again), and while pages come full the
next one follows, up to `pages_per_tick` pages (one page a tick capped a consumer at
PAGE_SIZE / TICK_SECONDS = 400 entries a second, below the node's small-PUT rate, so the
backlog grew under a sustained load until writes were refused); a failure retries with
exponential backoff. Then the entries every consumer has passed are purged and the backlog
is counted (`backlog`, the gauge `objstore_outbox_backlog`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

from twisted.internet import threads
from twisted.logger import Logger

from objstore.engine.changes import Caller, ChangeKind, Origin
from objstore.engine.outbox_interest import BucketInterest
from objstore.errors import S3Error
from objstore.meta.async_store import MetaStore
from objstore.meta.outbox_queries import OutboxEntry, OutboxNote

log = Logger()

PAGE_SIZE = 200
PAGES_PER_TICK = 25  # at most 5,000 entries per consumer per tick (10,000 a second)
RETRY_BASE_SECONDS = 1.0
RETRY_MAX_SECONDS = 300.0
TICK_SECONDS = 0.5
# The test-only consumer (tests/integration/test_outbox.py): set to a file path, every
# delivered entry is appended to it as a JSON line. Never set it in production.
TEST_CONSUMER_ENV = "OBJSTORE_TEST_OUTBOX_FILE"


class Consumer(Protocol):
    """A consumer of the outbox: `name` keys its cursor (stable across restarts)."""

    name: str

    async def deliver(self, entries: Sequence[OutboxEntry]) -> None:
        """Deliver `entries` (commit order, possibly again after a crash or failure);
        returning acknowledges them all, raising has them delivered again later."""


@dataclass
class _State:
    failures: int = 0
    retry_at: float = 0.0


def backoff(failures: int, base: float = RETRY_BASE_SECONDS,
            cap: float = RETRY_MAX_SECONDS) -> float:
    """Seconds before the next attempt after `failures` failures in a row."""
    return min(cap, base * 2.0 ** max(0, failures - 1))


class OutboxDelivery:
    def __init__(self, meta: MetaStore, *, clock: Callable[[], float], max_backlog: int,
                 consumers: Sequence[Consumer] = (), page_size: int = PAGE_SIZE,
                 pages_per_tick: int = PAGES_PER_TICK,
                 interest: BucketInterest | None = None) -> None:
        """`consumers` given here get every bucket's changes; `interest` (None: every
        bucket is of interest) judges buckets for those `register`ed with documents."""
        self._meta = meta
        self._interest = interest
        self._every_bucket = bool(consumers) or interest is None
        self._clock = clock
        self._max_backlog = max_backlog
        self._consumers = list(consumers)
        self._states = {c.name: _State() for c in self._consumers}
        self._page_size = page_size
        self._pages_per_tick = max(1, pages_per_tick)
        self.backlog = 0
        self.delivered = 0

    def register(self, consumer: Consumer, documents: Sequence[str] | None = None) -> None:
        """Add `consumer`; `documents`: the bucket configuration documents without which
        a bucket's changes do not concern it (None: every bucket's do)."""
        self._consumers.append(consumer)
        self._states[consumer.name] = _State()
        if documents is None or self._interest is None:
            self._every_bucket = True
        else:
            self._interest.watch(documents)

    @property
    def active(self) -> bool:
        return bool(self._consumers)

    async def note(self, caller: Caller, kind: ChangeKind, bucket: str) -> OutboxNote | None:
        """The note of a change's outbox entry in `bucket`, None when it needs none;
        raises SlowDown for a client's write while the backlog is past the bound."""
        if not self._consumers or caller.origin is Origin.PEER:
            return None
        documents: tuple[str, ...] = ()
        stale = None
        if not self._every_bucket:
            assert self._interest is not None
            judgement = await self._interest.judge(bucket)
            if not judgement.interested:
                documents, stale = self._interest.documents, judgement.stale
        if stale is None and caller.from_client and self.backlog >= self._max_backlog:
            raise S3Error("SlowDown", "The event outbox is full; retry later.")
        return OutboxNote(kind.value, caller.operation, caller.principal.user_id,
                          caller.source_address, caller.request_id, stale=stale,
                          documents=documents)

    async def refresh(self) -> None:
        """Count the backlog (every worker: the bound its writes check)."""
        if self._consumers:
            self.backlog = await self._meta.outbox_backlog([c.name for c in self._consumers])

    async def tick(self) -> None:
        names = [c.name for c in self._consumers]
        if not names:
            return
        before = self.delivered
        for consumer in self._consumers:
            await self._deliver(consumer)
        if self.delivered != before:  # a cursor moved: what all passed can go
            await self._meta.outbox_purge(names)
        self.backlog = await self._meta.outbox_backlog(names)

    async def _deliver(self, consumer: Consumer) -> None:
        state = self._states[consumer.name]
        if self._clock() < state.retry_at:
            return
        cursor = await self._meta.outbox_cursor(consumer.name)
        for _ in range(self._pages_per_tick):
            page = await self._meta.outbox_read_after(cursor, self._page_size)
            if not page.entries:
                return
            try:
                await consumer.deliver(page.entries)
            except Exception as error:  # a target down is expected: a warning, then retries
                state.failures += 1
                delay = backoff(state.failures)
                state.retry_at = self._clock() + delay
                log.warn("outbox consumer {name} failed ({failures} in a row), retrying in "
                         "{delay:g} s: {error!r}", name=consumer.name,
                         failures=state.failures, delay=delay, error=error)
                return
            state.failures, state.retry_at = 0, 0.0
            cursor = page.entries[-1].seq
            await self._meta.outbox_advance(consumer.name, cursor)
            self.delivered += len(page.entries)
            if len(page.entries) < self._page_size:
                return


class FileConsumer:
    """TEST ONLY (enabled by OBJSTORE_TEST_OUTBOX_FILE): appends each delivered entry to a
    file as a JSON line, flushed and fsynced before acknowledging."""

    name = "test-file"

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    async def deliver(self, entries: Sequence[OutboxEntry]) -> None:
        lines = "".join(json.dumps({"seq": e.seq, "kind": e.kind, "bucket": e.bucket,
                                    "key": e.key, "version_id": e.version_id,
                                    "size": e.size, "etag": e.etag}) + "\n"
                        for e in entries)
        await threads.deferToThread(self._append, lines)

    def _append(self, lines: str) -> None:
        with self._path.open("a", encoding="utf-8") as out:
            out.write(lines)
            out.flush()
            os.fsync(out.fileno())


def env_consumers(environ: Mapping[str, str]) -> list[Consumer]:
    """The consumers registered from the environment: the TEST-ONLY file consumer when
    OBJSTORE_TEST_OUTBOX_FILE names a file; none otherwise (the default)."""
    path = environ.get(TEST_CONSUMER_ENV, "")
    return [FileConsumer(path)] if path else []


class OutboxKeyword(TypedDict, total=False):
    outbox: OutboxNote


async def note_for(outbox: OutboxDelivery | None, caller: Caller, kind: ChangeKind,
                   bucket: str) -> OutboxKeyword:
    """The keyword (`outbox=`) of a write query in `bucket` that leaves the change's
    entry; empty when it leaves none (no outbox, no consumer, a peer's change): that
    write runs exactly as it did before the outbox existed."""
    note = None if outbox is None else await outbox.note(caller, kind, bucket)
    return OutboxKeyword() if note is None else OutboxKeyword(outbox=note)


__all__ = ["PAGES_PER_TICK", "PAGE_SIZE", "TEST_CONSUMER_ENV", "Consumer", "FileConsumer",
           "OutboxDelivery", "OutboxKeyword", "backoff", "env_consumers", "note_for"]
