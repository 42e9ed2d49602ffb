"""Coalescer (engine/coalesce.py): a call alone runs at once; calls made while a batch
runs make the next batch, in order; each item gets its own outcome; a batch that raises
fails its items only. Driven by hand-fired Deferreds: no reactor, no clock."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred

from objstore.engine.coalesce import Coalescer


class Steps:
    """A batch step whose batches the test finishes by hand."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.pending: list[Deferred[list[Any]]] = []

    async def run(self, items: list[int]) -> list[Any]:
        self.batches.append(list(items))
        done: Deferred[list[Any]] = Deferred()
        self.pending.append(done)
        return await done

    def finish(self, outcomes: list[Any]) -> None:
        self.pending.pop(0).callback(outcomes)


def outcome(d: Deferred[Any]) -> Any:
    seen: list[Any] = []
    d.addBoth(seen.append)
    assert seen, "not delivered"
    return seen[0]


def test_a_call_alone_runs_at_once() -> None:
    steps = Steps()
    coalescer: Coalescer[int, str] = Coalescer(steps.run)
    first = coalescer.submit(1)
    assert steps.batches == [[1]]
    steps.finish(["one"])
    assert outcome(first) == "one"


def test_calls_made_while_a_batch_runs_make_the_next_batch() -> None:
    steps = Steps()
    coalescer: Coalescer[int, int] = Coalescer(steps.run)
    results = [coalescer.submit(n) for n in (1, 2, 3, 4)]
    assert steps.batches == [[1]]
    steps.finish([10])
    assert steps.batches == [[1], [2, 3, 4]]
    assert outcome(results[0]) == 10
    later = coalescer.submit(5)
    steps.finish([20, 30, 40])
    assert [outcome(d) for d in results[1:]] == [20, 30, 40]
    assert steps.batches[-1] == [5]
    steps.finish([50])
    assert outcome(later) == 50
    assert (coalescer.batches, coalescer.items) == (3, 5)


def test_a_call_made_while_outcomes_are_delivered_waits_for_them_all() -> None:
    steps = Steps()
    coalescer: Coalescer[int, int] = Coalescer(steps.run)
    coalescer.submit(0)
    firsts = [coalescer.submit(n) for n in (1, 2)]
    firsts[0].addCallback(lambda _: coalescer.submit(3))
    steps.finish([0])
    steps.finish([1, 2])
    assert steps.batches == [[0], [1, 2], [3]]


def test_each_item_gets_its_own_error() -> None:
    steps = Steps()
    coalescer: Coalescer[int, int] = Coalescer(steps.run)
    coalescer.submit(0)
    good, bad = coalescer.submit(1), coalescer.submit(2)
    steps.finish([0])
    steps.finish([1, KeyError("two")])
    assert outcome(good) == 1
    failure = outcome(bad)
    assert failure.check(KeyError)


@pytest.mark.parametrize("outcomes", [ValueError("the batch broke"), [1]])
def test_a_failed_batch_fails_each_of_its_items_and_the_next_runs(outcomes: Any) -> None:
    steps = Steps()
    coalescer: Coalescer[int, int] = Coalescer(steps.run)
    coalescer.submit(0)
    items = [coalescer.submit(n) for n in (1, 2)]
    after = []
    steps.finish([0])
    if isinstance(outcomes, Exception):
        steps.pending.pop(0).errback(outcomes)
    else:
        steps.finish(outcomes)  # one outcome for two items
    for each in items:
        assert outcome(each).check(ValueError, AssertionError)
    after.append(coalescer.submit(3))
    assert steps.batches[-1] == [3]


def test_a_batch_holds_at_most_max_items() -> None:
    steps = Steps()
    coalescer: Coalescer[int, int] = Coalescer(steps.run, max_items=2)
    for n in range(5):
        coalescer.submit(n)
    steps.finish([0])
    steps.finish([1, 2])
    steps.finish([3, 4])
    assert steps.batches == [[0], [1, 2], [3, 4]]


def test_a_cancelled_call_does_not_stop_the_coalescer() -> None:
    """A caller that gives up (its Deferred cancelled) is skipped when its batch's
    outcomes are delivered; the others get theirs and the next batch runs."""
    steps = Steps()
    coalescer: Coalescer[int, int] = Coalescer(steps.run)
    first = coalescer.submit(1)
    given_up, kept = coalescer.submit(2), coalescer.submit(3)
    given_up.cancel()
    given_up.addErrback(lambda failure: None)
    steps.finish([10])
    steps.finish([20, 30])
    assert outcome(first) == 10 and outcome(kept) == 30
    after = coalescer.submit(4)
    assert steps.batches[-1] == [4]
    steps.finish([40])
    assert outcome(after) == 40


def test_a_weight_bound_splits_the_waiting_calls_but_never_refuses_one() -> None:
    steps = Steps()
    coalescer: Coalescer[int, Any] = Coalescer(steps.run, max_items=10,
                                               weigh=lambda item: item, max_weight=10)
    first = coalescer.submit(1)
    waiting = [coalescer.submit(item) for item in (4, 5, 2, 30, 3)]
    assert steps.batches == [[1]]
    steps.finish(["a"])
    assert outcome(first) == "a"
    assert steps.batches[1] == [4, 5]  # 4 + 5 + 2 would weigh 11
    steps.finish(["b", "c"])
    assert steps.batches[2] == [2]  # 2 + 30 is over the bound
    steps.finish(["d"])
    assert steps.batches[3] == [30]  # heavier than the bound alone: a batch of its own
    steps.finish(["e"])
    assert steps.batches[4] == [3]
    steps.finish(["f"])
    assert [outcome(d) for d in waiting] == ["b", "c", "d", "e", "f"]
