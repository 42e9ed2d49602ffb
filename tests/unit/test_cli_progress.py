"""The CLI's progress reporter: a rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import io

from objstore.cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_with_bytes_and_rate() -> None:
    screen = Terminal()
    progress = Progress("archive received", stream=screen, interval_seconds=0, unit="bytes")
    progress.advance(3 * 1024 * 1024)
    progress.advance(2 * 1024 * 1024)
    progress.finish()
    text = screen.getvalue()
    assert "archive received" in text
    assert "5.0 MiB (" in text and "iB/s)" in text


def test_a_known_total_draws_a_bar_with_count_and_eta() -> None:
    screen = Terminal()
    progress = Progress("restoring objects", total=4, stream=screen, interval_seconds=0)
    progress.advance(1)
    progress.advance(3)
    progress.finish()
    text = screen.getvalue()
    assert "restoring objects" in text and "4/4" in text
    assert "━" in text  # the bar


def test_a_log_gets_plain_lines() -> None:
    log = io.StringIO()
    progress = Progress("checking objects", stream=log)
    progress.advance(7)
    progress.finish()
    assert "\r" not in log.getvalue()
    assert log.getvalue().startswith("checking objects: 7 (")


def test_a_log_with_a_total_shows_the_fraction() -> None:
    log = io.StringIO()
    progress = Progress("restoring objects", total=4, stream=log, interval_seconds=0)
    progress.advance(1)
    progress.finish()
    assert "[#######                       ] 1/4 (25%" in log.getvalue()
