"""A small progress reporter for long offline operations: a bar on a terminal, periodic
lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: int | None = None, stream: TextIO | None = None,
                 interval_seconds: float = 1.0) -> None:
        self.label = label
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
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            bar = "#" * int(fraction * 30)
            text = (f"{self.label} [{bar:<30}] {self.done}/{self.total} "
                    f"({fraction:.0%}, {rate:.0f}/s)")
        else:
            text = f"{self.label}: {self.done} ({rate:.0f}/s)"
        if self._tty:
            self._stream.write("\r" + text + ("\n" if final else ""))
        else:
            self._stream.write(text + "\n")
        self._stream.flush()
