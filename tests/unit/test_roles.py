"""The worker leader's duties: started only while the role is held, taken and given up
while the node runs."""

from __future__ import annotations

from typing import Any

from twisted.application import service
from twisted.internet import defer, task

from objstore.roles import LeaderDuties
from objstore.timers import safe_timer


class Recorder(service.Service):
    def __init__(self, name: str, events: list[str], stop: defer.Deferred[None] | None = None):
        self.setName(name)
        self._events = events
        self._stop = stop

    def startService(self) -> None:  # noqa: N802
        super().startService()
        self._events.append(f"start {self.name}")

    def stopService(self) -> Any:  # noqa: N802
        super().stopService()
        self._events.append(f"stop {self.name}")
        return self._stop


def duties_with(events: list[str], *, held: bool,
                slow_stop: defer.Deferred[None] | None = None) -> LeaderDuties:
    duties = LeaderDuties(held=held)
    Recorder("lifecycle", events, slow_stop).setServiceParent(duties)
    Recorder("history", events).setServiceParent(duties)
    return duties


def test_a_held_role_starts_in_order_and_stops_in_reverse() -> None:
    events: list[str] = []
    duties = duties_with(events, held=True)
    duties.startService()
    assert events == ["start lifecycle", "start history"]
    done = duties.stopService()
    assert events[2:] == ["stop history", "stop lifecycle"]
    assert done.called


def test_a_role_not_held_starts_nothing_until_taken() -> None:
    events: list[str] = []
    duties = duties_with(events, held=False)
    duties.startService()
    assert events == [] and not duties.held
    duties.take()
    assert duties.held and events == ["start lifecycle", "start history"]
    duties.stopService()
    assert events[2:] == ["stop history", "stop lifecycle"]


def test_giving_up_waits_for_each_duty_and_can_be_taken_again() -> None:
    events: list[str] = []
    slow: defer.Deferred[None] = defer.Deferred()
    duties = duties_with(events, held=True, slow_stop=slow)
    duties.startService()
    released = duties.give_up()
    assert not released.called and events[-2:] == ["stop history", "stop lifecycle"]
    taken = duties.take()  # queued behind the give-up in progress
    assert not taken.called
    slow.callback(None)
    assert released.called and taken.called and duties.held
    assert events[-2:] == ["start lifecycle", "start history"]


def test_taking_the_role_while_stopped_only_records_it() -> None:
    events: list[str] = []
    duties = duties_with(events, held=False)
    duties.take()
    assert duties.held and events == []
    duties.startService()
    assert events == ["start lifecycle", "start history"]


def test_a_timer_duty_ticks_again_after_the_role_returns() -> None:
    clock = task.Clock()
    ticks: list[float] = []

    async def tick() -> None:
        ticks.append(clock.seconds())

    duties = LeaderDuties(held=True)
    safe_timer(10, tick, clock=clock, what="purge").setServiceParent(duties)
    duties.startService()
    clock.advance(10)
    assert ticks == [0, 10]
    duties.give_up()
    clock.advance(30)
    assert ticks == [0, 10]
    duties.take()
    clock.advance(10)
    assert ticks == [0, 10, 40, 50]
