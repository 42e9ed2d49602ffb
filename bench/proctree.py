"""The daemon as a tree of processes: its memory and I/O, read from /proc while it runs.

objstore runs as a supervisor (twistd) and one worker process per CPU, so "the daemon's
memory" is a sum over a process tree. This module owns finding that tree
(/proc/PID/task/TID/children, recursively), reading each member's resident set
(/proc/PID/status), open file descriptors (/proc/PID/fd) and I/O counters
(/proc/PID/io), and sampling them from a thread. The parsing is pure (text in, numbers
out) so that it is unit-tested. It only reads /proc: it never signals or otherwise touches
the processes it watches.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench.servers import parse_proc_stat

MB = 1000**2  # the memory target is in MB; RSS is reported in MB (10^6 bytes)
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")
ROLLUP_FIELDS = ("Pss",)  # from smaps_rollup: shared pages divided among their sharers
FIELDS = STATUS_FIELDS + ROLLUP_FIELDS


# -- parsing (pure) ---------------------------------------------------------------------


def parse_children(text: str) -> list[int]:
    """The pids in /proc/PID/task/TID/children: space-separated, maybe a trailing space."""
    return [int(word) for word in text.split()]


def parse_status_memory(text: str, fields: tuple[str, ...] = STATUS_FIELDS
                        ) -> dict[str, int]:
    """`fields` in bytes from /proc/PID/status or /proc/PID/smaps_rollup ("Name: N kB"
    lines). A zombie or kernel thread has none of them: every value is then 0."""
    found = dict.fromkeys(fields, 0)
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in found:
            words = rest.split()
            found[name] = int(words[0]) * 1024 if words else 0
    return found


def parse_io(text: str) -> dict[str, int]:
    """The counters of /proc/PID/io (rchar, wchar, read_bytes, write_bytes, ...)."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if value.strip().isdigit():
            counters[name.strip()] = int(value)
    return counters


def process_tree(root: int, children_of: Callable[[int], Iterable[int]]) -> list[int]:
    """`root` and all its descendants, parents before children (a pid listed twice, as a
    re-used pid could be while the tree changes, is kept once)."""
    seen: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop(0)
        if pid in seen:
            continue
        seen.append(pid)
        pending.extend(children_of(pid))
    return seen


def process_label(argv: list[str]) -> str:
    """A short name for a member of the daemon's tree, from its command line."""
    if "--index" in argv:
        position = argv.index("--index") + 1
        if position < len(argv):
            return f"worker {argv[position]}"
    if any(Path(word).name == "twistd" for word in argv[:2]):
        return "supervisor (twistd)"
    return Path(argv[0]).name if argv else "?"


# -- reading /proc ----------------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # the process ended between listing and reading
        return ""


def children(pid: int) -> list[int]:
    """The children of every thread of `pid` (a thread may be the one that forked)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found.extend(parse_children(_read(task / "children")))
        except ValueError:
            continue
    return found


def tree_of(root: int) -> list[int]:
    return process_tree(root, children)


def label_of(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return "?"
    return process_label([word for word in argv.split("\0") if word])


def memory_of(pid: int) -> dict[str, int]:
    return {**parse_status_memory(_read(Path(f"/proc/{pid}/status"))),
            **parse_status_memory(_read(Path(f"/proc/{pid}/smaps_rollup")), ROLLUP_FIELDS)}


def open_fds(pid: int) -> int | None:
    """How many file descriptors `pid` holds open (entries of /proc/PID/fd), or None when
    the process is gone or not ours to look at."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def io_of(root: int) -> dict[str, int]:
    """The I/O counters summed over the tree (a counter a process does not show counts 0)."""
    total: dict[str, int] = {}
    for pid in tree_of(root):
        for name, value in parse_io(_read(Path(f"/proc/{pid}/io"))).items():
            total[name] = total.get(name, 0) + value
    return total


def cpu_seconds_of(root: int) -> float:
    """CPU time used so far by the live members of the tree."""
    ticks = 0
    for pid in tree_of(root):
        try:
            ticks += parse_proc_stat(_read(Path(f"/proc/{pid}/stat")))[1]
        except (ValueError, IndexError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


# -- sampling -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One look at the tree: each member's memory fields (bytes) by pid."""

    seconds: float  # since the sampler started
    members: dict[int, dict[str, int]]

    def total(self, name: str = "VmRSS") -> int:
        return sum(fields.get(name, 0) for fields in self.members.values())


@dataclass
class Peaks:
    """What a series of samples showed: the peak of the total and of each process."""

    samples: int = 0
    total_bytes: int = 0
    total_at_seconds: float = 0.0
    at_peak: dict[str, int] = field(default_factory=dict)  # the fields summed, at the peak
    processes_at_peak: int = 0
    per_process: dict[int, int] = field(default_factory=dict)  # pid -> peak VmRSS
    pss_bytes: int = 0  # the peak of the total PSS (need not be at the same sample)
    labels: dict[int, str] = field(default_factory=dict)
    first_total_bytes: int = 0
    last_total_bytes: int = 0

    def add(self, sample: Sample, labels: dict[int, str]) -> None:
        total = sample.total()
        if self.samples == 0:
            self.first_total_bytes = total
        self.samples += 1
        self.last_total_bytes = total
        if total >= self.total_bytes:
            self.total_bytes = total
            self.total_at_seconds = sample.seconds
            self.at_peak = {name: sample.total(name) for name in FIELDS}
            self.processes_at_peak = len(sample.members)
        self.pss_bytes = max(self.pss_bytes, sample.total("Pss"))
        for pid, fields in sample.members.items():
            self.per_process[pid] = max(self.per_process.get(pid, 0), fields["VmRSS"])
            self.labels.setdefault(pid, labels.get(pid, "?"))


class RssSampler:
    """Samples the total RSS of the tree under `root` every `interval_seconds` in a daemon
    thread, from start() to stop()."""

    def __init__(self, root: int, interval_seconds: float = 0.2) -> None:
        self.root = root
        self.interval_seconds = interval_seconds
        self.peaks = Peaks()
        self._labels: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._started = 0.0

    def sample(self) -> Sample:
        members: dict[int, dict[str, int]] = {}
        for pid in tree_of(self.root):
            if pid not in self._labels:
                self._labels[pid] = label_of(pid)
            members[pid] = memory_of(pid)
        return Sample(time.monotonic() - self._started, members)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.peaks.add(self.sample(), self._labels)
            next_at += self.interval_seconds
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> Peaks:
        self._stop.set()
        self._thread.join(timeout=10)
        self.peaks.add(self.sample(), self._labels)
        return self.peaks
