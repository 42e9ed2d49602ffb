"""The `migrate-db` maintenance job: the whole metadata database copied to the other
backend (meta/db_copy.py) and the node switched to it at its next start (the node-local
file `<data_dir>/control/metadata-backend.json`, which the config loader reads over
[storage]). One step, on a DB-sized thread of the IO pool; the node keeps serving from the
source until it restarts, so the operator runs it in maintenance mode with the traffic
stopped and restarts the node when it completes (writes during the copy fail the job).

Params: target (sqlite or postgres), postgres_url (postgres), force (replace a target
that holds data). The SQLite target is the node's own `[storage] sqlite_path` (default
`<data_dir>/meta/objstore.db`). A node of a cluster refuses it (the admin API at creation,
with 409; this runner too, for a job created before the node joined a cluster).
"""

from __future__ import annotations

from typing import Any

from objstore.engine.job_rules import JobError, JobRecord, Progress, cluster_refusal
from objstore.meta.database import sqlite_path_for
from objstore.meta.db_copy import (
    TargetNotEmpty,
    WritesDuringCopy,
    copy_database,
    write_override,
)
from objstore.meta.dialect import create_db_engine


class MigrateDbRunner:
    """`services`: sync_store (the SyncMetaStore: its engine is the source), storage (the
    [storage] settings), io (a thread pool), clustered ([cluster] enabled; absent: no)."""

    def __init__(self, job: JobRecord, context: Any) -> None:
        self._job = job
        self._context = context
        services = context.services
        self._source = services["sync_store"].engine
        self._storage = services["storage"]
        self._io = services["io"]
        self._clustered = bool(services.get("clustered", False))

    async def step(self, cursor: str | None) -> Progress:
        refused = cluster_refusal(self._job.job_type, self._clustered)
        if refused is not None:
            raise JobError(refused)
        params = self._job.params
        target = params["target"]
        url = params.get("postgres_url")
        storage = self._storage
        if target == storage.metadata_backend and (target == "sqlite"
                                                   or url == storage.postgres_url):
            raise JobError(f"the node's metadata database already is this {target} "
                               "database")
        await self._context.log("info", f"copying the {storage.metadata_backend} database "
                                f"to {target}")
        try:
            copied = await self._io.run(self._copy, target, url, bool(params.get("force")))
        except (TargetNotEmpty, WritesDuringCopy) as error:
            raise JobError(str(error)) from None
        path = await self._io.run(write_override, str(storage.data_dir), target, url,
                                  job_id=self._job.id, at=self._context.clock.seconds())
        await self._context.log("info", f"{copied} rows copied; the node switches to {target} "
                                f"at its next start ({path}): restart it now")
        return Progress("copied", copied, copied, finished=True)

    def _copy(self, target: str, url: str | None, force: bool) -> int:
        engine = create_db_engine(target, sqlite_path_for(self._storage)
                                  if target == "sqlite" else None, url, 2)
        try:
            return copy_database(self._source, engine, force=force, job_id=self._job.id,
                                 finished_at=self._context.clock.seconds())
        finally:
            engine.dispose()
