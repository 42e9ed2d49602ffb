"""The maintenance-job rules (engine/job_rules.py): every move from every status, the modes
and the parameters of each job type. Pure."""

from __future__ import annotations

from typing import Any

import pytest

from objstore.engine import job_rules as rules
from objstore.engine.job_rules import JobRequestError, parse_job_request

# (status, move) -> next status; every pair not listed is refused.
ALLOWED = {
    ("pending", "pause"): "paused",
    ("running", "pause"): "paused",
    ("paused", "resume"): "running",
    ("pending", "cancel"): "cancelled",
    ("running", "cancel"): "cancelled",
    ("paused", "cancel"): "cancelled",
    ("pending", "start"): "running",
    ("running", "complete"): "completed",
    ("running", "fail"): "failed",
}
MOVES = ("pause", "resume", "cancel", "start", "complete", "fail")


MIGRATE = {"type": "migrate-db", "mode": "maintenance"}


@pytest.mark.parametrize("status", rules.STATUSES)
@pytest.mark.parametrize("move", MOVES)
def test_every_move_from_every_status(status: str, move: str) -> None:
    assert rules.next_status(status, move) == ALLOWED.get((status, move))


@pytest.mark.parametrize("status", sorted(rules.TERMINAL))
def test_terminal_states_allow_no_move(status: str) -> None:
    assert all(rules.next_status(status, move) is None for move in MOVES)
    assert not rules.is_active(status)


def test_active_states() -> None:
    assert {s for s in rules.STATUSES if rules.is_active(s)} == {"pending", "running", "paused"}


def test_rate() -> None:
    assert rules.rate_per_second(10, 4.0) == 2.5
    assert rules.rate_per_second(10, 0.0) == 0.0
    assert rules.rate_per_second(0, 3.0) == 0.0


def test_noop_request_defaults_to_live_mode() -> None:
    wanted = parse_job_request({"type": "noop", "params": {"n": 3}})
    assert (wanted.job_type, wanted.mode, wanted.params) == ("noop", "live",
                                                            {"n": 3, "delay_ms": 0})
    assert parse_job_request({"type": "noop", "mode": "maintenance",
                              "params": {"n": 0, "delay_ms": 5}}).mode == "maintenance"


@pytest.mark.parametrize("body, words", [
    ({}, "type is required"),
    ({"type": 3}, "type is required"),
    ({"type": "defrag"}, "unknown job type"),
    ({"type": "noop", "mode": "offline", "params": {"n": 1}}, "mode"),
    ({"type": "noop", "mode": 1, "params": {"n": 1}}, "mode"),
    ({"type": "noop", "params": [1]}, "params must be a JSON object"),
    ({"type": "noop", "params": {}}, "n is required"),
    ({"type": "noop", "params": {"n": "5"}}, "n must be an integer"),
    ({"type": "noop", "params": {"n": True}}, "n must be an integer"),
    ({"type": "noop", "params": {"n": -1}}, "within"),
    ({"type": "noop", "params": {"n": 10 ** 12}}, "within"),
    ({"type": "noop", "params": {"n": 1, "delay_ms": 10 ** 9}}, "within"),
    ({"type": "noop", "params": {"n": 1, "nested": {"a": [1]}}}, "unknown parameter"),
    ({"type": "noop", "params": {"n": 1}, "extra": 1}, "unknown field"),
    ({**MIGRATE, "params": {}}, "target"),
    ({**MIGRATE, "params": {"target": "mysql"}}, "target"),
    ({**MIGRATE, "params": {"target": "postgres"}}, "postgres_url is required"),
    ({**MIGRATE, "params": {"target": "postgres", "postgres_url": "http://x"}},
     "postgresql://"),
    ({**MIGRATE, "params": {"target": "sqlite", "force": "yes"}}, "force"),
    ({"type": "encrypt", "params": {"bucket": 5}}, "bucket must be a string"),
    ({"type": "encrypt", "params": {"prefix": "x" * 5000}}, "at most"),
    ({"type": "decrypt", "params": {"rate_bytes_per_sec": -1}}, "within"),
    ({"type": "encrypt", "mode": "maintenance", "params": {"rate_bytes_per_sec": 10}},
     "live mode only"),
])
def test_bad_requests_are_refused_with_a_reason(body: dict[str, Any], words: str) -> None:
    with pytest.raises(JobRequestError, match=words):
        parse_job_request(body)


def test_every_spec_type_is_in_the_table() -> None:
    assert {"noop", "encrypt", "decrypt", "migrate-db"} <= set(rules.JOB_TYPES)


def test_migrate_db_params() -> None:
    wanted = parse_job_request({**MIGRATE, "params": {
        "target": "postgres", "postgres_url": "postgresql://u@h/db", "force": True}})
    assert wanted.params == {"target": "postgres", "postgres_url": "postgresql://u@h/db",
                             "force": True}
    assert parse_job_request({**MIGRATE, "params": {"target": "sqlite"}}).params == {
        "target": "sqlite", "postgres_url": None, "force": False}


def test_rate_limits_are_for_live_jobs() -> None:
    assert parse_job_request({"type": "encrypt", "params": {"rate_bytes_per_sec": 10}}).params == {
        "bucket": None, "prefix": "", "rate_bytes_per_sec": 10}
    assert parse_job_request({"type": "encrypt", "mode": "maintenance",
                              "params": {"rate_bytes_per_sec": 0}}).mode == "maintenance"
