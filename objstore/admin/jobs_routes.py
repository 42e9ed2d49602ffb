"""Maintenance-job endpoints of the admin API (Klein, mounted by `AdminApi` under /admin):

  POST   /maintenance/jobs              {type, mode?, params?} -> 201 job
  GET    /maintenance/jobs?limit=N      -> 200 {active: job or null, jobs: newest first}
  GET    /maintenance/jobs/{id}         -> 200 {job, logs}
  POST   /maintenance/jobs/{id}/pause   -> 200 job
  POST   /maintenance/jobs/{id}/resume  -> 200 job
  DELETE /maintenance/jobs/{id}         -> 200 job (cancelled)

Errors: 400 for an unknown type or mode, malformed params or limit; 404 for an unknown job;
409 when a job is active (creation), the move is not allowed from the job's status, or the
type does not run on a node of a cluster (`migrate-db`: job_rules.cluster_refusal); 501
for a known type this build can not run yet. The rules are `engine/job_rules.py`'s, the
records `meta/job_queries.py`'s; the worker that runs jobs is `workers/jobs.py`.

Authorization: root, or a grant allowing `*` (AdministratorAccess): the policy language has
no maintenance action, and a job may rewrite every object or switch the database.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from twisted.internet.defer import Deferred

from objstore.admin.api import install_json_errors, json_body
from objstore.admin.gate import ADMINISTRATOR, AdminGate, authorized_route
from objstore.admin.view_params import parse_limit, query_params
from objstore.admin.views import JsonObject, iso, read_json
from objstore.engine import job_rules as rules
from objstore.engine.job_rules import JobLogEntry, JobRecord, JobRequestError, parse_job_request
from objstore.errors import AdminError
from objstore.http.shield import ShieldedKlein
from objstore.http.site import ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.meta.job_queries import JobActive, MoveRefused
from objstore.workers.jobs import runnable

FAMILIES = ("maintenance",)


class JobRecords(Protocol):
    """The store's job queries the routes use (`MetaStore`)."""

    def create_job(self, job: JobRecord) -> Deferred[JobRecord]: ...

    def get_job(self, job_id: str) -> Deferred[JobRecord | None]: ...

    def active_job(self) -> Deferred[JobRecord | None]: ...

    def list_jobs(self, limit: int = ...) -> Deferred[list[JobRecord]]: ...

    def move_job(self, job_id: str, move: str, *, error: str | None = ...
                 ) -> Deferred[JobRecord | None]: ...

    def append_job_log(self, job_id: str, level: str, message: str) -> Deferred[None]: ...

    def job_logs(self, job_id: str) -> Deferred[list[JobLogEntry]]: ...


def _time(value: float | None) -> str | None:
    return None if value is None else iso(value)


def job_view(job: JobRecord) -> JsonObject:
    """The spec's Maintenance job resource."""
    return {
        "id": job.id, "job_type": job.job_type, "status": job.status, "mode": job.mode,
        "params": dict(job.params), "total": job.total, "done": job.done, "rate": job.rate,
        "last_error": job.last_error, "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at), "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
    }


def log_view(entry: JobLogEntry) -> JsonObject:
    return {"time": iso(entry.ts), "level": entry.level, "message": entry.message}


_PAST = {rules.PAUSE: "paused", rules.RESUME: "resumed", rules.CANCEL: "cancelled"}


class JobRoutes:
    app = ShieldedKlein()  # a move completes even when the client leaves
    install_json_errors(app)

    def __init__(self, *, gate: AdminGate, jobs: JobRecords, clustered: bool = False
                 ) -> None:
        self._gate = gate
        self._jobs = jobs
        self._clustered = clustered  # [cluster] enabled

    def resource(self) -> object:
        return self.app.resource()

    @authorized_route(app, "/maintenance/jobs", methods=["POST"], action=ADMINISTRATOR)
    async def create(self, request: ObjstoreRequest, caller: Principal) -> bytes:
        try:
            wanted = parse_job_request(read_json(request))
        except JobRequestError as error:
            raise AdminError("BadRequest", str(error)) from None
        if not runnable(wanted.job_type):
            raise AdminError("NotImplemented", f"The job type {wanted.job_type} is not "
                             "available yet on this server (its parameters are valid).")
        refused = rules.cluster_refusal(wanted.job_type, self._clustered)
        if refused is not None:
            raise AdminError("Conflict", refused)
        job = JobRecord(id=str(uuid.uuid4()), job_type=wanted.job_type, status=rules.PENDING,
                        mode=wanted.mode, params=wanted.params)
        try:
            created = await self._jobs.create_job(job)
        except JobActive as active:
            raise AdminError("Conflict", f"The job {active.job_id} is active; pause does "
                             "not end it: wait for it, or cancel it, first.") from None
        await self._jobs.append_job_log(created.id, "info",
                                        f"created by {caller.username} ({created.mode} mode)")
        return json_body(request, 201, job_view(created))

    @authorized_route(app, "/maintenance/jobs", methods=["GET"], action=ADMINISTRATOR)
    async def list_jobs(self, request: ObjstoreRequest, _caller: Principal) -> bytes:
        limit = parse_limit(query_params(request), rules.LIST_LIMIT_DEFAULT,
                            rules.LIST_LIMIT_MAX)
        active = await self._jobs.active_job()
        jobs = await self._jobs.list_jobs(limit)
        return json_body(request, 200, {"active": None if active is None else job_view(active),
                                        "jobs": [job_view(job) for job in jobs]})

    @authorized_route(app, "/maintenance/jobs/<job_id>", methods=["GET"], action=ADMINISTRATOR)
    async def show(self, request: ObjstoreRequest, _caller: Principal, job_id: str) -> bytes:
        job = await self._jobs.get_job(job_id)
        if job is None:
            raise _no_such_job(job_id)
        logs = await self._jobs.job_logs(job_id)
        return json_body(request, 200, {"job": job_view(job),
                                        "logs": [log_view(entry) for entry in logs]})

    @authorized_route(app, "/maintenance/jobs/<job_id>/pause", methods=["POST"],
                      action=ADMINISTRATOR)
    async def pause(self, request: ObjstoreRequest, caller: Principal, job_id: str) -> bytes:
        return json_body(request, 200, await self._move(job_id, rules.PAUSE, caller))

    @authorized_route(app, "/maintenance/jobs/<job_id>/resume", methods=["POST"],
                      action=ADMINISTRATOR)
    async def resume(self, request: ObjstoreRequest, caller: Principal, job_id: str) -> bytes:
        return json_body(request, 200, await self._move(job_id, rules.RESUME, caller))

    @authorized_route(app, "/maintenance/jobs/<job_id>", methods=["DELETE"],
                      action=ADMINISTRATOR)
    async def cancel(self, request: ObjstoreRequest, caller: Principal, job_id: str) -> bytes:
        return json_body(request, 200, await self._move(job_id, rules.CANCEL, caller))

    async def _move(self, job_id: str, move: str, caller: Principal) -> JsonObject:
        try:
            job = await self._jobs.move_job(job_id, move)
        except MoveRefused as refused:
            raise AdminError("Conflict", f"The job {job_id} is {refused.status}: it can not "
                             f"be {_PAST[move]}.") from None
        if job is None:
            raise _no_such_job(job_id)
        await self._jobs.append_job_log(job_id, "info", f"{_PAST[move]} by {caller.username}")
        return job_view(job)


def _no_such_job(job_id: str) -> AdminError:
    return AdminError("NotFound", f"No maintenance job {job_id[:64]!r}.")


__all__ = ["FAMILIES", "JobRoutes", "job_view", "log_view"]
