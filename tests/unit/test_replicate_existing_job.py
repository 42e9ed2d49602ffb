"""The `replicate-existing` maintenance job's runner (workers/replicate_existing.py) on
SQLite and PostgreSQL: a step journals a page of keys and answers the last one as its
cursor; a runner made again from the recorded job (a restart) goes on after that cursor
and journals each key once; replicas and delete markers are skipped; a bucket without an
ExistingObjectReplication rule fails the job with its reason."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock

from objstore.engine.job_rules import JobError, Progress
from objstore.errors import S3Error
from objstore.meta.async_store import MetaStore
from objstore.meta.job_records import JobRecord
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.replication_queries import JournalFilter
from objstore.meta.store import SyncMetaStore
from objstore.replication.rules import ReplicationConfiguration
from objstore.s3.replication_xml import parse_replication
from objstore.workers import replicate_existing
from objstore.workers.jobs import JobContext
from objstore.workers.replicate_existing import ReplicateExistingRunner
from tests.unit.conftest import run
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)


def rule(existing: str) -> ReplicationConfiguration:
    return parse_replication((
        "<ReplicationConfiguration><Role></Role><Rule><ID>r</ID><Priority>1</Priority>"
        "<Status>Enabled</Status><Filter><Prefix></Prefix></Filter>"
        "<DeleteMarkerReplication><Status>Disabled</Status></DeleteMarkerReplication>"
        f"<ExistingObjectReplication><Status>{existing}</Status>"
        "</ExistingObjectReplication><Destination><Bucket>arn:aws:s3:::d</Bucket>"
        "<Endpoint>http://127.0.0.1:1</Endpoint><CredentialRef>c</CredentialRef>"
        "</Destination></Rule></ReplicationConfiguration>").encode())


class Rules:
    def __init__(self, config: ReplicationConfiguration | None) -> None:
        self.config = config

    async def get(self, bucket: str) -> ReplicationConfiguration:
        if self.config is None:
            raise S3Error("ReplicationConfigurationNotFoundError", BucketName=bucket)
        return self.config


def context(meta: MetaStore, rules: Rules) -> JobContext:
    async def log(level: str, message: str) -> None:
        pass

    def sleep(seconds: float) -> Any:
        raise AssertionError("no waits")

    return JobContext(clock=Clock(), sleep=sleep, log=log,  # type: ignore[arg-type]
                      services={"meta": meta, "replication": rules})


def job(done: int = 0, total: int = 0) -> JobRecord:
    return JobRecord("j1", "replicate-existing", "running", "live", {"bucket": "src"},
                     total=total, done=done)


def fill(sql: SyncMetaStore) -> None:
    sql.create_bucket(BucketRecord("src", "u-1", "us-east-1", 1.0, versioning="Enabled"))
    for n in range(5):
        sql.put_object(ObjectRecord("src", f"k{n}", f"v{n}", f"b{n}", size=n, etag=f"e{n}",
                                    last_modified=10.0 + n))
    sql.put_object(ObjectRecord("src", "replica", "vr", "br", size=1, etag="er",
                                last_modified=20.0, replication_status="REPLICA"))
    sql.put_object(ObjectRecord("src", "marked", "vm", None, size=0, etag="",
                                last_modified=21.0, is_delete_marker=True))


def test_steps_resume_after_the_recorded_cursor_and_journal_each_key_once(
        meta_store: SyncMetaStore, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    fill(meta_store)
    monkeypatch.setattr(replicate_existing, "STEP_KEYS", 3)
    meta = MetaStore(meta_store, SyncDbPool())
    rules = Rules(rule("Enabled"))
    first: Progress = run(ReplicateExistingRunner(job(), context(meta, rules)).step(None))
    assert not first.finished and first.cursor == "k2" and first.done == 3
    assert first.total == 6  # the bucket's versions (no marker): the estimate until the end
    # A restart: a new runner from the recorded job, from the recorded cursor.
    again = ReplicateExistingRunner(job(first.done, first.total), context(meta, rules))
    second: Progress = run(again.step(first.cursor))
    assert not second.finished and second.cursor == "replica"
    third: Progress = run(again.step(second.cursor))
    assert third.finished and third.done == third.total == 6
    entries, total = meta_store.journal_list(JournalFilter(bucket="src"))
    assert total == 5 and sorted(e.key for e in entries) == [f"k{n}" for n in range(5)]
    run(again.step(first.cursor))  # a step done twice journals nothing new
    assert meta_store.journal_list(JournalFilter(bucket="src"))[1] == 5


def test_a_bucket_without_an_existing_objects_rule_fails_the_job(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    fill(meta_store)
    meta = MetaStore(meta_store, SyncDbPool())
    for rules in (Rules(None), Rules(rule("Disabled"))):
        with pytest.raises(JobError, match="src"):
            run(ReplicateExistingRunner(job(), context(meta, rules)).step(None))
    assert meta_store.journal_list(JournalFilter(bucket="src"))[1] == 0
