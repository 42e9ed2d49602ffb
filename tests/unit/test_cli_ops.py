"""Pure parts of the operator commands: sizes, sparklines, the history chart, and the
completion candidates walked from the real `objstore` parser."""

from __future__ import annotations

import argparse

import pytest

from objstore.cli.admin_ops import history_chart, size, sparkline
from objstore.cli.completion import candidates, complete
from objstore.cli.main import build_parser


@pytest.mark.parametrize(("text", "expected"), [
    ("1024", 1024), ("10M", 10 * 1024**2), ("500G", 500 * 1024**3), ("2T", 2 * 1024**4),
    ("3k", 3072), ("1GiB", 1024**3), ("7MB", 7 * 1024**2), ("0", 0)])
def test_sizes(text: str, expected: int) -> None:
    assert size(text) == expected


@pytest.mark.parametrize("text", ["", "M", "-1", "1.5G", "ten", "10X", "1e9"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        size(text)


def test_sparkline_scales_to_its_maximum() -> None:
    assert sparkline([0, 4, 8]) == "▁▄█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([]) == ""
    assert len(sparkline(list(range(100)), width=10)) == 10
    assert sparkline(list(range(100)), width=10)[-1] == "█"  # the newest kept


def test_history_chart_oldest_first() -> None:
    samples = [{"time": "t2", "requests": 10, "stored_bytes": 2048},
               {"time": "t1", "requests": 0, "stored_bytes": 1024}]  # newest first
    chart = history_chart(samples, ["requests", "stored_bytes"])
    lines = chart.splitlines()
    assert lines[0] == "2 samples, t1 .. t2"
    assert lines[1].startswith("requests     ▁█ now 10, max 10")
    assert "now 2.0 KiB" in lines[2]
    assert history_chart([], ["requests"]) == "(no samples yet)"


def test_history_chart_tolerates_odd_values() -> None:
    chart = history_chart([{"requests": None}, {"requests": "x"}, {"requests": True}],
                          ["requests"])
    assert "now 0, max 0" in chart


def test_completion_candidates() -> None:
    parser = build_parser()
    top = candidates(parser, [], "")
    assert {"users", "jobs", "buckets", "completion", "settings"} <= set(top)
    assert candidates(parser, ["users"], "cr") == ["create"]
    assert candidates(parser, ["jobs", "start"], "--mo") == ["--mode"]
    assert candidates(parser, ["jobs", "start", "--mode"], "") == ["live", "maintenance"]
    assert candidates(parser, ["--endpoint"], "") == []  # a free value
    assert candidates(parser, ["completion"], "z") == ["zsh"]  # a positional's choices
    assert candidates(parser, ["completion", "zsh"], "") == ["--help"]  # options only
    assert candidates(parser, ["import"], "ex") == []  # a file name: the shell's to complete
    assert candidates(parser, ["--endpoint", "http://x", "buckets"], "qu") == ["quota"]
    assert "__complete" not in top


def test_complete_reads_the_shells_index() -> None:
    parser = build_parser()
    assert complete(parser, ["2", "users", "li"]) == "list\n"
    assert complete(parser, ["1"]) != ""  # nothing typed yet: every command
    assert complete(parser, ["x"]) == "" and complete(parser, []) == ""
