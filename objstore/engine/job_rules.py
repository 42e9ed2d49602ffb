"""The rules of maintenance jobs (spec: "Maintenance job" and "Maintenance job status"): the
job record, the state machine, the modes and the table of job types with the validation of
each type's parameters.

The statuses, the moves and the records live below the store (`meta/job_records.py`,
re-exported here), which applies a move atomically; the worker (`workers/jobs.py`) makes
the pending -> running -> completed | failed moves, an operator pause, resume and cancel.

`JOB_TYPES` lists every type the spec names, each with its parameter validation; whether a
type can run here is the worker's runner table (`workers/jobs.py` RUNNERS): a type without a
runner is validated and then refused as not yet available (every type has one now).
migrate-db runs in maintenance mode only (writes arriving during its copy would be lost by
the switch). A new type is one row here and one runner there.

Pure: no Twisted, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from objstore.meta.job_records import (
    ACTIVE,
    CANCEL,
    CANCELLED,
    COMPLETE,
    COMPLETED,
    FAIL,
    FAILED,
    LOG_ENTRIES_MAX,
    LOG_LEVELS,
    LOG_MESSAGE_MAX,
    OPERATOR_MOVES,
    PAUSE,
    PAUSED,
    PENDING,
    RESUME,
    RUNNING,
    START,
    STATUSES,
    TERMINAL,
    JobLogEntry,
    JobRecord,
    is_active,
    next_status,
)

LIVE, MAINTENANCE = "live", "maintenance"
MODES = (LIVE, MAINTENANCE)
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 500


class JobError(Exception):
    """A runner's expected failure (a refused target, a missing key): the job fails with
    this message, logged in one line without a traceback."""


class JobParamsError(ValueError):
    """Parameters a job type refuses (the message says which and why)."""


@dataclass(frozen=True)
class Progress:
    """What a runner reports after a step: where it is and how far along."""

    cursor: str | None
    done: int
    total: int
    finished: bool = False


def rate_per_second(done_since: int, seconds: float) -> float:
    """Items per second over a stretch of the run (0 before any time has passed)."""
    return round(done_since / seconds, 3) if seconds > 0 and done_since > 0 else 0.0


# -- parameters --------------------------------------------------------------------------


Params = dict[str, Any]


def _only(params: Mapping[str, Any], names: tuple[str, ...], job_type: str) -> None:
    unknown = sorted(set(params) - set(names))
    if unknown:
        known = ", ".join(names) if names else "none"
        raise JobParamsError(f"unknown parameter {unknown[0]!r} for {job_type} "
                             f"(it takes: {known})")


def _integer(params: Mapping[str, Any], name: str, *, low: int, high: int,
             default: int | None = None) -> int:
    value = params.get(name, default)
    if value is None:
        raise JobParamsError(f"{name} is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobParamsError(f"{name} must be an integer")
    if not low <= value <= high:
        raise JobParamsError(f"{name} must be within {low}..{high}")
    return value


def _text(params: Mapping[str, Any], name: str, *, max_length: int = 1024) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise JobParamsError(f"{name} must be a string")
    if len(value) > max_length or "\x00" in value:
        raise JobParamsError(f"{name} must be at most {max_length} characters, without NUL")
    return value


def _flag(params: Mapping[str, Any], name: str) -> bool:
    value = params.get(name, False)
    if not isinstance(value, bool):
        raise JobParamsError(f"{name} must be true or false")
    return value


NOOP_MAX_STEPS = 10_000_000
NOOP_MAX_DELAY_MS = 60_000


def noop_params(params: Mapping[str, Any]) -> Params:
    """n steps (required, 0..10,000,000), delay_ms between them (default 0, at most 60 s)."""
    _only(params, ("n", "delay_ms"), "noop")
    return {"n": _integer(params, "n", low=0, high=NOOP_MAX_STEPS),
            "delay_ms": _integer(params, "delay_ms", low=0, high=NOOP_MAX_DELAY_MS, default=0)}


def rewrite_params(job_type: str) -> Callable[[Mapping[str, Any]], Params]:
    """encrypt, decrypt, compress, decompress: bucket and prefix (optional) and
    rate_bytes_per_sec (optional, 0 = unlimited)."""

    def parse(params: Mapping[str, Any]) -> Params:
        _only(params, ("bucket", "prefix", "rate_bytes_per_sec"), job_type)
        parsed: Params = {"bucket": _text(params, "bucket", max_length=63),
                          "prefix": _text(params, "prefix") or "",
                          "rate_bytes_per_sec": _integer(params, "rate_bytes_per_sec", low=0,
                                                         high=2 ** 62, default=0)}
        return parsed

    return parse


def rotate_key_params(params: Mapping[str, Any]) -> Params:
    _only(params, ("bucket", "prefix"), "rotate-key")
    return {"bucket": _text(params, "bucket", max_length=63),
            "prefix": _text(params, "prefix") or ""}


def replicate_existing_params(params: Mapping[str, Any]) -> Params:
    """bucket (required): the bucket whose existing objects are journaled."""
    _only(params, ("bucket",), "replicate-existing")
    bucket = _text(params, "bucket", max_length=63)
    if not bucket:
        raise JobParamsError("bucket is required")
    return {"bucket": bucket}


DB_TARGETS = ("sqlite", "postgres")


def migrate_db_params(params: Mapping[str, Any]) -> Params:
    """target (sqlite or postgres, required), postgres_url (required for postgres), force."""
    _only(params, ("target", "postgres_url", "force"), "migrate-db")
    target = _text(params, "target")
    if target not in DB_TARGETS:
        raise JobParamsError("target must be 'sqlite' or 'postgres'")
    url = _text(params, "postgres_url")
    if target == "postgres" and not url:
        raise JobParamsError("postgres_url is required with target 'postgres'")
    if url is not None and not url.startswith(("postgresql://", "postgres://",
                                               "postgresql+psycopg2://")):
        raise JobParamsError("postgres_url must be a postgresql:// URL")
    return {"target": target, "postgres_url": url, "force": _flag(params, "force")}


@dataclass(frozen=True)
class JobType:
    name: str
    parse_params: Callable[[Mapping[str, Any]], Params]
    summary: str = ""
    # Modes it may run in (every mode unless narrowed).
    modes: tuple[str, ...] = field(default=MODES)
    # Why a node of a cluster refuses it (None: it runs in a cluster too).
    not_in_cluster: str | None = None


JOB_TYPES: Mapping[str, JobType] = {t.name: t for t in (
    JobType("noop", noop_params, "n steps, delay_ms apart (tests and drills)"),
    JobType("encrypt", rewrite_params("encrypt"), "encrypt stored objects in place"),
    JobType("decrypt", rewrite_params("decrypt"), "decrypt stored objects in place"),
    JobType("compress", rewrite_params("compress"), "compress a bucket's objects"),
    JobType("decompress", rewrite_params("decompress"), "decompress a bucket's objects"),
    JobType("rotate-key", rotate_key_params, "re-wrap data keys with the current key"),
    JobType("migrate-db", migrate_db_params, "copy the metadata database to the other "
            "backend and switch to it", modes=(MAINTENANCE,),
            not_in_cluster="it copies and switches the database of the node that runs it "
            "only, while its peers keep replicating to the database it leaves; moving the "
            "nodes of a cluster to another backend is not supported yet"),
    JobType("replicate-existing", replicate_existing_params, "journal a bucket's existing "
            "objects for its ExistingObjectReplication rules"),
)}


def cluster_refusal(job_type: str, clustered: bool) -> str | None:
    """Why a node of a cluster (`clustered`) refuses to create a job of `job_type`; None
    when it may."""
    spec = JOB_TYPES.get(job_type)
    if not clustered or spec is None or spec.not_in_cluster is None:
        return None
    return f"{job_type} is refused on a node of a cluster: {spec.not_in_cluster}."


@dataclass(frozen=True)
class JobRequest:
    job_type: str
    mode: str
    params: Params


class JobRequestError(ValueError):
    """A job creation request that is malformed (400)."""


def parse_job_request(body: Mapping[str, Any]) -> JobRequest:
    """{type (required), mode? (live by default), params?} checked against the type table."""
    unknown = sorted(set(body) - {"type", "mode", "params"})
    if unknown:
        raise JobRequestError(f"unknown field {unknown[0]!r}; a job has type, mode and params")
    job_type = body.get("type")
    if not isinstance(job_type, str) or not job_type:
        raise JobRequestError("type is required (one of: " + ", ".join(JOB_TYPES) + ")")
    spec = JOB_TYPES.get(job_type)
    if spec is None:
        raise JobRequestError(f"unknown job type {job_type[:64]!r} (one of: "
                              + ", ".join(JOB_TYPES) + ")")
    mode = body.get("mode", LIVE)
    if mode is None:
        mode = LIVE
    if not isinstance(mode, str) or mode not in MODES:
        raise JobRequestError("mode must be 'live' or 'maintenance'")
    if mode not in spec.modes:
        raise JobRequestError(f"{job_type} runs in {' or '.join(spec.modes)} mode only")
    params = body.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise JobRequestError("params must be a JSON object")
    try:
        parsed = spec.parse_params(params)
    except JobParamsError as error:
        raise JobRequestError(f"{job_type}: {error}") from None
    if mode == MAINTENANCE and parsed.get("rate_bytes_per_sec"):
        raise JobRequestError(f"{job_type}: rate_bytes_per_sec applies in live mode only")
    return JobRequest(job_type, mode, parsed)


__all__ = [
    "ACTIVE", "CANCEL", "CANCELLED", "COMPLETE", "COMPLETED", "FAIL", "FAILED", "JOB_TYPES",
    "LIST_LIMIT_DEFAULT", "LIST_LIMIT_MAX", "LIVE", "LOG_ENTRIES_MAX", "LOG_LEVELS",
    "LOG_MESSAGE_MAX", "MAINTENANCE", "MODES", "OPERATOR_MOVES", "PAUSE", "PAUSED", "PENDING",
    "RESUME", "RUNNING", "START", "STATUSES", "TERMINAL", "JobError", "JobLogEntry",
    "JobParamsError",
    "JobRecord", "JobRequest", "JobRequestError", "JobType", "Progress", "cluster_refusal",
    "is_active",
    "next_status", "parse_job_request", "rate_per_second",
]
