"""The gate a batch delete's row transaction waits at before its COMMIT until the batch's
withdrawal is durable.

A permanent delete's withdrawal must be durable before its rows' COMMIT (blobs/store.py:
otherwise a crash between the two leaves sidecars of deleted versions for `recover` to
bring back). DeleteObjects knows every version it withdraws before its transaction
starts, so it writes the withdrawal (one manifest, blobs/manifests.py) on the IO pool
while its statements run on the database writer, and only the COMMIT waits: the write
and the statements overlap, the order of what becomes durable does not change.

`WithdrawalGate.run` wraps the withdrawal on its IO thread and opens the gate when it
ends (with its error, when it failed); `wait`, on the writer thread right before the
COMMIT, returns once it is open, or raises `WithdrawalFailed` (the transaction then rolls
back). A withdrawal that does not end within `timeout_seconds` also fails the wait, so a
stalled IO pool can not hold the database writer for ever. Blocking, thread-safe, no
Twisted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

_R = TypeVar("_R")

WAIT_SECONDS = 30.0


class WithdrawalFailed(Exception):
    """The withdrawal failed (or did not end in time): the rows must not go."""


class WithdrawalGate:
    """Opened once the withdrawal ended (module notes)."""

    def __init__(self, timeout_seconds: float = WAIT_SECONDS) -> None:
        self._ended = threading.Event()
        self._error: BaseException | None = None
        self._timeout_seconds = timeout_seconds

    def run(self, withdraw: Callable[..., _R], *args: object) -> _R:
        """(IO thread) `withdraw(*args)`, then open the gate."""
        try:
            return withdraw(*args)
        except BaseException as error:
            self._error = error
            raise
        finally:
            self._ended.set()

    def open(self) -> None:
        """Nothing to withdraw: the transaction may commit at once."""
        self._ended.set()

    def wait(self) -> None:
        """(database writer, before the COMMIT) Return once the withdrawal is durable;
        WithdrawalFailed when it failed or did not end in time."""
        if not self._ended.wait(self._timeout_seconds):
            raise WithdrawalFailed("the withdrawal did not end in time")
        if self._error is not None:
            raise WithdrawalFailed("the withdrawal failed") from self._error
