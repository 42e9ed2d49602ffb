"""Maintenance jobs on the real daemon: the admin API and the `objstore jobs` commands. A
noop job runs to completion (watched with the CLI's progress bar), a second job while one
is active is 409, pause, resume and cancel (API and CLI) with their 409s, a maintenance-mode
job takes the node out of the load balancer through the health check, bad input is a JSON
400; and, on a daemon of its own, a SIGKILL mid-job and a restart resume the job from its
recorded progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from tests.integration.admin_client import AdminClient
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

OBJSTORE = str(Path(sys.executable).with_name("objstore"))
JOBS = "/maintenance/jobs"
DEADLINE_SECONDS = 60.0


def poll(what: str, found: Callable[[], Any], deadline_seconds: float = DEADLINE_SECONDS
         ) -> Any:
    """`found()` once it is truthy, polling; fails with `what` after the deadline."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        value = found()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def admin(daemon: Daemon) -> Iterator[AdminClient]:
    client = AdminClient(daemon.endpoint)
    yield client
    active = client.get(JOBS).json["active"]  # leave no job active for the next test
    if active is not None:
        client.delete(f"{JOBS}/{active['id']}")


def job(admin: AdminClient, job_id: str) -> dict[str, Any]:
    return dict(admin.ok("GET", f"{JOBS}/{job_id}")["job"])


def start(admin: AdminClient, n: int, delay_ms: int, mode: str = "live") -> dict[str, Any]:
    created = admin.ok("POST", JOBS, {"type": "noop", "mode": mode,
                                      "params": {"n": n, "delay_ms": delay_ms}}, status=201)
    return dict(created)


def running_with_progress(admin: AdminClient, job_id: str, at_least: int = 1) -> dict[str, Any]:
    return dict(poll(f"job {job_id} to run", lambda: (
        (found := job(admin, job_id))["status"] == "running" and found["done"] >= at_least
        and found)))


def cli(daemon: Daemon, *args: str, status: int = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBJSTORE_", "AWS_"))}
    env.update(OBJSTORE_ENDPOINT=daemon.endpoint, OBJSTORE_ACCESS_KEY=ROOT_ACCESS_KEY,
               OBJSTORE_SECRET_KEY=ROOT_SECRET_KEY)
    result = subprocess.run([OBJSTORE, *args], capture_output=True, env=env, text=True,
                            timeout=120)
    assert result.returncode == status, (args, result.returncode, result.stdout, result.stderr)
    return result


def test_cli_starts_and_watches_a_noop_job_to_completion(daemon: Daemon,
                                                         admin: AdminClient) -> None:
    result = cli(daemon, "jobs", "start", "noop", "-p", "n=20", "-p", "delay_ms=50", "--watch")
    assert "completed" in result.stdout
    bar = [line for line in result.stderr.splitlines() if "[" in line and "/20" in line]
    assert bar and "20/20 (100%" in bar[-1] and "ETA" in bar[-1] and "/s" in bar[-1]
    job_id = result.stderr.split("started job ", 1)[1].split()[0]
    found = admin.ok("GET", f"{JOBS}/{job_id}")
    assert (found["job"]["status"], found["job"]["done"], found["job"]["total"]) == (
        "completed", 20, 20)
    assert found["job"]["started_at"] and found["job"]["finished_at"]
    assert [e["message"] for e in found["logs"]] == ["created by root (live mode)", "started",
                                                      "completed: 20 done"]
    listed = cli(daemon, "jobs", "list", "--json")
    page = json.loads(listed.stdout)
    assert page["active"] is None and page["jobs"][0]["id"] == job_id


def test_one_active_job_and_the_operator_moves(admin: AdminClient) -> None:
    created = start(admin, n=10_000, delay_ms=20)
    url = f"{JOBS}/{created['id']}"
    second = admin.post(JOBS, {"type": "noop", "params": {"n": 1}})
    assert second.status == 409 and second.error == "Conflict"
    running_with_progress(admin, created["id"])
    assert admin.ok("POST", url + "/pause")["status"] == "paused"
    assert admin.post(url + "/pause").status == 409
    assert admin.post(JOBS, {"type": "noop", "params": {"n": 1}}).status == 409
    # The step in progress when it was paused is not recorded: its count stays put.
    settled = poll("the worker to stop", lambda: (
        (a := job(admin, created["id"])["done"]) == job(admin, created["id"])["done"] and [a]))
    assert job(admin, created["id"])["status"] == "paused"
    assert admin.ok("POST", url + "/resume")["status"] == "running"
    running_with_progress(admin, created["id"], at_least=settled[0] + 1)
    cancelled = admin.ok("DELETE", url)
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"]
    for method, suffix in (("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")):
        assert admin.call(method, url + suffix).status == 409
    assert admin.get(JOBS).json["active"] is None
    messages = [e["message"] for e in admin.ok("GET", url)["logs"]]
    assert "paused by root" in messages and "cancelled by root" in messages


def test_cli_pause_resume_cancel(daemon: Daemon, admin: AdminClient) -> None:
    started = json.loads(cli(daemon, "jobs", "start", "noop", "--params",
                             '{"n": 10000, "delay_ms": 20}', "--json").stdout)
    job_id = started["id"]
    assert json.loads(cli(daemon, "jobs", "pause", job_id, "--json").stdout)["status"] == "paused"
    refused = cli(daemon, "jobs", "pause", job_id, status=1)
    assert "Conflict" in refused.stderr and "409" in refused.stderr
    assert "now running" in cli(daemon, "jobs", "resume", job_id).stdout
    assert "now cancelled" in cli(daemon, "jobs", "cancel", job_id).stdout
    shown = cli(daemon, "jobs", "show", job_id).stdout
    assert "cancelled by root" in shown and "status" in shown
    assert cli(daemon, "jobs", "watch", job_id, status=1).stdout.strip().endswith("cancelled")
    assert cli(daemon, "jobs", "start", "defrag", status=1).stderr.count("unknown job type")


def test_maintenance_mode_drains_the_node_through_the_health_check(
        daemon: Daemon, admin: AdminClient) -> None:
    http = urllib3.PoolManager(retries=False, timeout=10.0)

    def health() -> tuple[int, str]:
        answer = http.request("GET", daemon.endpoint + "/admin/health")
        return answer.status, json.loads(answer.data)["status"]

    live = start(admin, n=10_000, delay_ms=20)
    running_with_progress(admin, live["id"])
    assert health() == (200, "ok")
    admin.ok("DELETE", f"{JOBS}/{live['id']}")
    created = start(admin, n=10_000, delay_ms=20, mode="maintenance")
    poll("the node to leave the load balancer", lambda: health() == (503, "maintenance"))
    verbose = json.loads(http.request("GET", daemon.endpoint + "/admin/health?verbose=1").data)
    assert verbose["maintenance_job"] == created["id"]
    admin.ok("POST", f"{JOBS}/{created['id']}/pause")
    poll("a paused job to give the node back", lambda: health() == (200, "ok"))
    admin.ok("POST", f"{JOBS}/{created['id']}/resume")
    poll("the node to leave again", lambda: health() == (503, "maintenance"))
    admin.ok("DELETE", f"{JOBS}/{created['id']}")
    poll("the node to come back", lambda: health() == (200, "ok"))


@pytest.mark.parametrize("raw, words", [
    (b'{"type": "noop", "params": {"n": 1, "x": [[[[[[1]]]]]]}}', "unknown parameter"),
    (b"[" * 50_000, "JSON"),
    (b'{"type": "noop", "params": {"n": "many"}}', "integer"),
    (b'{"type": "noop", "mode": "offline", "params": {"n": 1}}', "mode"),
    (b'{"type": "vacuum"}', "unknown job type"),
    (b'{"type": "noop", "params": {"n": 1, "delay_ms": 99999999999999999999999}}', ""),
])
def test_bad_input_is_a_json_400(admin: AdminClient, raw: bytes, words: str) -> None:
    reply = admin.call("POST", JOBS, raw=raw)
    assert reply.status == 400 and reply.error == "BadRequest"
    assert words in reply.json["message"]


def test_limits_and_unknown_jobs(admin: AdminClient) -> None:
    assert admin.get(f"{JOBS}?limit=501").status == 400
    assert admin.get(f"{JOBS}?limit=0").status == 400
    assert admin.get(f"{JOBS}?limit=500").status == 200
    assert admin.get(f"{JOBS}/00000000-0000-4000-8000-000000000000").status == 404
    assert admin.post(f"{JOBS}/nope/pause").status == 404
    refused = admin.post(JOBS, {"type": "migrate-db", "params": {"target": "sqlite"}})
    assert refused.status == 400 and "maintenance" in refused.json["message"]


def test_a_killed_daemon_resumes_the_job_where_it_stopped(node: Daemon) -> None:
    admin = AdminClient(node.endpoint)
    created = start(admin, n=60, delay_ms=100)
    before = running_with_progress(admin, created["id"], at_least=5)
    node.kill_tree()
    node.start()
    after = job(admin, created["id"])
    assert after["status"] == "running" and after["done"] >= before["done"]
    finished = poll("the resumed job to complete", lambda: (
        (found := job(admin, created["id"]))["status"] == "completed" and found))
    assert (finished["done"], finished["total"]) == (60, 60)
    messages = [e["message"] for e in admin.ok("GET", f"{JOBS}/{created['id']}")["logs"]]
    resumed = [m for m in messages if m.startswith("resumed at ")]
    assert resumed and int(resumed[0].split()[2].split("/")[0]) >= before["done"]
    assert messages.count("started") == 1
