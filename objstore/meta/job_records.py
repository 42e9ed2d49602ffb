"""Maintenance-job records and their state machine (spec: "Maintenance job status"): the
statuses, which move leads where, the record of a job and of a log entry, and the bounds the
store keeps. Below the engine because the store applies a move atomically
(meta/job_queries.py); the rest of the job rules (modes, types, parameters) are
`engine/job_rules.py`'s.

A job moves pending -> running -> completed | failed by the worker's hand; an operator
pauses (pending or running -> paused), resumes (paused -> running) and cancels (any
non-terminal state -> cancelled); any other move is refused. Pending, running and paused
jobs are *active*: at most one at a time.

Pure: no Twisted, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PENDING, RUNNING, PAUSED = "pending", "running", "paused"
COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
STATUSES = (PENDING, RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED)
ACTIVE = frozenset({PENDING, RUNNING, PAUSED})
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})

# Operator moves (the API's) and worker moves.
PAUSE, RESUME, CANCEL = "pause", "resume", "cancel"
START, COMPLETE, FAIL = "start", "complete", "fail"

_MOVES: dict[str, tuple[frozenset[str], str]] = {
    PAUSE: (frozenset({PENDING, RUNNING}), PAUSED),
    RESUME: (frozenset({PAUSED}), RUNNING),
    CANCEL: (ACTIVE, CANCELLED),
    START: (frozenset({PENDING}), RUNNING),
    COMPLETE: (frozenset({RUNNING}), COMPLETED),
    FAIL: (frozenset({RUNNING}), FAILED),
}
OPERATOR_MOVES = (PAUSE, RESUME, CANCEL)

# Log entries kept per job (the oldest go first) and the length of one message.
LOG_ENTRIES_MAX = 200
LOG_MESSAGE_MAX = 1000
LOG_LEVELS = ("info", "warning", "error")


def next_status(current: str, move: str) -> str | None:
    """The status after `move` from `current`; None when the move is not allowed."""
    allowed, target = _MOVES[move]
    return target if current in allowed else None


def is_active(status: str) -> bool:
    return status in ACTIVE


@dataclass(frozen=True)
class JobRecord:
    """A stored job. `cursor` is where its runner stopped (opaque to all but the runner);
    times are float seconds since the epoch."""

    id: str
    job_type: str
    status: str
    mode: str
    params: Mapping[str, Any]
    total: int = 0
    done: int = 0
    rate: float = 0.0
    cursor: str | None = None
    last_error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    runner: str | None = None  # the node id of the worker that runs (or last ran) it


@dataclass(frozen=True)
class JobLogEntry:
    ts: float
    level: str
    message: str
