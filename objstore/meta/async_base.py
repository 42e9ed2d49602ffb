"""What every Deferred-returning query mixin of `MetaStore` relies on: the synchronous store
and the `_read`/`_write` helpers that `MetaStore` provides (reader/writer pool, retries).
Declared once here for the type checker; the mixins add only their query methods."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from objstore.meta.store import SyncMetaStore

_P = ParamSpec("_P")
_R = TypeVar("_R")


class AsyncQueryMixin:
    if TYPE_CHECKING:
        _store: SyncMetaStore

        def _read(
            self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
        ) -> Deferred[_R]: ...

        def _write(
            self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
        ) -> Deferred[_R]: ...
