"""Progress of long CLI operations (recover, check, archive, export, import): on a terminal
a `rich` bar redrawn in place, with the count (or bytes), the rate and, when the total is
known, the ETA; otherwise (logs, CI, a pipe) a plain line at most every 5 seconds and one at
the end, always on standard error, so standard output (and --json) stays the command's own.
Without a total (an archive download, whose size nobody knows in advance) a count and a
rate. The total may be given later with `expect` (a download's Content-Length), until the
first advance. `unit="bytes"` shows sizes as KiB/MiB/GiB."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from objstore.cli.tables import human_bytes


class Progress:
    def __init__(self, label: str, total: int | None = None, stream: TextIO | None = None,
                 interval_seconds: float = 1.0, unit: str = "") -> None:
        self.label = label
        self._bytes = unit == "bytes"
        self.total = total
        self.done = 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._interval = interval_seconds if self._tty else max(interval_seconds, 5.0)
        self._started = time.monotonic()
        # a terminal's bar is drawn at once; a log's first line waits for the interval
        self._last = 0.0 if self._tty else self._started
        self._bar: Any = None
        self._task: Any = None

    def expect(self, total: int | None) -> None:
        """The total, once known; ignored after the bar is drawn."""
        if self._bar is None and self.done == 0:
            self.total = total

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        columns: list[Any] = [TextColumn("{task.description}")]
        if self.total:
            columns.append(BarColumn())
        columns.append(TextColumn("{task.fields[amount]} ({task.fields[rate]}/s)"))
        if self.total:
            columns.append(TimeRemainingColumn())
        self._bar = Bar(*columns, console=Console(file=self._stream), transient=False,
                        auto_refresh=False)
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=self.total or None, rate="0",
                                        amount=self._amounts())

    def advance(self, n: int = 1) -> None:
        if self._tty and self._bar is None:
            self._start_bar()
        self.done += n
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._render(final=False)

    def finish(self) -> None:
        if self._tty and self._bar is None:
            self._start_bar()
        self._render(final=True)
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _rate(self) -> float:
        return self.done / max(time.monotonic() - self._started, 1e-9)

    def _render(self, *, final: bool) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, amount=self._amounts(),
                             rate=self._amount(self._rate()))
            self._bar.refresh()
            return
        rate = self._rate()
        done, per_second = self._amount(self.done), self._amount(rate)
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            bar = "#" * int(fraction * 30)
            text = (f"{self.label} [{bar:<30}] {done}/{self._amount(self.total)} "
                    f"({fraction:.0%}, {per_second}/s, {eta(self.total - self.done, rate)})")
        else:
            text = f"{self.label}: {done} ({per_second}/s)"
        self._stream.write(text + "\n")
        self._stream.flush()

    def _amounts(self) -> str:
        done = self._amount(self.done)
        return f"{done}/{self._amount(self.total)}" if self.total else done

    def _amount(self, value: float) -> str:
        return human_bytes(int(value)) if self._bytes else f"{value:.0f}"


def eta(remaining: float, rate: float) -> str:
    """`ETA m:ss` (h:mm:ss past an hour) at `rate` per second; `done` when nothing is
    left; `ETA --:--` before there is a rate."""
    if remaining <= 0:
        return "done"
    if rate <= 0:
        return "ETA --:--"
    seconds = int(remaining / rate + 0.999)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"ETA {hours}:{minutes:02}:{seconds:02}" if hours else f"ETA {minutes}:{seconds:02}"
