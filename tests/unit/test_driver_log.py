"""SQLAlchemy's log records reach the node's log as one line, never a traceback on stderr
(objstore/meta/driver_log.py): the pool's "Exception during reset or similar" when a
PostgreSQL server went away between a statement and the connection's return."""

from __future__ import annotations

import logging

import pytest
from twisted.logger import LogEvent, formatEvent, globalLogPublisher

from objstore.meta.driver_log import one_line, route_sqlalchemy_logs


def test_a_pool_error_with_its_traceback_is_one_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    events: list[LogEvent] = []
    globalLogPublisher.addObserver(events.append)
    try:
        route_sqlalchemy_logs()
        route_sqlalchemy_logs()  # once per process is enough; twice changes nothing
        try:
            raise ConnectionError("server closed the connection unexpectedly\n"
                                  "\tThis probably means the server terminated abnormally")
        except ConnectionError:
            logging.getLogger("sqlalchemy.pool.impl.QueuePool").error(
                "Exception during reset or similar", exc_info=True)
        logging.getLogger("sqlalchemy.engine.Engine").info("BEGIN (implicit)")  # below
    finally:
        globalLogPublisher.removeObserver(events.append)
    ours = [formatEvent(e) for e in events if e.get("log_namespace") == "sqlalchemy"]
    assert ours == ["Exception during reset or similar (ConnectionError: server closed "
                    "the connection unexpectedly)"]
    assert "Traceback" not in capsys.readouterr().err


def test_one_line_without_an_exception() -> None:
    record = logging.LogRecord("sqlalchemy.pool", logging.WARNING, __file__, 1,
                               "pool %s is full", ("q",), None)
    assert one_line(record) == "pool q is full"
