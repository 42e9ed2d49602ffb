"""SQLAlchemy's own log records in the node's log, one line each.

SQLAlchemy logs through the standard `logging` module, which the daemon does not
configure, so its records went to `logging.lastResort`: stderr, with their tracebacks.
One of them is expected in an outage: a pooled connection returned after the PostgreSQL
server went away fails its reset (`ROLLBACK`), and the pool logs "Exception during reset
or similar" with the driver's traceback at ERROR before it drops the connection. The
requests of that outage are answered 503 by the engine's own handling; the log should say
what happened once, not show a traceback an operator would take for a crash.
`route_sqlalchemy_logs` sends the `sqlalchemy` loggers' records of WARNING and above to
the Twisted log as warnings: the message and the exception's first line.
"""

from __future__ import annotations

import logging

from twisted.logger import Logger

log = Logger(namespace="sqlalchemy")


def one_line(record: logging.LogRecord) -> str:
    """The record's message and, when it carries one, its exception's type and first
    line (no traceback)."""
    text = record.getMessage()
    error = record.exc_info[1] if record.exc_info else None
    if error is not None:
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
        text += f" ({type(error).__name__}{': ' + first if first else ''})"
    return text


class _ToTwistedLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            log.warn("{text}", text=one_line(record))
        except Exception:  # a handler must not raise into the code that logged
            self.handleError(record)


def route_sqlalchemy_logs() -> None:
    """Route the `sqlalchemy` loggers' records (WARNING and above) to the Twisted log;
    done once per process (calling it again changes nothing)."""
    logger = logging.getLogger("sqlalchemy")
    if not any(isinstance(handler, _ToTwistedLog) for handler in logger.handlers):
        logger.addHandler(_ToTwistedLog(logging.WARNING))
    logger.propagate = False  # not to the root logger and its last resort (stderr)
