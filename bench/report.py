"""The one results table and the description of the machine it was measured on.

Pure functions (formatting, ratios, percentiles, /proc parsing) so that they are unit-tested;
the only I/O is reading /proc and asking git for the commit, both read-only.
"""

from __future__ import annotations

import datetime
import math
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    workload: str
    unit: str  # "ops/s", "MiB/s", "ms"
    objstore: float | None
    baseline: float | None = None
    note: str = ""
    peer: float | None = None  # a peer S3 server in the same run (moto), when measured
    rgw: float | None = None  # Ceph RGW in the same run, when measured (--rgw)

    @property
    def ratio(self) -> float | None:
        """objstore / baseline: above 1 is better for rates, worse for latencies."""
        return _over(self.objstore, self.baseline)

    @property
    def peer_ratio(self) -> float | None:
        """objstore / peer, read like `ratio`."""
        return _over(self.objstore, self.peer)

    @property
    def rgw_ratio(self) -> float | None:
        """objstore / RGW, read like `ratio`."""
        return _over(self.objstore, self.rgw)


def _over(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or not theirs:
        return None
    return ours / theirs


def format_value(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "—"
    if unit == "ms":
        return f"{value:.2f}" if value < 100 else f"{value:.0f}"
    return f"{value:,.0f}"


def format_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    return f"{ratio:.2f}" if ratio < 10 else f"{ratio:.1f}"


def format_table(rows: Sequence[Row], baseline_name: str = "nginx",
                 measured_name: str = "objstore", peer_name: str = "moto",
                 rgw_name: str = "rgw") -> str:
    """A markdown table: workload, unit, objstore (or `measured_name`), baseline, ratio,
    note. When any row has a peer figure (moto, RGW), the ratios come first: objstore / each
    peer that was measured, then objstore / baseline, then the figures."""
    peers = [(name, value, ratio) for name, value, ratio in (
        (peer_name, lambda row: row.peer, lambda row: row.peer_ratio),
        (rgw_name, lambda row: row.rgw, lambda row: row.rgw_ratio),
    ) if any(value(row) is not None for row in rows)]
    if peers:
        names = [name for name, _, _ in peers]
        lines = [
            "| workload | unit | " + "".join(f"{measured_name} / {name} | " for name in names)
            + f"{measured_name} / {baseline_name} | {measured_name} | "
            + "".join(f"{name} | " for name in names) + f"{baseline_name} | note |",
            "|---|---|" + "--:|" * (2 * len(peers) + 3) + "---|",
        ]
        for row in rows:
            lines.append(
                f"| {row.workload} | {row.unit} | "
                + "".join(f"{format_ratio(ratio(row))} | " for _, _, ratio in peers)
                + f"{format_ratio(row.ratio)} | {format_value(row.objstore, row.unit)} | "
                + "".join(f"{format_value(value(row), row.unit)} | " for _, value, _ in peers)
                + f"{format_value(row.baseline, row.unit)} | {row.note} |")
        return "\n".join(lines)
    lines = [
        f"| workload | unit | {measured_name} | {baseline_name} | "
        f"{measured_name} / {baseline_name} | note |",
        "|---|---|--:|--:|--:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.workload} | {row.unit} | {format_value(row.objstore, row.unit)} | "
            f"{format_value(row.baseline, row.unit)} | {format_ratio(row.ratio)} | {row.note} |"
        )
    return "\n".join(lines)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction 0..1) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            return value.strip()
    return "unknown CPU"


def memory_gib(meminfo: str) -> float:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def git_commit(repo: Path) -> str:
    try:
        result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                                capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain",
                            "--untracked-files=no"], cwd=repo,
                           capture_output=True, text=True, timeout=10)
    return result.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def machine_description(repo: Path) -> list[str]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"date: {now}",
        f"machine: {os.cpu_count()} CPUs ({cpu_model(_read('/proc/cpuinfo'))}), "
        f"{memory_gib(_read('/proc/meminfo')):.1f} GiB RAM",
        f"commit: {git_commit(repo)}",
        f"load average at start: {_read('/proc/loadavg').split(' ')[:3]}",
    ]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def begin_command(repo: Path) -> list[str]:
    """The start of every bench command: Ctrl-C and SIGTERM raise KeyboardInterrupt (so the
    command's `finally` blocks stop every server it started), and the machine description,
    printed at once, is returned for the markdown."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    header = machine_description(repo)
    say("\n".join(header))
    return header


def say(text: str) -> None:
    print(text, flush=True)


def release_workdir(workdir: Path, keep: bool) -> None:
    """Delete a command's temporary directory, or say where it was kept."""
    if keep:
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
