"""Pure parts of the multi-process node: restart back-off, output relay, the listening
socket, and the node-wide key locks (real processes, no reactor)."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.python.failure import Failure

from objstore.prefork import SINGLE_PROCESS, WorkerRole
from objstore.prefork.range_locks import RangeLocks, slot_of
from objstore.prefork.supervisor import (
    RESTART_DELAY_MAX_SECONDS,
    RESTART_DELAY_SECONDS,
    STABLE_AFTER_SECONDS,
    LineRelay,
    WorkerSlot,
    listening_socket,
    restart_delay,
    young_deaths,
)


def test_restart_back_off_doubles_while_a_worker_dies_young_and_resets_after() -> None:
    deaths = young_deaths(0, 0.1)
    assert restart_delay(deaths) == RESTART_DELAY_SECONDS
    delays = []
    for _ in range(20):
        deaths = young_deaths(deaths, 0.1)
        delays.append(restart_delay(deaths))
    assert delays[:3] == [2 * RESTART_DELAY_SECONDS, 4 * RESTART_DELAY_SECONDS,
                          8 * RESTART_DELAY_SECONDS]
    assert delays[-1] == RESTART_DELAY_MAX_SECONDS
    deaths = young_deaths(deaths, STABLE_AFTER_SECONDS)
    assert restart_delay(deaths) == RESTART_DELAY_SECONDS


def test_roles() -> None:
    assert SINGLE_PROCESS.leader and not SINGLE_PROCESS.supervised
    worker = WorkerRole(index=1, listen_fd=5, runtime_dir="/run/x")
    assert worker.supervised and not worker.leader


def test_output_relay_splits_lines_across_chunks_and_reports_the_exit(
        capture_log: list[str]) -> None:
    ended: list[Any] = []
    slot = WorkerSlot(1)
    relay = LineRelay(1, lambda s, reason: ended.append((s, reason)), slot)
    relay.childDataReceived(1, b"[worker 1] first li")
    relay.childDataReceived(1, b"ne\n[worker 1] second\n[worker 1] tail")
    relay.childDataReceived(2, b"Traceback (most recent call last):\n")
    relay.processEnded(Failure(RuntimeError("gone")))
    assert capture_log == ["[worker 1] first line", "[worker 1] second",
                           "Traceback (most recent call last):", "[worker 1] tail"]
    assert ended and ended[0][0] is slot


@pytest.fixture
def capture_log() -> Any:
    from twisted.logger import ILogObserver, globalLogPublisher
    from zope.interface import provider

    lines: list[str] = []

    @provider(ILogObserver)
    def observer(event: dict[str, Any]) -> None:
        if event.get("log_namespace") == "objstore.prefork.supervisor":
            lines.append(event["text"])

    globalLogPublisher.addObserver(observer)
    yield lines
    globalLogPublisher.removeObserver(observer)


def test_listening_socket_is_non_blocking_and_refuses_a_port_in_use() -> None:
    sock = listening_socket("127.0.0.1", 0)
    try:
        assert sock.getblocking() is False
        with pytest.raises(OSError):
            listening_socket("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))


def test_slots_are_stable_across_processes() -> None:
    assert slot_of("bucket", "key") == slot_of("bucket", "key")
    assert slot_of("bucket", "key") != slot_of("bucket", "key2")


def _hold(path: str, slot: int, held: Any, release: Any) -> None:
    locks = RangeLocks(path)
    assert locks._try_lock(slot)
    held.set()
    release.wait(30)


def test_a_slot_held_by_another_process_waits_without_blocking(tmp_path: Path) -> None:
    path = str(tmp_path / "key-locks")
    slot = slot_of("b", "k")
    held, release = multiprocessing.Event(), multiprocessing.Event()
    other = multiprocessing.Process(target=_hold, args=(path, slot, held, release))
    other.start()
    try:
        assert held.wait(30)
        clock = task.Clock()
        locks = RangeLocks(path, clock, poll_seconds=0.01)
        acquired = defer.Deferred.fromCoroutine(locks.acquire(slot))
        clock.advance(0.05)
        assert not acquired.called  # polling on the clock, the reactor thread stays free
        release.set()
        other.join(30)
        for _ in range(100):
            clock.advance(0.01)
            if acquired.called:
                break
        assert acquired.called
        other_slot = slot_of("b", "other")
        defer.Deferred.fromCoroutine(locks.acquire(other_slot))
        locks.release(slot)
        locks.release(other_slot)
        assert locks._held == {}
    finally:
        release.set()
        other.join(30)


def test_coroutines_of_one_process_share_a_slot_until_the_last_lets_go(tmp_path: Path) -> None:
    path = str(tmp_path / "key-locks")
    locks = RangeLocks(path, task.Clock())
    slot = 7
    for _ in range(2):
        defer.Deferred.fromCoroutine(locks.acquire(slot))
    locks.release(slot)
    assert locks._held == {slot: 1}  # still locked for the other holder
    locks.release(slot)
    assert locks._held == {}


def test_settle_heap_moves_the_start_up_heap_out_of_the_collector() -> None:
    # In a fresh interpreter: a frozen heap is never collected, which the test process's
    # own objects should not be.
    script = ("import gc\nfrom objstore.service import settle_heap\n"
              "assert gc.get_freeze_count() == 0\nsettle_heap()\n"
              "print(gc.get_freeze_count(), sum(gc.get_count()))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    frozen, young = int(out[0]), int(out[1])
    assert frozen > 10_000  # the imported modules of the whole node
    assert young < 100
