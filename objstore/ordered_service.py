"""A MultiService that starts children in order and stops them in reverse order, waiting
for each child's stop to finish before the next begins.

Twisted's MultiService stops all children at once, so thread pools would be shut while the
listener is still draining in-flight requests that need them. A child whose stop takes
longer than SLOW_STOP_SECONDS is logged by name, so that a slow shutdown says where it
waited.
"""

from __future__ import annotations

import time
from typing import Any

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger

log = Logger()

SLOW_STOP_SECONDS = 1.0


class OrderedMultiService(service.MultiService):
    @defer.inlineCallbacks
    def stopService(self) -> Any:  # noqa: N802 (Twisted's name)
        service.Service.stopService(self)
        for child in reversed(list(self)):
            began = time.monotonic()
            yield defer.maybeDeferred(child.stopService)
            took = time.monotonic() - began
            if took > SLOW_STOP_SECONDS:
                log.warn("stopping {child} took {seconds:.1f}s",
                         child=getattr(child, "name", None) or repr(child),
                         seconds=took)
