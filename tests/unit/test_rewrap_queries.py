"""The stage jobs' queries (meta/rewrap_queries.py) on both backends: the walk by stages
in (bucket, key, version_id) order from a cursor, bucket and prefix filters, the counts,
and the two swaps, made only while the row still holds what was read (a row replaced
meanwhile is left alone; tags changed meanwhile are kept)."""

from __future__ import annotations

from dataclasses import replace

from objstore.meta.records import PartRecord, PartRef, UploadRecord
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
    # A fresh seq and a stages stamp (so anti-entropy carries it); the client's stamps stay.
    assert rewrapped.seq > first.seq and rewrapped.stages_updated_at is not None
    assert (rewrapped.last_modified, rewrapped.lock_updated_at, rewrapped.tags_updated_at) \
        == (first.last_modified, first.lock_updated_at, first.tags_updated_at)
    assert store.swap_wrapped_key(first, "local:c", {"format": "f", "wrapped_key": "w3"}) \
        is None  # it no longer holds the wrap read

    target = plain[0]
    store.update_object(replace(target, tags={"t": "1"}))  # a tag change meanwhile
    swapped = store.swap_blob(target, replace(target, blob_id="new-blob", **SSE))
    assert swapped is not None and swapped.blob_id == "new-blob"
    assert swapped.tags == {"t": "1"} and swapped.encryption_key_id == "local:a"
    assert swapped.stages_updated_at is not None and swapped.last_modified == target.last_modified
    assert store.swap_blob(target, replace(target, blob_id="other")) is None  # blob moved on
    again = store.swap_blob(swapped, replace(swapped, blob_id="newer-blob"))
    assert again is not None and again.seq > swapped.seq
    assert again.stages_updated_at > swapped.stages_updated_at  # never equal nor older
    changed = store.changed_since(swapped.seq - 1, 10)  # what a peer's next pull sees
    assert [entry.record.blob_id for entry in changed.entries if entry.record is not None
            and entry.record.key == target.key] == ["newer-blob"]


def test_a_composites_parts_keys_swap_with_the_row(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    assert store.create_bucket(bucket_record("b1"))
    parts = (PartRef(1, "p1", 5, "e1", encryption_params={"format": "f", "wrapped_key": "a"}),
             PartRef(2, "p2", 3, "e2", encryption_params={"format": "f", "wrapped_key": "b"}))
    composite = obj("m", "v1", bucket="b1", parts=parts, size=8, etag="x-2",
                    encryption_algorithm="AES256", encryption_key_id="local:a",
                    encryption_params={"format": "f", "keys": "per-part"})
    store.put_object(composite)
    (read,) = store.encrypted_versions(None, 10)
    store.update_object(replace(read, tags={"t": "1"}))  # a change meanwhile: a new seq
    assert store.swap_wrapped_key(read, "local:b", read.encryption_params, parts) is None
    (read,) = store.encrypted_versions(None, 10)
    fresh = tuple(replace(p, encryption_params={"format": "f", "wrapped_key": p.etag})
                  for p in parts)
    stored = store.swap_wrapped_key(read, "local:b", read.encryption_params, fresh)
    assert stored is not None and stored.parts == fresh
    assert stored.encryption_key_id == "local:b"
    assert store.swap_wrapped_key(read, "local:c", read.encryption_params, parts) is None


def test_open_uploads_parts_walk_and_swap(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    assert store.create_bucket(bucket_record("b1"))
    for upload_id, key in (("u1", "a/x"), ("u2", "b/y")):
        store.create_upload(UploadRecord(upload_id, "b1", key, 10.0))
        for number in (1, 2):
            store.put_part(PartRecord(upload_id, number, f"{upload_id}-{number}", 5, "e", 11.0,
                                      encryption_params={"format": "f", "wrapped_key": "w",
                                                         "key_id": "local:a"}))
    store.create_upload(UploadRecord("u3", "b1", "a/plain", 10.0))
    store.put_part(PartRecord("u3", 1, "u3-1", 5, "e", 11.0))
    walked = store.wrapped_parts(None, 10)
    assert [(u.key, p.upload_id, p.part_number) for u, p in walked] == [
        ("a/x", "u1", 1), ("a/x", "u1", 2), ("b/y", "u2", 1), ("b/y", "u2", 2)]
    assert [p.part_number for _, p in store.wrapped_parts(("u1", 2), 10, prefix="b/")] \
        == [1, 2]
    assert store.count_wrapped_parts() == 4 and store.count_wrapped_parts(prefix="a/") == 2
    part = walked[0][1]
    fresh = {"format": "f", "wrapped_key": "w2", "key_id": "local:b"}
    stored = store.swap_part_key(part, fresh)
    assert stored is not None and stored.encryption_params == fresh
    assert 0 < stored.last_modified - part.last_modified < 1e-3  # newer for the merge
    assert store.swap_part_key(part, fresh) is None  # no longer the wrap read
    assert store.list_parts("u1")[0].encryption_params == fresh


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
