"""Bucket quotas: the rule, the check inside the store's write transactions (SQLite and
PostgreSQL, concurrent writers included), the engine's refusal that stores nothing, and
the admin use cases that keep the quota durable."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore
from objstore.engine.bucket_config import CONFIG_FAMILY, BucketConfigService
from objstore.engine.changes import Caller
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.engine.quota import (
    QUOTA_CONFIG_KEY,
    QUOTA_RULE,
    BucketQuota,
    NoSuchBucket,
    QuotaCheck,
    QuotaService,
    UsageFigures,
    quota_problem,
)
from objstore.errors import S3Error
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import (
    NULL_VERSION,
    BucketRecord,
    ObjectRecord,
    PartRecord,
    PartRef,
    UploadRecord,
)
from objstore.meta.store import RecordNotFound, SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

BUCKET = "quota"
ALICE = Principal("u-alice", "alice", False, "AKALICE")


def obj(key: str, size: int, version_id: str = NULL_VERSION, *, marker: bool = False
        ) -> ObjectRecord:
    return ObjectRecord(BUCKET, key, version_id, None if marker else f"blob-{key}-{version_id}",
                        size, "e", 10.0, is_delete_marker=marker)


def check(max_bytes: int | None = None, max_objects: int | None = None) -> QuotaCheck:
    return QuotaCheck(BUCKET, BucketQuota(max_bytes, max_objects))


# -- the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(("quota", "before", "after", "refused"), [
    (BucketQuota(), (10, 10), (99, 99), False),
    (BucketQuota(max_objects=2), (1, 0), (2, 0), False),
    (BucketQuota(max_objects=2), (2, 0), (3, 0), True),
    (BucketQuota(max_bytes=100), (1, 60), (2, 100), False),
    (BucketQuota(max_bytes=100), (1, 60), (2, 101), True),
    (BucketQuota(max_bytes=0), (0, 0), (1, 0), False),  # empty objects fit a zero quota
    (BucketQuota(max_objects=0), (0, 0), (1, 0), True),
    # over a lowered quota already: a write that does not grow a dimension passes
    (BucketQuota(max_bytes=10, max_objects=1), (5, 50), (5, 40), False),
    (BucketQuota(max_bytes=10, max_objects=1), (5, 50), (5, 51), True),
])
def test_quota_problem(quota: BucketQuota, before: tuple[int, int], after: tuple[int, int],
                       refused: bool) -> None:
    assert (quota_problem(quota, before, after) is not None) is refused


def test_the_check_raises_quota_exceeded() -> None:
    with pytest.raises(S3Error) as caught:
        check(max_objects=1)((1, 1), (2, 2))
    assert caught.value.code == "QuotaExceeded" and caught.value.status == 403
    assert caught.value.fields["BucketName"] == BUCKET


def test_stored_form() -> None:
    quota = BucketQuota(max_bytes=5, max_objects=None)
    assert BucketQuota.from_json(quota.to_json()) == quota
    assert BucketQuota().unlimited and not quota.unlimited
    with pytest.raises(ValueError):
        BucketQuota.from_json('{"max_bytes": -1}')


# -- inside the store's transactions (both backends) ------------------------------------


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    meta_store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    return meta_store


def test_object_count_limit(store: SyncMetaStore) -> None:
    store.put_object(obj("a", 1), usage_check=check(max_objects=2))
    store.put_object(obj("b", 1), usage_check=check(max_objects=2))
    with pytest.raises(S3Error, match="QuotaExceeded"):
        store.put_object(obj("c", 1), usage_check=check(max_objects=2))
    assert store.get_object(BUCKET, "c") is None
    assert store.bucket_usage(BUCKET) == (2, 2)
    # an overwrite of the null version adds no object
    store.put_object(obj("a", 3), usage_check=check(max_objects=2))
    assert store.bucket_usage(BUCKET) == (2, 4)


def test_byte_limit_counts_what_an_overwrite_replaces(store: SyncMetaStore) -> None:
    store.put_object(obj("a", 60), usage_check=check(max_bytes=100))
    store.put_object(obj("a", 100), usage_check=check(max_bytes=100))  # 60 replaced
    with pytest.raises(S3Error, match="QuotaExceeded"):
        store.put_object(obj("b", 1), usage_check=check(max_bytes=100))
    store.put_object(obj("a", 0), usage_check=check(max_bytes=100))
    assert store.bucket_usage(BUCKET) == (1, 0)


def test_every_version_counts_and_markers_never_do(store: SyncMetaStore) -> None:
    store.put_object(obj("k", 10, "v1"), usage_check=check(max_objects=2))
    store.put_object(obj("k", 10, "v2"), usage_check=check(max_objects=2))
    with pytest.raises(S3Error, match="QuotaExceeded"):
        store.put_object(obj("k", 10, "v3"), usage_check=check(max_objects=2))
    store.put_object(obj("k", 0, "m1", marker=True), usage_check=check(max_objects=2))
    latest = store.get_object(BUCKET, "k")
    assert latest is not None and latest.is_delete_marker
    assert store.bucket_usage(BUCKET) == (2, 20)


def test_a_refused_completion_changes_nothing(store: SyncMetaStore) -> None:
    store.create_upload(UploadRecord("up", BUCKET, "big", initiated_at=1.0))
    part = PartRecord("up", 1, "part-blob", 50, "pe", 2.0)
    store.put_part(part)
    record = ObjectRecord(BUCKET, "big", NULL_VERSION, "composite", 50, "x-1", 3.0,
                          parts=(PartRef(1, "part-blob", 50, "pe"),))
    with pytest.raises(S3Error, match="QuotaExceeded"):
        store.complete_upload("up", record, usage_check=check(max_bytes=49))
    assert store.get_upload("up") is not None
    assert [p.blob_id for p in store.list_parts("up")] == ["part-blob"]
    assert store.get_object(BUCKET, "big") is None
    store.complete_upload("up", record, usage_check=check(max_bytes=50))
    assert store.bucket_usage(BUCKET) == (1, 50)


def race(writers: int, put: Callable[[int], object]) -> list[bool]:
    """Run `put(n)` for n in range(writers), all released at once; which were accepted."""
    start = threading.Barrier(writers)

    def write(n: int) -> bool:
        start.wait()
        try:
            put(n)
        except S3Error:
            return False
        return True

    with ThreadPoolExecutor(writers) as pool:
        return list(pool.map(write, range(writers)))


def test_concurrent_writers_never_overshoot(store: SyncMetaStore) -> None:
    limit, writers = 5, 12
    outcomes = race(writers, lambda n: store.put_object(
        obj(f"k{n}", 10), usage_check=check(max_objects=limit, max_bytes=10 * limit)))
    assert outcomes.count(True) == limit
    assert store.bucket_usage(BUCKET) == (limit, 10 * limit)


def test_the_rule_reads_the_quota_inside_the_write(store: SyncMetaStore) -> None:
    store.put_object(obj("a", 10), usage_rule=QUOTA_RULE)  # no quota document: no limit
    store.put_bucket_config(BUCKET, QUOTA_CONFIG_KEY, BucketQuota(max_objects=2).to_json())
    store.put_object(obj("b", 10), usage_rule=QUOTA_RULE)
    with pytest.raises(S3Error) as caught:
        store.put_object(obj("c", 10), usage_rule=QUOTA_RULE)
    assert caught.value.code == "QuotaExceeded"
    assert store.get_object(BUCKET, "c") is None
    store.put_object(obj("b", 20), usage_rule=QUOTA_RULE)  # replaces: the count holds
    store.put_object(obj("k", 0, "m1", marker=True), usage_rule=QUOTA_RULE)
    assert store.bucket_usage(BUCKET) == (2, 30)
    store.put_bucket_config(BUCKET, QUOTA_CONFIG_KEY, BucketQuota().to_json())
    store.put_object(obj("c", 10), usage_rule=QUOTA_RULE)  # unlimited document
    with pytest.raises(RecordNotFound):
        store.put_object(replace(obj("x", 1), bucket="no-such-bucket"), usage_rule=QUOTA_RULE)


def test_concurrent_writers_under_the_rule_never_overshoot(store: SyncMetaStore) -> None:
    limit, writers = 5, 12
    store.put_bucket_config(BUCKET, QUOTA_CONFIG_KEY, BucketQuota(max_objects=limit).to_json())
    outcomes = race(writers, lambda n: store.put_object(obj(f"k{n}", 10),
                                                        usage_rule=QUOTA_RULE))
    assert outcomes.count(True) == limit
    assert store.bucket_usage(BUCKET) == (limit, 10 * limit)


# -- the engine and the admin use cases (SQLite) -----------------------------------------


@pytest.fixture
def engine_parts(tmp_path: Path) -> Any:
    from objstore.meta.dialect import create_db_engine

    sql = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2),
                       clock=lambda: 1000.0)
    sql.migrate()
    sql.create_bucket(BucketRecord(BUCKET, "u-alice", "us-east-1", 1.0))
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    control = ControlRecord(str(tmp_path / "data"), fsync=False)
    control.prepare()
    meta = MetaStore(sql, SyncDbPool())
    objects = ObjectService(meta, blobs, InlinePool(), clock=lambda: 2000.0)
    documents = BucketConfigService(meta, control, InlinePool(), clock=lambda: 3000.0)
    yield sql, blobs, control, objects, QuotaService(meta, documents)
    sql.close()


def body(blobs: BlobStore, data: bytes) -> BodySpool:
    spool = BodySpool(blobs.tmp_dir, memory_limit=1024)
    spool.write(data)
    return spool


def test_a_refused_put_stores_nothing(engine_parts: Any) -> None:
    sql, blobs, _control, objects, quotas = engine_parts
    run(quotas.put(Caller(ALICE), BUCKET, BucketQuota(max_bytes=8)))
    run(objects.put(Caller(ALICE), BUCKET, "a", body(blobs, b"12345"), ObjectAttrs()))
    before = {info.blob_id for info in blobs.iter_blobs()}
    with pytest.raises(S3Error) as caught:
        run(objects.put(Caller(ALICE), BUCKET, "b", body(blobs, b"12345"), ObjectAttrs()))
    assert caught.value.code == "QuotaExceeded"
    assert {info.blob_id for info in blobs.iter_blobs()} == before
    assert sql.get_object(BUCKET, "b") is None
    run(quotas.delete(Caller(ALICE), BUCKET))
    run(objects.put(Caller(ALICE), BUCKET, "b", body(blobs, b"12345"), ObjectAttrs()))
    assert sql.bucket_usage(BUCKET) == (2, 10)


def test_admin_use_cases_are_durable(engine_parts: Any) -> None:
    sql, _blobs, control, _objects, quotas = engine_parts
    assert run(quotas.get(BUCKET)) == (BucketQuota(), UsageFigures(0, 0))
    run(quotas.put(Caller(ALICE), BUCKET, BucketQuota(max_objects=3)))
    assert run(quotas.get(BUCKET))[0] == BucketQuota(max_objects=3)
    assert dict(control.items(CONFIG_FAMILY))[f"{BUCKET}:{QUOTA_CONFIG_KEY}"]["value"] == \
        BucketQuota(max_objects=3).to_json()
    run(quotas.put(Caller(ALICE), BUCKET, BucketQuota()))  # unlimited: removed
    assert sql.get_bucket_config(BUCKET, QUOTA_CONFIG_KEY) is None
    assert list(control.items(CONFIG_FAMILY)) == []
    for call in (quotas.get("nope"), quotas.put(Caller(ALICE), "nope", BucketQuota(1)),
                 quotas.delete(Caller(ALICE), "nope")):
        with pytest.raises(NoSuchBucket):
            run(call)
