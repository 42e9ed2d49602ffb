"""The CLI's progress reporter: redrawn in place on a terminal, plain lines otherwise."""

from __future__ import annotations

import io
import re

from objstore.cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_line_redrawn_in_place() -> None:
    screen = Terminal()
    progress = Progress("archive received", stream=screen, interval_seconds=0, unit="bytes")
    progress.advance(3 * 1024 * 1024)
    progress.advance(2 * 1024 * 1024)
    progress.finish()
    text = screen.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1 and text.endswith("\n")
    assert re.search(r"\rarchive received: 5\.0 MiB \([\d.]+ [KMGT]iB/s\)\x1b\[K\n$", text)


def test_a_known_total_draws_a_bar() -> None:
    screen = Terminal()
    progress = Progress("restoring objects", total=4, stream=screen, interval_seconds=0)
    progress.advance(1)
    progress.finish()
    assert "[#######                       ] 1/4 (25%" in screen.getvalue()


def test_a_log_gets_plain_lines() -> None:
    log = io.StringIO()
    progress = Progress("checking objects", stream=log)
    progress.advance(7)
    progress.finish()
    assert "\r" not in log.getvalue()
    lines = log.getvalue().splitlines()
    assert lines and all(re.fullmatch(r"checking objects: 7 \(\d+/s\)", line) for line in lines)
