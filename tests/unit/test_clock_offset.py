"""The test-only clock offset (objstore/clock_offset.py): read from the environment, moves
the reactor's `seconds` and the database clock alike, nothing without it."""

from __future__ import annotations

import pytest

from objstore.clock_offset import OFFSET_VARIABLE, clock_offset, shift_reactor, shifted


class FakeReactor:
    def seconds(self) -> float:
        return 1000.0


def test_no_variable_no_offset() -> None:
    assert clock_offset({}) == 0.0
    assert clock_offset({OFFSET_VARIABLE: " "}) == 0.0
    reactor = FakeReactor()
    shift_reactor(reactor, {})
    assert reactor.seconds() == 1000.0


@pytest.mark.parametrize("text, offset", [("-30", -30.0), ("3600.5", 3600.5)])
def test_the_offset_moves_the_reactor_once(text: str, offset: float) -> None:
    environ = {OFFSET_VARIABLE: text}
    assert clock_offset(environ) == offset
    reactor = FakeReactor()
    shift_reactor(reactor, environ)
    shift_reactor(reactor, environ)  # a second call does not move it twice
    assert reactor.seconds() == 1000.0 + offset
    assert shifted(lambda: 10.0, offset)() == 10.0 + offset


@pytest.mark.parametrize("text", ["nan", "inf", "soon"])
def test_a_bad_offset_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        clock_offset({OFFSET_VARIABLE: text})
