"""A small progress reporter for long CLI operations: redrawn in place on a terminal,
periodic lines otherwise (logs, CI). With a known total it draws a bar; without one (an
archive download, whose size nobody knows in advance) a count and a rate. `unit="bytes"`
shows sizes as KiB/MiB/GiB."""

from __future__ import annotations

import sys
import time
from typing import TextIO

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

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._render(final=False)

    def finish(self) -> None:
        self._render(final=True)

    def _render(self, *, final: bool) -> None:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self.done / elapsed
        done, per_second = self._amount(self.done), self._amount(rate)
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            bar = "#" * int(fraction * 30)
            text = (f"{self.label} [{bar:<30}] {done}/{self._amount(self.total)} "
                    f"({fraction:.0%}, {per_second}/s)")
        else:
            text = f"{self.label}: {done} ({per_second}/s)"
        if self._tty:
            # \x1b[K clears what a longer previous line left on the right.
            self._stream.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def _amount(self, value: float) -> str:
        return human_bytes(int(value)) if self._bytes else f"{value:.0f}"
