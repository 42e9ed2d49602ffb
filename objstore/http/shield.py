"""Letting request work finish after the client has gone.

Klein cancels a handler's Deferred when the client disconnects. Cancelling a write half-way
would leave a blob whose metadata row may or may not have been committed in its thread, so
every S3 request runs shielded: the client's departure ends the wait, never the work.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from inspect import iscoroutine
from typing import Any, TypeVar

from klein import Klein
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.errors import S3Error

T = TypeVar("T")
log = Logger()


async def shielded(
    work: Coroutine[Any, Any, T] | Deferred[T],
    hold: Callable[[], Callable[[], None]] | None = None,
) -> T:
    """Await `work`; if this await is cancelled, `work` still runs to its end (its
    unexpected failures are logged, its S3 errors dropped: nobody is left to tell).
    `hold` (ObjstoreSite.hold) keeps a drain waiting until the work is done."""
    release = hold() if hold is not None else None
    inner: Deferred[T] = ensureDeferred(work)
    outer: Deferred[T] = Deferred()

    def forward(result: T | Failure) -> None:
        if release is not None:
            release()
        if not outer.called:
            outer.callback(result)
        elif isinstance(result, Failure) and not result.check(S3Error):
            log.failure("request work failed after its client left", result)

    inner.addBoth(forward)
    return await outer


def client_gone(request: Any) -> bool:
    """True once the connection of `request` was lost."""
    return bool(getattr(request, "_disconnected", False)) or request.channel is None


class ShieldedKlein(Klein):
    """A Klein app whose coroutine handlers run shielded (the admin APIs that change
    state: an IAM change whose client leaves still commits, writes its control record and
    invalidates every worker's caches). Klein binds a copy of the app per instance with
    `self.__class__()`, so the subclass survives binding."""

    def execute_endpoint(self, endpoint: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        # Klein has already wrapped a coroutine handler's result in a Deferred.
        result = super().execute_endpoint(endpoint, request, *args, **kwargs)
        if not isinstance(result, Deferred) and not iscoroutine(result):
            return result
        site = getattr(request, "objstore_site", None)
        return ensureDeferred(shielded(result, site.hold if site is not None else None))
