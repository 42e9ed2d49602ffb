"""The maintenance-job endpoints (admin/jobs_routes.py) in memory: the real site, gate and
SigV4 (resource_fixtures), over a real SQLite store. Creation and its 400/409/501 answers,
the list and its limit, a job with its log, every operator move and its 409, 404s, and the
authorization."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from objstore.admin.jobs_routes import FAMILIES, JobRoutes
from objstore.meta.dialect import create_db_engine
from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import FakeClock
from tests.unit.resource_fixtures import ALICE, Node
from tests.unit.test_job_worker import Answered

BASE = "http://s3.test/admin/maintenance/jobs"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SyncMetaStore]:
    engine = create_db_engine("sqlite", str(tmp_path / "meta" / "jobs.db"), None, 4)
    meta = SyncMetaStore(engine, clock=FakeClock())
    meta.migrate()
    try:
        yield meta
    finally:
        meta.close()


@pytest.fixture
def node(tmp_path: Path, store: SyncMetaStore) -> Node:
    node = Node(tmp_path)
    node.admin.mount(FAMILIES, JobRoutes(gate=node.admin.authorize,
                                         jobs=Answered(store)))  # type: ignore[arg-type]
    return node


def call(node: Node, method: str, url: str, document: Any = None, **options: Any
         ) -> tuple[int, Any]:
    body = b"" if document is None else json.dumps(document).encode()
    answer = node.send(method, url, body=body, **options)
    return answer.status, json.loads(answer.body) if answer.body else None


def create(node: Node, n: int = 3, **extra: Any) -> dict[str, Any]:
    status, job = call(node, "POST", BASE, {"type": "noop", "params": {"n": n}, **extra})
    assert status == 201, job
    return dict(job)


def test_create_answers_the_job(node: Node) -> None:
    job = create(node, mode="maintenance")
    assert uuid.UUID(job["id"])
    assert {k: job[k] for k in ("job_type", "status", "mode", "params", "total", "done",
                                "rate", "last_error", "started_at", "finished_at")} == {
        "job_type": "noop", "status": "pending", "mode": "maintenance",
        "params": {"n": 3, "delay_ms": 0}, "total": 0, "done": 0, "rate": 0.0,
        "last_error": None, "started_at": None, "finished_at": None}
    assert job["created_at"].endswith("+00:00") and job["updated_at"]


def test_a_second_job_while_one_is_active_is_409(node: Node) -> None:
    first = create(node)
    status, error = call(node, "POST", BASE, {"type": "noop", "params": {"n": 1}})
    assert status == 409 and error["error"] == "Conflict" and first["id"] in error["message"]
    call(node, "POST", f"{BASE}/{first['id']}/pause")
    assert call(node, "POST", BASE, {"type": "noop", "params": {"n": 1}})[0] == 409
    assert call(node, "DELETE", f"{BASE}/{first['id']}")[0] == 200
    create(node)


@pytest.mark.parametrize("document, words", [
    ({"type": "defrag"}, "unknown job type"),
    ({"type": "noop", "mode": "offline", "params": {"n": 1}}, "mode"),
    ({"type": "noop", "params": {"n": "x"}}, "integer"),
    ({"type": "noop", "params": {"n": 1, "deep": [[[[1]]]]}}, "unknown parameter"),
    ({"type": "noop", "params": "n=1"}, "JSON object"),
    ([1, 2], "JSON object"),
])
def test_bad_creations_are_400_json(node: Node, document: Any, words: str) -> None:
    status, error = call(node, "POST", BASE, document)
    assert status == 400 and error["error"] == "BadRequest" and words in error["message"]


@pytest.mark.parametrize("raw", [b"{", b"[" * 100_000, b'{"type": "noop", "params": {"n": 1e999}}',
                                 b'{"type": "noop", "params": {"n": 99999999999999999999999}}'])
def test_malformed_json_is_400(node: Node, raw: bytes) -> None:
    answer = node.send("POST", BASE, body=raw)
    assert answer.status == 400 and json.loads(answer.body)["error"] == "BadRequest"


def test_migrate_db_runs_in_maintenance_mode_only(node: Node) -> None:
    status, error = call(node, "POST", BASE, {"type": "migrate-db",
                                              "params": {"target": "sqlite"}})
    assert status == 400 and "maintenance" in error["message"]
    assert call(node, "POST", BASE, {"type": "migrate-db", "mode": "maintenance",
                                     "params": {}})[0] == 400
    assert call(node, "GET", BASE)[1]["jobs"] == []


def test_a_cluster_node_refuses_migrate_db_with_409_and_why(tmp_path: Path,
                                                           store: SyncMetaStore) -> None:
    clustered = Node(tmp_path)
    clustered.admin.mount(FAMILIES, JobRoutes(gate=clustered.admin.authorize,
                                              jobs=Answered(store),  # type: ignore[arg-type]
                                              clustered=True))
    wanted = {"type": "migrate-db", "mode": "maintenance", "params": {"target": "sqlite"}}
    status, error = call(clustered, "POST", BASE, wanted)
    assert status == 409 and error["error"] == "Conflict"
    assert "cluster" in error["message"] and "only" in error["message"]
    assert call(clustered, "GET", BASE)[1]["jobs"] == []
    # Bad parameters are still a 400 first; other types run in a cluster.
    assert call(clustered, "POST", BASE, {**wanted, "params": {}})[0] == 400
    assert call(clustered, "POST", BASE, {"type": "noop", "params": {"n": 1}})[0] == 201


def test_list_is_newest_first_with_the_active_job(node: Node) -> None:
    ids = []
    for _ in range(3):
        ids.append(create(node)["id"])
        if len(ids) < 3:
            call(node, "DELETE", f"{BASE}/{ids[-1]}")
    status, page = call(node, "GET", BASE)
    assert status == 200 and page["active"]["id"] == ids[-1]
    assert [j["id"] for j in page["jobs"]] == ids[::-1]
    assert [j["id"] for j in call(node, "GET", BASE + "?limit=2")[1]["jobs"]] == ids[:0:-1]
    for bad in ("0", "501", "x", "-1"):
        status, error = call(node, "GET", f"{BASE}?limit={bad}")
        assert status == 400 and "limit" in error["message"]
    assert call(node, "GET", BASE + "?limit=500")[0] == 200


def test_no_active_job_lists_null(node: Node) -> None:
    assert call(node, "GET", BASE)[1] == {"active": None, "jobs": []}


def test_show_has_the_job_and_its_log(node: Node) -> None:
    job = create(node)
    call(node, "POST", f"{BASE}/{job['id']}/pause")
    status, found = call(node, "GET", f"{BASE}/{job['id']}")
    assert status == 200 and found["job"]["status"] == "paused"
    assert [(e["level"], e["message"]) for e in found["logs"]] == [
        ("info", "created by root (live mode)"), ("info", "paused by root")]
    assert found["logs"][0]["time"].endswith("+00:00")


def test_operator_moves_and_their_409s(node: Node) -> None:
    job = create(node)
    url = f"{BASE}/{job['id']}"
    status, error = call(node, "POST", url + "/resume")
    assert status == 409 and "pending" in error["message"]
    assert call(node, "POST", url + "/pause")[1]["status"] == "paused"
    assert call(node, "POST", url + "/pause")[0] == 409
    assert call(node, "POST", url + "/resume")[1]["status"] == "running"
    cancelled = call(node, "DELETE", url)
    assert cancelled[0] == 200 and cancelled[1]["status"] == "cancelled"
    assert cancelled[1]["finished_at"] is not None
    for method, suffix in (("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")):
        status, error = call(node, method, url + suffix)
        assert status == 409 and error["error"] == "Conflict"


@pytest.mark.parametrize("method, suffix", [("GET", ""), ("POST", "/pause"),
                                            ("POST", "/resume"), ("DELETE", "")])
def test_unknown_jobs_are_404(node: Node, method: str, suffix: str) -> None:
    status, error = call(node, method, f"{BASE}/{uuid.uuid4()}{suffix}")
    assert status == 404 and error["error"] == "NotFound"


def test_only_administrators(node: Node) -> None:
    status, error = call(node, "GET", BASE, who=ALICE)
    assert status == 403 and error["error"] == "AccessDenied"
    assert call(node, "POST", BASE, {"type": "noop", "params": {"n": 1}}, who=ALICE)[0] == 403
    node.authorizer.grants.add(("*", "*"))
    assert call(node, "GET", BASE, who=ALICE)[0] == 200
    assert call(node, "GET", BASE, who=None)[0] == 403
