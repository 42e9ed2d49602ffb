"""The soak's samples and verdict: what one interval of a run measured, whether a run stayed
flat, and its table.

This module owns the rules that decide a soak (bench/soak.py): the readings of the
daemon's process tree, the p50/p99 of the requests that ended in an interval, the thirds a
run is cut into after its warm-up, what "flat" means for RSS, open file descriptors and
p99, and the rows of the table. Everything here is pure (numbers in, numbers out), so that
tests/unit/test_bench_soak.py checks it without a daemon; it never reads /proc or talks to
a server.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.proctree import MB
from bench.report import Row, percentile
from bench.upload import MIB

LARGE_FROM_BYTES = MIB  # a request moving at least this much is a "large" one


# -- what is measured (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """One request: when it ended (seconds since the load started), what it was, its time."""

    at_seconds: float
    kind: str
    large: bool
    ms: float
    ok: bool


@dataclass(frozen=True)
class Reading:
    """One process of the daemon's tree at a sample."""

    pid: int
    label: str
    rss_bytes: int
    fds: int


@dataclass(frozen=True)
class Interval:
    """One sample: the tree at its end, and the requests that ended during it."""

    start_seconds: float
    end_seconds: float
    processes: tuple[Reading, ...]
    requests: int
    failed: int
    p50_ms: float | None  # small requests (see LARGE_FROM_BYTES)
    p99_ms: float | None
    large_p99_ms: float | None

    @property
    def rss_bytes(self) -> int:
        return sum(reading.rss_bytes for reading in self.processes)

    @property
    def fds(self) -> int:
        return sum(reading.fds for reading in self.processes)

    @property
    def requests_per_second(self) -> float:
        seconds = self.end_seconds - self.start_seconds
        return self.requests / seconds if seconds > 0 else 0.0


def readings(pids: Sequence[int], label: Callable[[int], str], rss: Callable[[int], int],
             fds: Callable[[int], int | None]) -> tuple[Reading, ...]:
    """The processes of the tree that were still there to be read (a pid whose fd table is
    gone ended between listing the tree and reading it). Two processes with the same label
    are told apart by their pid."""
    found: list[Reading] = []
    for pid in pids:
        count = fds(pid)
        if count is None:
            continue
        name = label(pid)
        if any(other.label == name for other in found):
            name = f"{name} (pid {pid})"
        found.append(Reading(pid, name, rss(pid), count))
    return tuple(found)


def interval_of(start: float, end: float, processes: tuple[Reading, ...],
                timings: Sequence[Timing]) -> Interval:
    """The sample of [start, end): percentiles of the requests that ended in it (failed
    ones counted, not timed)."""
    inside = [t for t in timings if start <= t.at_seconds < end]
    small = [t.ms for t in inside if t.ok and not t.large]
    large = [t.ms for t in inside if t.ok and t.large]
    return Interval(start, end, processes, len(inside), sum(1 for t in inside if not t.ok),
                    percentile(small, 0.5) if small else None,
                    percentile(small, 0.99) if small else None,
                    percentile(large, 0.99) if large else None)


@dataclass(frozen=True)
class Limits:
    """What "flat" means: the median of the last third of the samples (after the warm-up)
    against the median of the first third. Medians, so that one slow interval (another
    process on the machine) does not decide; thirds, so that a trend shows."""

    warmup_seconds: float
    rss_percent: float = 10.0  # RSS may grow by this much of the first third's ...
    rss_mb: float = 20.0  # ... or by this many MB, whichever is larger
    fd_slack: int = 10  # open file descriptors may grow by this many
    p99_percent: float = 50.0  # p99 of small requests may grow by this much ...
    p99_ms: float = 5.0  # ... plus this many ms (timer and scheduling noise)
    min_samples: int = 2  # per third


def default_warmup_seconds(duration_seconds: float) -> float:
    """A tenth of the run, at most two minutes: caches and pools fill, then it must hold."""
    return min(120.0, duration_seconds / 10)


def thirds(intervals: Sequence[Interval], warmup_seconds: float
           ) -> tuple[list[Interval], list[Interval]]:
    """The first and the last third of the samples that start after the warm-up."""
    measured = [i for i in intervals if i.start_seconds >= warmup_seconds]
    size = len(measured) // 3
    return measured[:size], measured[len(measured) - size:]


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def flat_check(name: str, first: Sequence[float], last: Sequence[float],
               allowed_growth: Callable[[float], float], unit: str, minimum: int) -> Check:
    """Whether the median of `last` stays within `allowed_growth(median of first)` above
    the median of `first` (a fall always passes)."""
    if len(first) < minimum or len(last) < minimum:
        return Check(name, False, f"too few samples ({len(first)} and {len(last)} per third, "
                                  f"{minimum} needed): run longer or sample more often")
    before, after = statistics.median(first), statistics.median(last)
    growth, allowed = after - before, allowed_growth(before)
    verb = "flat" if growth <= allowed else "GROWS"
    return Check(name, growth <= allowed,
                 f"{verb}: {before:,.1f} -> {after:,.1f} {unit} ({growth:+,.1f}; at most "
                 f"+{allowed:,.1f})")


def verdict(intervals: Sequence[Interval], limits: Limits, tracebacks: int) -> list[Check]:
    """Every check of a run; the run passes when all pass."""
    first, last = thirds(intervals, limits.warmup_seconds)
    failed = sum(i.failed for i in intervals)
    requests = sum(i.requests for i in intervals)
    ended = ended_pids(intervals)
    return [
        flat_check("RSS of the daemon's tree", [i.rss_bytes / MB for i in first],
                   [i.rss_bytes / MB for i in last],
                   lambda mb: max(mb * limits.rss_percent / 100, limits.rss_mb), "MB",
                   limits.min_samples),
        flat_check("open file descriptors of the daemon's tree", [i.fds for i in first],
                   [i.fds for i in last], lambda _: limits.fd_slack, "fds",
                   limits.min_samples),
        flat_check("p99 of small requests", _timed(first), _timed(last),
                   lambda ms: ms * limits.p99_percent / 100 + limits.p99_ms, "ms",
                   limits.min_samples),
        Check("failed requests", failed == 0, f"{failed} of {requests:,}"),
        Check("tracebacks in the daemon's log", tracebacks == 0, str(tracebacks)),
        Check("daemon processes that ended", not ended,
              ", ".join(str(pid) for pid in ended) or "none"),
    ]


def _timed(intervals: Sequence[Interval]) -> list[float]:
    return [i.p99_ms for i in intervals if i.p99_ms is not None]


def ended_pids(intervals: Sequence[Interval]) -> list[int]:
    """Pids seen in one sample and missing from a later one: a worker that crashed (and
    was restarted under a new pid) or a supervisor that went away. Pids that appear later
    are start-up, not a failure."""
    seen: set[int] = set()
    ended: set[int] = set()
    for interval in intervals:
        now = {reading.pid for reading in interval.processes}
        ended |= seen - now
        seen |= now
    return sorted(ended)


def count_tracebacks(log_text: str) -> int:
    return log_text.count("Traceback (most recent call last)")


# -- the table (pure) ------------------------------------------------------------------------


def summary_rows(intervals: Sequence[Interval], timings: Sequence[Timing], limits: Limits,
                 checks: Sequence[Check]) -> list[Row]:
    """Last third beside first third: the checked figures, each process, each request kind."""
    first, last = thirds(intervals, limits.warmup_seconds)
    detail = {check.name: check.detail for check in checks}

    def row(name: str, unit: str, value: Callable[[Interval], float | None],
            note: str = "") -> Row:
        def third(part: list[Interval]) -> float | None:
            return _median([v for v in map(value, part) if v is not None])
        return Row(name, unit, third(last), third(first), note)

    rows = [
        row("total RSS of the daemon (median of the samples)", "MB",
            lambda i: i.rss_bytes / MB, detail["RSS of the daemon's tree"]),
        row("open file descriptors of the daemon (median)", "fds", lambda i: i.fds,
            detail["open file descriptors of the daemon's tree"]),
        row("p99 of small requests (median of the intervals)", "ms", lambda i: i.p99_ms,
            detail["p99 of small requests"]),
        row("p50 of small requests (median of the intervals)", "ms", lambda i: i.p50_ms),
        row("p99 of large transfers (median of the intervals)", "ms",
            lambda i: i.large_p99_ms, f"{LARGE_FROM_BYTES // MIB} MiB or more"),
        row("requests answered", "req/s", lambda i: i.requests_per_second),
    ]
    for label in _labels(intervals):
        rows += [row(f"RSS, {label}", "MB", _of(label, "rss_bytes", MB)),
                 row(f"open fds, {label}", "fds", _of(label, "fds"))]
    rows += kind_rows(timings, first, last)
    return rows


def _labels(intervals: Sequence[Interval]) -> list[str]:
    labels: dict[str, None] = {}
    for interval in intervals:
        labels.update(dict.fromkeys(reading.label for reading in interval.processes))
    return sorted(labels)


def _of(label: str, name: str, scale: float = 1) -> Callable[[Interval], float | None]:
    """The `name` figure of the process called `label` in a sample (None: not in it)."""
    def value(interval: Interval) -> float | None:
        found = [getattr(r, name) for r in interval.processes if r.label == label]
        return sum(found) / scale if found else None
    return value


def kind_rows(timings: Sequence[Timing], first: Sequence[Interval],
              last: Sequence[Interval]) -> list[Row]:
    """p99 of each kind of request, over all requests of the first and of the last third."""
    if not first or not last:
        return []
    spans = {"first": (first[0].start_seconds, first[-1].end_seconds),
             "last": (last[0].start_seconds, last[-1].end_seconds)}
    rows = []
    for kind in sorted({t.kind for t in timings}):
        of_kind = {name: [t.ms for t in timings if t.kind == kind and t.ok
                          and start <= t.at_seconds < end]
                   for name, (start, end) in spans.items()}
        p99 = {name: percentile(ms, 0.99) if ms else None for name, ms in of_kind.items()}
        p50 = {name: percentile(ms, 0.5) if ms else None for name, ms in of_kind.items()}
        rows.append(Row(f"{kind}, p99", "ms", p99["last"], p99["first"],
                        f"{len(of_kind['first'])} -> {len(of_kind['last'])} requests; "
                        f"p50 {_ms(p50['first'])} -> {_ms(p50['last'])} ms"))
    return rows


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def interval_line(interval: Interval) -> str:
    """One line per sample, printed as it is taken and kept in --out."""
    processes = ", ".join(f"{r.label} {r.rss_bytes / MB:.0f} MB/{r.fds} fds"
                          for r in interval.processes)
    return (f"| {interval.end_seconds:.0f} | {interval.requests_per_second:.1f} | "
            f"{interval.failed} | {_ms(interval.p50_ms)} | {_ms(interval.p99_ms)} | "
            f"{_ms(interval.large_p99_ms)} | {interval.rss_bytes / MB:.0f} | {interval.fds} | "
            f"{processes} |")


SERIES_HEADER = ("| t (s) | req/s | failed | p50 ms | p99 ms | large p99 ms | RSS MB | fds | "
                 "processes |\n|--:|--:|--:|--:|--:|--:|--:|--:|---|")
