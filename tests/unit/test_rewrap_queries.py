"""The stage jobs' queries (meta/rewrap_queries.py) on both backends: the walk by stages
in (bucket, key, version_id) order from a cursor, bucket and prefix filters, the counts,
and the two swaps, made only while the row still holds what was read (a row replaced
meanwhile is left alone; tags changed meanwhile are kept)."""

from __future__ import annotations

from dataclasses import replace

from objstore.meta.store import SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)
from tests.unit.test_metastore import bucket_record, obj

SSE = {"encryption_algorithm": "AES256", "encryption_key_id": "local:a",
       "encryption_params": {"format": "f", "wrapped_key": "w1"}}


def test_walk_counts_and_swaps(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    for name in ("b1", "b2"):
        assert store.create_bucket(bucket_record(name))
    rows = [obj("a/1", "v1", bucket="b1", **SSE), obj("a/1", "v2", bucket="b1"),
            obj("a/2", "v1", bucket="b1", compression="zstd", size=7),
            obj("c/1", "v1", bucket="b1", **SSE), obj("a/1", "v1", bucket="b2", **SSE)]
    for row in rows:
        store.put_object(row)
    store.put_object(obj("a/3", "v9", bucket="b1", is_delete_marker=True, size=0, etag=""))
    walk = store.versions_by_stages("encrypted", None, 10)
    assert [(r.bucket, r.key, r.version_id) for r in walk] == [
        ("b1", "a/1", "v1"), ("b1", "c/1", "v1"), ("b2", "a/1", "v1")]
    after = store.versions_by_stages("encrypted", ("b1", "a/1", "v1"), 1)
    assert [(r.bucket, r.key) for r in after] == [("b1", "c/1")]
    plain = store.versions_by_stages("plain", None, 10, bucket="b1", prefix="a/")
    assert [(r.key, r.version_id) for r in plain] == [("a/1", "v2"), ("a/2", "v1")]
    assert store.count_versions_by_stages("plain", bucket="b1", prefix="a/") == (2, 12)
    assert store.count_versions_by_stages("compressed") == (1, 7)
    assert store.count_encrypted_versions(bucket="b1") == 2
    assert [r.key for r in store.encrypted_versions(None, 10, bucket="b2")] == ["a/1"]

    first = walk[0]
    rewrapped = store.swap_wrapped_key(first, "local:b", {"format": "f", "wrapped_key": "w2"})
    assert rewrapped is not None and rewrapped.encryption_key_id == "local:b"
    assert rewrapped.seq == first.seq
    assert store.swap_wrapped_key(first, "local:c", {"format": "f", "wrapped_key": "w3"}) \
        is None  # it no longer holds the wrap read

    target = plain[0]
    store.update_object(replace(target, tags={"t": "1"}))  # a tag change meanwhile
    swapped = store.swap_blob(target, replace(target, blob_id="new-blob", **SSE))
    assert swapped is not None and swapped.blob_id == "new-blob"
    assert swapped.tags == {"t": "1"} and swapped.encryption_key_id == "local:a"
    assert store.swap_blob(target, replace(target, blob_id="other")) is None  # blob moved on


def test_a_peers_job_rows_are_checked() -> None:
    from objstore.meta.control_snapshot_queries import valid_row

    good = {"id": "j1", "job_type": "noop", "status": "running", "mode": "live",
            "params": '{"n": 1}', "active": 1, "total": 1, "done": 0, "rate": 0.0,
            "cursor": None, "last_error": None, "created_at": 1.0, "updated_at": 2.0,
            "started_at": 1.5, "finished_at": None, "runner": "node-a"}
    assert valid_row("job", good) is not None
    for bad in ({"job_type": "migrate-db"}, {"status": "exploded"}, {"active": 5},
                {"active": None}, {"status": "completed"}, {"params": "[1]"},
                {"params": "{"}, {"done": "many"}):
        assert valid_row("job", {**good, **bad}) is None, bad
    assert valid_row("job", {**good, "status": "completed", "active": None}) is not None
