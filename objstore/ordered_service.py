"""A MultiService that starts children in order and stops them in reverse order, waiting
for each child's stop to finish before the next begins.

Twisted's MultiService stops all children at once, so thread pools would be shut while the
listener is still draining in-flight requests that need them.
"""

from __future__ import annotations

from typing import Any

from twisted.application import service
from twisted.internet import defer


class OrderedMultiService(service.MultiService):
    @defer.inlineCallbacks
    def stopService(self) -> Any:  # noqa: N802 (Twisted's name)
        service.Service.stopService(self)
        for child in reversed(list(self)):
            yield defer.maybeDeferred(child.stopService)
