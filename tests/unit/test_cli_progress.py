"""The CLI's progress reporter: a rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import io

from objstore.cli.progress import Progress, eta


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


def test_a_log_with_a_total_shows_the_eta() -> None:
    log = io.StringIO()
    progress = Progress("import sent", total=4, stream=log)
    progress.advance(1)
    progress.finish()
    assert log.getvalue().count("\n") == 1  # a quick one: only the line at the end
    assert "(25%, " in log.getvalue() and "/s, ETA " in log.getvalue()
    ended = io.StringIO()
    progress = Progress("import sent", total=4, stream=ended)
    progress.advance(4)
    progress.finish()
    assert ended.getvalue().startswith("import sent [") and ended.getvalue().endswith(", done)\n")


def test_a_total_known_later_is_used_until_the_first_advance() -> None:
    screen = Terminal()
    progress = Progress("export received", stream=screen, interval_seconds=0, unit="bytes")
    progress.expect(2048)
    progress.advance(1024)
    progress.expect(10)  # too late: the bar is drawn
    progress.advance(1024)
    progress.finish()
    assert progress.total == 2048
    assert "2.0 KiB/2.0 KiB" in screen.getvalue() and "━" in screen.getvalue()


def test_eta_reads_as_minutes_or_hours() -> None:
    assert eta(0, 5.0) == "done"
    assert eta(10, 0.0) == "ETA --:--"
    assert eta(150, 1.0) == "ETA 2:30"
    assert eta(7322, 1.0) == "ETA 2:02:02"
