"""The maintenance-job admin commands: `objstore jobs start|list|show|watch|pause|resume|
cancel`, each a call (or a poll) of /admin/maintenance/jobs.

`watch` (and `start --watch`) polls the job and draws a progress bar with the server's rate
and the ETA it implies (on a terminal with `rich`, redrawn in place; as periodic lines
otherwise: logs, CI), until the job ends; with --json the last job document is printed.
Its exit status is 0 when the job completed, 1 when it failed or was cancelled. Never
imports Twisted.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from objstore.cli.admin_client import UsageProblem, segment
from objstore.cli.admin_iam import JsonObject, Result, Session
from objstore.cli.tables import Column, render_record, render_table
from objstore.json_input import parse_json

TERMINAL = ("completed", "failed", "cancelled")
POLL_SECONDS = 1.0
BAR_WIDTH = 30

JOB_COLUMNS: list[Column] = [
    ("ID", "id"), ("TYPE", "job_type"), ("STATUS", "status"), ("MODE", "mode"),
    ("DONE", "done"), ("TOTAL", "total"), ("CREATED", "created_at"),
]


def parse_params(pairs: list[str] | None, document: str | None) -> JsonObject:
    """--params '{json}' and --param name=value (the value read as JSON when it is, e.g.
    10 or true, else as text); --param wins over --params."""
    params: JsonObject = {}
    if document:
        try:
            value = parse_json(document)
        except ValueError as exc:
            raise UsageProblem(f"--params is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise UsageProblem("--params must be a JSON object")
        params.update(value)
    for pair in pairs or ():
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UsageProblem(f"--param {pair!r}: expected name=value")
        try:
            params[name] = parse_json(text)
        except ValueError:
            params[name] = text
    return params


def eta_seconds(job: Mapping[str, Any]) -> float | None:
    """Seconds left at the job's current rate; None when it can not be told."""
    total, done, rate = int(job.get("total") or 0), int(job.get("done") or 0), job.get("rate")
    if not total or not rate or float(rate) <= 0 or done >= total:
        return None
    return (total - done) / float(rate)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def progress_line(job: Mapping[str, Any]) -> str:
    """One line: type, status, bar, done/total, rate and ETA."""
    total, done = int(job.get("total") or 0), int(job.get("done") or 0)
    rate = float(job.get("rate") or 0.0)
    head = f"{job.get('job_type')} {job.get('status')}"
    if total:
        fraction = min(done / total, 1.0)
        bar = "#" * int(fraction * BAR_WIDTH)
        return (f"{head} [{bar:<{BAR_WIDTH}}] {done}/{total} ({fraction:.0%}, "
                f"{rate:.1f}/s, ETA {duration(eta_seconds(job))})")
    return f"{head}: {done} ({rate:.1f}/s)"


def lines_every(interval_seconds: float) -> int:
    """Every how many polls a progress line is written off a terminal (about every 5
    seconds); 0: only at changes of status (an interval of 0 or less polls back to back)."""
    if interval_seconds <= 0:
        return 0
    return max(1, int(5 / interval_seconds))


def watch_job(s: Session, job_id: str, *, stream: TextIO | None = None,
              sleep: Callable[[float], None] = time.sleep,
              interval_seconds: float = POLL_SECONDS) -> JsonObject:
    """Poll the job until it ends, drawing its progress; the last job document. Off a
    terminal a line is written at every change of status and about every 5 seconds
    between (at every change only when the interval is 0)."""
    out = stream or s.stderr
    if out.isatty():
        return _watch_with_bar(s, job_id, out, sleep, interval_seconds)
    every = lines_every(interval_seconds)
    polls = 0
    last_status = None
    while True:
        job = s.client.call("GET", f"/maintenance/jobs/{segment(job_id)}")["job"]
        ended = job["status"] in TERMINAL
        if ended or (every and polls % every == 0) or job["status"] != last_status:
            out.write(progress_line(job) + "\n")
        out.flush()
        if ended:
            return dict(job)
        last_status = job["status"]
        polls += 1
        sleep(interval_seconds)


def _watch_with_bar(s: Session, job_id: str, out: TextIO, sleep: Callable[[float], None],
                    interval_seconds: float) -> JsonObject:
    """The terminal's watch: a rich progress bar with done/total, the server's rate and the
    ETA it implies."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.percentage:>3.0f}%  {task.fields[rate]}/s  "
                          "ETA {task.fields[eta]}"))
    with Progress(*columns, console=Console(file=out), transient=False) as bar:
        task = bar.add_task("", total=None, rate="0.0", eta="--:--")
        while True:
            job = s.client.call("GET", f"/maintenance/jobs/{segment(job_id)}")["job"]
            total = int(job.get("total") or 0)
            bar.update(task, description=f"{job.get('job_type')} {job.get('status')}",
                       total=total or None, completed=int(job.get("done") or 0),
                       rate=f"{float(job.get('rate') or 0.0):.1f}",
                       eta=duration(eta_seconds(job)))
            if job["status"] in TERMINAL:
                return dict(job)
            sleep(interval_seconds)


def job_result(job: JsonObject) -> Result:
    shown = {k: v for k, v in job.items() if k != "params"}
    shown["params"] = ", ".join(f"{k}={v}" for k, v in sorted(job.get("params", {}).items()))
    return Result(job, render_record(shown))


def watched_result(job: JsonObject) -> Result:
    status = job["status"]
    text = f"job {job['id']} {status}" + (f": {job['last_error']}" if job.get("last_error")
                                         else "")
    return Result(job, text, status=0 if status == "completed" else 1)


def jobs_start(s: Session, a: argparse.Namespace) -> Result:
    body: JsonObject = {"type": a.type, "mode": a.mode,
                        "params": parse_params(a.param, a.params)}
    job = s.client.call("POST", "/maintenance/jobs", body=body)
    if a.watch:
        s.stderr.write(f"started job {job['id']}\n")
        return watched_result(watch_job(s, job["id"]))
    return Result(job, f"started job {job['id']} ({job['job_type']}, {job['mode']} mode)")


def jobs_list(s: Session, a: argparse.Namespace) -> Result:
    page = s.client.call("GET", "/maintenance/jobs", query={"limit": a.limit})
    text = render_table(page.get("jobs", []), JOB_COLUMNS)
    active = page.get("active")
    if active:
        text += f"\nactive: {active['id']} ({active['status']})"
    return Result(page, text)


def jobs_show(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", f"/maintenance/jobs/{segment(a.job_id)}")
    result = job_result(found["job"])
    lines = [f"{entry['time']} {entry['level']:<7} {entry['message']}"
             for entry in found.get("logs", [])]
    return Result(found, "\n".join([result.text or "", "", "log:", *lines]))


def jobs_watch(s: Session, a: argparse.Namespace) -> Result:
    return watched_result(watch_job(s, a.job_id))


def _move(s: Session, method: str, path: str, verb: str) -> Result:
    job = s.client.call(method, path)
    return Result(job, f"job {job['id']} {verb}: now {job['status']}")


def jobs_pause(s: Session, a: argparse.Namespace) -> Result:
    return _move(s, "POST", f"/maintenance/jobs/{segment(a.job_id)}/pause", "paused")


def jobs_resume(s: Session, a: argparse.Namespace) -> Result:
    return _move(s, "POST", f"/maintenance/jobs/{segment(a.job_id)}/resume", "resumed")


def jobs_cancel(s: Session, a: argparse.Namespace) -> Result:
    return _move(s, "DELETE", f"/maintenance/jobs/{segment(a.job_id)}", "cancelled")
