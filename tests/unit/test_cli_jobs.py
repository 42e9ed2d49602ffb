"""The `objstore jobs` helpers (cli/admin_jobs.py): parameters from the command line, the
progress line with rate and ETA, and the watch loop against a scripted client."""

from __future__ import annotations

import io
from typing import Any

import pytest

from objstore.cli.admin_client import UsageProblem
from objstore.cli.admin_iam import Session
from objstore.cli.admin_jobs import (
    duration,
    eta_seconds,
    lines_every,
    parse_params,
    progress_line,
    watch_job,
    watched_result,
)


def test_params_from_pairs_and_json() -> None:
    assert parse_params(["n=10", "force=true", "target=sqlite", "x=1.5"], None) == {
        "n": 10, "force": True, "target": "sqlite", "x": 1.5}
    assert parse_params(["n=3"], '{"n": 1, "delay_ms": 5}') == {"n": 3, "delay_ms": 5}
    assert parse_params(None, None) == {}
    assert parse_params(["url=postgresql://u@h/db?a=b"], None) == {
        "url": "postgresql://u@h/db?a=b"}
    for pairs, document in ((["novalue"], None), (["=1"], None), (None, "[1]"), (None, "{")):
        with pytest.raises(UsageProblem):
            parse_params(pairs, document)


def test_eta_and_duration() -> None:
    assert eta_seconds({"total": 100, "done": 40, "rate": 2.0}) == 30.0
    assert eta_seconds({"total": 100, "done": 40, "rate": 0}) is None
    assert eta_seconds({"total": 0, "done": 0, "rate": 5}) is None
    assert eta_seconds({"total": 10, "done": 10, "rate": 5}) is None
    assert (duration(None), duration(65), duration(3725)) == ("--:--", "01:05", "1:02:05")


def test_progress_line_has_bar_rate_and_eta() -> None:
    line = progress_line({"job_type": "noop", "status": "running", "total": 100, "done": 50,
                          "rate": 5.0})
    assert line == f"noop running [{'#' * 15:<30}] 50/100 (50%, 5.0/s, ETA 00:10)"
    assert progress_line({"job_type": "noop", "status": "pending", "total": 0, "done": 0,
                          "rate": 0}) == "noop pending: 0 (0.0/s)"


class Scripted:
    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs
        self.calls: list[tuple[str, str]] = []

    def call(self, method: str, path: str, **_: Any) -> Any:
        self.calls.append((method, path))
        return {"job": self.jobs.pop(0), "logs": []}


def test_watch_polls_until_the_job_ends() -> None:
    states = [{"id": "j", "job_type": "noop", "status": s, "total": 4, "done": d, "rate": 1.0,
               "last_error": None} for s, d in (("pending", 0), ("running", 2),
                                                ("running", 3), ("completed", 4))]
    client, out, sleeps = Scripted(states), io.StringIO(), []
    session = Session(client, io.StringIO(), out)  # type: ignore[arg-type]
    last = watch_job(session, "j", sleep=sleeps.append, interval_seconds=1.0)
    assert last["status"] == "completed" and len(sleeps) == 3
    assert client.calls == [("GET", "/maintenance/jobs/j")] * 4
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("noop pending") and "4/4 (100%" in lines[-1]
    assert watched_result(last).status == 0
    assert watched_result({**last, "status": "failed", "last_error": "x"}).status == 1


def test_watch_off_a_terminal_with_a_zero_interval_writes_changes_only() -> None:
    # An interval of 0 divided 5 by zero before any poll.
    states = [{"id": "j", "job_type": "noop", "status": s, "total": 9, "done": d, "rate": 1.0,
               "last_error": None} for s, d in (("pending", 0), ("running", 2),
                                                ("running", 3), ("running", 5),
                                                ("completed", 9))]
    client, out, sleeps = Scripted(states), io.StringIO(), []
    session = Session(client, io.StringIO(), out)  # type: ignore[arg-type]
    last = watch_job(session, "j", sleep=sleeps.append, interval_seconds=0.0)
    assert last["status"] == "completed" and sleeps == [0.0] * 4
    lines = out.getvalue().splitlines()
    assert [line.split()[1].rstrip(":") for line in lines] == ["pending", "running",
                                                               "completed"]
    assert (lines_every(0.0), lines_every(-1.0), lines_every(1.0), lines_every(10.0)) == (
        0, 0, 5, 1)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_watch_on_a_terminal_draws_a_rich_bar() -> None:
    states = [{"id": "j", "job_type": "encrypt", "status": s, "total": 10, "done": d,
               "rate": 2.0, "last_error": None} for s, d in (("running", 4), ("completed", 10))]
    out = _Terminal()
    session = Session(Scripted(states), io.StringIO(), out)  # type: ignore[arg-type]
    last = watch_job(session, "j", sleep=lambda _: None, interval_seconds=0.0)
    assert last["status"] == "completed"
    drawn = out.getvalue()
    assert "encrypt" in drawn and "10/10" in drawn and "/s" in drawn and "ETA" in drawn
