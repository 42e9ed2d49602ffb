"""Concurrent calls of one step coalesced into batches: one batch in flight at a time.

A single DeleteObject is three hand-offs to a thread (read the version, withdraw its
sidecar, delete its row) and `aws s3 rm --recursive` sends many of them at once. Each
hand-off costs the reactor a Deferred round trip and a wake-up, and a thread the GIL. A
`Coalescer` turns the calls that arrive while a batch runs into the next batch, so a
burst of N deletes costs each step a few hand-offs instead of N, much as group commit
(meta/group_commit.py) shares a COMMIT and the sync barrier (blobs/barrier.py) a sync.
A call alone runs at once, in a batch of one: nothing waits for company.

`run_batch(items)` is an async function run on the reactor; it returns one outcome per
item, in order: a result, or the Exception that item's call raises. When it raises, every
item of the batch fails with that error. A batch holds at most `max_items` items and, given
`weigh`, items of at most `max_weight` in all (a heavier item alone still makes a batch).
State lives on the reactor thread; no timers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.python.failure import Failure

_I = TypeVar("_I")
_R = TypeVar("_R")

BatchRunner = Callable[[list[_I]], Awaitable[Sequence[_R | Exception]]]


class Coalescer(Generic[_I, _R]):
    """Calls of one step, run as batches of at most `max_items` (module notes)."""

    def __init__(self, run_batch: BatchRunner[_I, _R], *, max_items: int = 1000,
                 weigh: Callable[[_I], int] | None = None, max_weight: int = 0) -> None:
        self._run_batch = run_batch
        self._max_items = max_items
        self._weigh = weigh
        self._max_weight = max_weight
        self._waiting: list[tuple[_I, Deferred[_R]]] = []
        self._busy = False
        self.batches = 0  # statistics: batches run, and the items they held
        self.items = 0

    def submit(self, item: _I) -> Deferred[_R]:
        """The outcome of `item`'s call, once its batch has run."""
        done: Deferred[_R] = Deferred()
        self._waiting.append((item, done))
        if not self._busy:
            self._next()
        return done

    def _next(self) -> None:
        while self._waiting and not self._busy:
            count = self._batch_size()
            batch = self._waiting[:count]
            del self._waiting[:count]
            self._busy = True
            self.batches += 1
            self.items += len(batch)
            ensureDeferred(self._run(batch))

    def _batch_size(self) -> int:
        """How many of the waiting calls the next batch takes (at least one)."""
        if self._weigh is None:
            return self._max_items
        weight = count = 0
        for item, _ in self._waiting[:self._max_items]:
            weight += self._weigh(item)
            if count and weight > self._max_weight:
                break
            count += 1
        return count

    async def _run(self, batch: list[tuple[_I, Deferred[_R]]]) -> None:
        outcomes: Sequence[_R | Exception] | Failure
        try:
            outcomes = await self._run_batch([item for item, _ in batch])
            if len(outcomes) != len(batch):
                raise AssertionError(f"{len(outcomes)} outcomes for {len(batch)} items")
        except Exception:  # every item of the batch hears it
            outcomes = Failure()
        try:
            for index, (_, done) in enumerate(batch):
                if done.called:  # its caller cancelled it: nobody takes the outcome
                    continue
                if isinstance(outcomes, Failure):
                    done.errback(outcomes)
                elif isinstance(outcomes[index], Exception):
                    done.errback(Failure(outcomes[index]))
                else:
                    done.callback(outcomes[index])  # type: ignore[arg-type]
        finally:
            self._busy = False  # calls made while the outcomes were delivered: the next
            self._next()  # batch (never stuck busy, whatever a caller's callback did)
