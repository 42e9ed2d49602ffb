"""A constant offset on the node's wall clock, FOR TESTS ONLY: the cluster tests start real
daemons with one node's clock moved (30 s behind, an hour ahead) without libfaketime.

`OBJSTORE_TEST_CLOCK_OFFSET_SECONDS` (a float, seconds; unset or empty: no offset) is read
from the environment when a node process is built. With an offset, every clock the node
stamps with is moved by it: the reactor's `seconds` (the engine's clock, the cluster's
clocks, the `time` a node reports to its peers' pings) and the metadata database's clock
(tombstones, `updated_at` of settings and bucket configuration). No stamp comes from SQL's
own clock. Timers keep working: a constant offset moves `seconds()` and every scheduled
call alike. Operators have no use for it; it is not a configuration key on purpose.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

OFFSET_VARIABLE = "OBJSTORE_TEST_CLOCK_OFFSET_SECONDS"


def clock_offset(environ: Mapping[str, str] = os.environ) -> float:
    """The offset the environment asks for (0.0 when none); ValueError for a value that is
    not a finite number of seconds."""
    text = environ.get(OFFSET_VARIABLE, "").strip()
    if not text:
        return 0.0
    offset = float(text)
    if not math.isfinite(offset):
        raise ValueError(f"{OFFSET_VARIABLE} must be a finite number of seconds")
    return offset


def shifted(clock: Callable[[], float], offset: float) -> Callable[[], float]:
    """`clock` moved by `offset` seconds (`clock` itself when the offset is 0)."""
    if not offset:
        return clock
    return lambda: clock() + offset


def wall_clock(environ: Mapping[str, str] = os.environ) -> Callable[[], float]:
    """The node's wall clock: `time.time`, moved by the test offset if any."""
    return shifted(time.time, clock_offset(environ))


def shift_reactor(reactor: Any, environ: Mapping[str, str] = os.environ) -> None:
    """Move `reactor.seconds` by the test offset (nothing without one). Called once, first
    thing when a node process is built, before anything is scheduled on the reactor."""
    offset = clock_offset(environ)
    if offset and not getattr(reactor, "_objstore_clock_shifted", False):
        reactor.seconds = shifted(reactor.seconds, offset)
        reactor._objstore_clock_shifted = True
