"""A maintenance job survives the loss of the worker leader (rule 11): the job rows travel
with the control plane (family `job`), so a noop job created on node-a (the leader, which
runs it) reaches node-b with its progress; node-a is SIGKILLed mid-job, node-b becomes the
leader and resumes the job from the progress it last received, to completion. While the
job runs in maintenance mode, only the node that runs it (the job's `runner`) drains."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.harness import Node, all_trusted, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b")
JOBS = "/maintenance/jobs"


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {name: {"probe_interval_seconds": "0.5",
                        "anti_entropy_interval_seconds": "1"} for name in NAMES}
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides=overrides) as started:
        for name in NAMES:
            wait_for(f"node {name} trusts its peer",
                     lambda name=name: all_trusted(started[name], 1), deadline=30)
        yield started


def job_on(node: Node, job_id: str) -> dict[str, Any] | None:
    reply = node.admin.get(f"{JOBS}/{job_id}")
    return dict(reply.json) if reply.status == 200 else None


def test_the_new_leader_resumes_the_job(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    created = a.admin.post(JOBS, {"type": "noop", "mode": "maintenance",
                                  "params": {"n": 80, "delay_ms": 150}})
    assert created.status == 201, created.body
    job_id = created.json["id"]

    def progressed_on_b() -> bool:
        found = job_on(b, job_id)
        return found is not None and found["job"]["done"] >= 5
    wait_for("the job's progress on node-b", progressed_on_b, deadline=30)
    # node-a runs it, so it drains: its health reads the job rows once a second
    # (MaintenanceWatch), and node-b may see the progress before that tick.
    wait_for("node-a drains", lambda: a.admin.get("/health").status == 503, deadline=5)
    assert b.admin.get("/health").status == 200  # node-b does not

    a.daemon.kill()

    def resumed_on_b() -> bool:
        found = job_on(b, job_id)
        return found is not None and any(entry["message"].startswith("resumed at")
                                         for entry in found["logs"])
    wait_for("node-b resumes the job", resumed_on_b, deadline=40)

    def completed_on_b() -> bool:
        found = job_on(b, job_id)
        return found is not None and found["job"]["status"] == "completed"
    wait_for("the job completes on node-b", completed_on_b, deadline=40)
    done = job_on(b, job_id)
    assert done is not None and done["job"]["done"] == 80
