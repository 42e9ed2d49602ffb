"""The gate a batch delete's row transaction waits at before its COMMIT until the batch's
withdrawal is durable.

A permanent delete's withdrawal must be durable before its rows' COMMIT (blobs/store.py:
otherwise a crash between the two leaves sidecars of deleted versions for `recover` to
bring back). DeleteObjects knows every version it withdraws before its transaction
starts, so it writes the withdrawal (one manifest, blobs/manifests.py) on the IO pool
while its statements run on the database writer, and only the COMMIT waits: the write
and the statements overlap, the order of what becomes durable does not change.

A `WithdrawalGate` holds the withdrawal and runs it once, on whichever thread comes first:
the IO pool's job (`run`, the usual case), or the writer at its COMMIT (`wait`) when the
IO pool has not started the job yet, so that the writer never waits for a job queued
behind others while it holds the database's write lock; it only waits for a withdrawal
already running. `wait` returns once the withdrawal is durable, or raises
`WithdrawalFailed` (the transaction then rolls back), also when a running withdrawal did
not end within `timeout_seconds`. `run` returns the withdrawal's result or raises its
error, whoever ran it. Blocking, thread-safe, no Twisted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_R = TypeVar("_R")

WAIT_SECONDS = 30.0


class WithdrawalFailed(Exception):
    """The withdrawal failed (or did not end in time): the rows must not go."""


class WithdrawalGate(Generic[_R]):
    """One withdrawal, run once by the first thread to claim it (module notes)."""

    def __init__(self, withdraw: Callable[[], _R], *,
                 timeout_seconds: float = WAIT_SECONDS) -> None:
        self._withdraw: Callable[[], _R] | None = withdraw
        self._claim = threading.Lock()
        self._ended = threading.Event()
        self._result: _R | None = None
        self._error: BaseException | None = None
        self._timeout_seconds = timeout_seconds

    def _run_if_unclaimed(self) -> None:
        with self._claim:
            withdraw, self._withdraw = self._withdraw, None
        if withdraw is None:
            return  # another thread runs it (or ran it)
        try:
            self._result = withdraw()
        except BaseException as error:
            self._error = error
        finally:
            self._ended.set()

    def run(self) -> _R | None:
        """(IO pool) The withdrawal's result, run here unless the writer ran it."""
        self._run_if_unclaimed()
        self._ended.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self) -> None:
        """(database writer, before the COMMIT) Return once the withdrawal is durable
        (running it here when no IO thread has started it); WithdrawalFailed when it
        failed or did not end in time."""
        self._run_if_unclaimed()
        if not self._ended.wait(self._timeout_seconds):
            raise WithdrawalFailed("the withdrawal did not end in time")
        if self._error is not None:
            raise WithdrawalFailed("the withdrawal failed") from self._error
