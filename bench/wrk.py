"""Driving wrk: write a paths file, run wrk with bench/paths.lua, parse its summary line.

This module owns the wrk command line and the BENCH_JSON line that paths.lua prints; the
parsing is pure and unit-tested. A run is bounded by wrk's own duration plus a margin, and
wrk is killed if it outlives that or the harness is interrupted.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).with_name("paths.lua")
_JSON_PREFIX = "BENCH_JSON "
_EXHAUSTED = "BENCH_EXHAUSTED"
_MARGIN_SECONDS = 30.0


class WrkError(RuntimeError):
    """wrk is missing, failed, or printed no summary."""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    duration_seconds: float
    bytes_read: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    socket_errors: int  # connect + read + write + timeout
    status_errors: int  # responses with a status of 400 or more

    @property
    def ops_per_second(self) -> float:
        return self.requests / self.duration_seconds if self.duration_seconds > 0 else 0.0

    @property
    def failed(self) -> int:
        return self.socket_errors + self.status_errors


def parse_wrk_output(text: str) -> WrkResult:
    """The WrkResult of the BENCH_JSON line in wrk's standard output."""
    for line in text.splitlines():
        if line.startswith(_JSON_PREFIX):
            fields = json.loads(line[len(_JSON_PREFIX):])
            return WrkResult(
                requests=int(fields["requests"]),
                duration_seconds=fields["duration_us"] / 1e6,
                bytes_read=int(fields["bytes"]),
                p50_ms=fields["p50_us"] / 1e3,
                p99_ms=fields["p99_us"] / 1e3,
                max_ms=fields["max_us"] / 1e3,
                socket_errors=int(sum(fields[f"errors_{kind}"]
                                      for kind in ("connect", "read", "write", "timeout"))),
                status_errors=int(fields["errors_status"]),
            )
    raise WrkError("wrk printed no BENCH_JSON summary:\n" + text[-2000:])


def write_paths(path: Path, lines: Iterable[str]) -> int:
    """One request path (with its query) per line; returns the count."""
    count = 0
    with open(path, "w") as handle:
        for line in lines:
            handle.write(line + "\n")
            count += 1
    return count


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise WrkError("wrk is not installed: apt-get update && apt-get install -y wrk")
    return found


@dataclass(frozen=True)
class WrkRun:
    base_url: str  # http://127.0.0.1:PORT; the Host header every path is signed for
    paths_file: Path
    method: str
    body_file: Path | None
    once: bool  # every path exactly once (new keys), ending early when all are answered
    duration_seconds: int
    connections: int = 32
    threads: int = 1

    @property
    def spare_paths(self) -> int:
        """Paths at the end of a once-mode file that only feed busy connections at the end."""
        return self.connections if self.once else 0

    def command(self) -> list[str]:
        return [
            wrk_binary(), f"-t{self.threads}", f"-c{self.connections}",
            f"-d{self.duration_seconds}s", "--timeout", "10s", "-s", str(SCRIPT),
            self.base_url, "--", str(self.paths_file), self.method,
            str(self.body_file) if self.body_file else "-",
            "once" if self.once else "cycle", str(self.threads), str(self.spare_paths),
        ]


def run_wrk(run: WrkRun) -> WrkResult:
    process = subprocess.Popen(run.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        output = _collect(process, run)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode not in (0, -signal.SIGINT):
        raise WrkError(f"wrk exited with {process.returncode}:\n{output[-2000:]}")
    return parse_wrk_output(output)


def _collect(process: subprocess.Popen[str], run: WrkRun) -> str:
    """wrk's output; SIGINT once every thread has answered all its paths (once mode)."""
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(process, lines), daemon=True)
    reader.start()
    deadline = time.monotonic() + run.duration_seconds + _MARGIN_SECONDS
    seen: list[str] = []
    exhausted = 0
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is None:
            return "".join(seen)
        seen.append(line)
        if line.strip() == _EXHAUSTED:
            exhausted += 1
            if exhausted == run.threads:
                process.send_signal(signal.SIGINT)
    raise WrkError(f"wrk did not finish within {run.duration_seconds + _MARGIN_SECONDS:.0f} s")


def _pump(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line)
    lines.put(None)
