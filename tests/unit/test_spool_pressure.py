"""A spool's back-pressure callback (http/site.py `_pressure_of`) pauses and resumes its
request's connection, and holds the request weakly: the spool is the request's attribute,
so a strong reference back made each request's objects a reference cycle."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from objstore.http.site import _pressure_of


class Transport:
    disconnecting = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pauseProducing(self) -> None:  # noqa: N802
        self.calls.append("pause")

    def resumeProducing(self) -> None:  # noqa: N802
        self.calls.append("resume")


class Channel:
    def __init__(self) -> None:
        self.transport = Transport()


class Request:
    def __init__(self) -> None:
        self.channel = Channel()
        self.spool: Any = None


def test_pressure_pauses_and_resumes_the_connection() -> None:
    request = Request()
    pressure = _pressure_of(request)  # type: ignore[arg-type]
    pressure(True)
    pressure(False)
    assert request.channel.transport.calls == ["pause", "resume"]


def test_the_request_is_freed_without_the_collector() -> None:
    request = Request()
    request.spool = _pressure_of(request)  # type: ignore[arg-type]  # as a spool keeps it
    transport = request.channel.transport
    gone = weakref.ref(request)
    gc.disable()
    try:
        del request
        assert gone() is None  # freed by reference counting: no cycle
    finally:
        gc.enable()
    assert transport.calls == []


def test_a_late_call_after_the_request_went_does_nothing() -> None:
    request = Request()
    pressure = _pressure_of(request)  # type: ignore[arg-type]
    transport = request.channel.transport
    del request
    pressure(True)
    assert transport.calls == []
