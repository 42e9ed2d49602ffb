"""Progress of long CLI operations (recover, check, archive): on a terminal a `rich` bar
redrawn in place, with the count (or bytes), the rate and, when the total is known, the
ETA; otherwise (logs, CI) a plain line at most every 5 seconds and one at the end. Without a
total (an archive download, whose size nobody knows in advance) a count and a rate.
`unit="bytes"` shows sizes as KiB/MiB/GiB."""

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
        self._last = 0.0
        self._started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        if self._tty:
            self._start_bar()

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
        self.done += n
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._render(final=False)

    def finish(self) -> None:
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
                    f"({fraction:.0%}, {per_second}/s)")
        else:
            text = f"{self.label}: {done} ({per_second}/s)"
        self._stream.write(text + "\n")
        self._stream.flush()

    def _amounts(self) -> str:
        done = self._amount(self.done)
        return f"{done}/{self._amount(self.total)}" if self.total else done

    def _amount(self, value: float) -> str:
        return human_bytes(int(value)) if self._bytes else f"{value:.0f}"
