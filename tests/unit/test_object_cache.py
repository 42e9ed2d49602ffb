"""The object-record cache of GET/HEAD: served from memory until any object write moves
the OBJECTS counter, which every seq-taking store method does after its transaction, in
any process sharing the counters. Real SQLite store, inline DB pool, no reactor."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import objstore.meta as meta_package
from objstore.meta import (  # noqa: F401  (imported: the families the check walks)
    audit_queries,
    bucket_queries,
    grant_queries,
    iam_queries,
    listing_queries,
    metrics_queries,
    object_apply_queries,
    object_queries,
    object_write_queries,
    settings_queries,
    tombstones,
    upload_queries,
)
from objstore.meta.async_store import MetaStore
from objstore.meta.coherence import OBJECTS, LocalCounters, SharedCounters
from objstore.meta.database import changes_objects
from objstore.meta.dialect import create_db_engine
from objstore.meta.object_cache import ObjectCache, objects_ttl_seconds
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import (
    NULL_VERSION,
    BucketRecord,
    ObjectRecord,
    UploadRecord,
    WritePrecondition,
)
from objstore.meta.store import PreconditionNotMet, SyncMetaStore

BUCKET = "cached"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def obj(key: str, etag: str = "e1") -> ObjectRecord:
    return ObjectRecord(BUCKET, key, NULL_VERSION, f"blob-{key}-{etag}", 1, etag, 10.0)


class CountingStore(SyncMetaStore):
    """The real store, with the inline pool that counts the reads MetaStore sends to the
    database."""

    pool: SyncDbPool

    @property
    def reads(self) -> int:
        return self.pool.reads


def _node(path: Path, counters: LocalCounters | SharedCounters, clock: Clock
          ) -> tuple[CountingStore, MetaStore]:
    """One process's store and async MetaStore, wired as service.py wires them."""
    store = CountingStore(create_db_engine("sqlite", str(path / "meta.db"), None, 2))
    store.pool = SyncDbPool()

    def objects_changed() -> None:
        counters.bump(OBJECTS)

    store.objects_changed = objects_changed
    cache = ObjectCache(size=100, ttl_seconds=5.0, clock=clock, counters=counters)
    return store, MetaStore(store, store.pool, object_cache=cache)


Node = tuple[CountingStore, MetaStore, Clock]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    clock = Clock()
    store, meta = _node(tmp_path, LocalCounters(), clock)
    store.migrate()
    store.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    yield store, meta, clock
    store.close()


def _get(meta: MetaStore, key: str, version_id: str | None = None) -> ObjectRecord | None:
    found: list[ObjectRecord | None] = []
    meta.get_object(BUCKET, key, version_id, cached=True).addCallback(found.append)
    assert len(found) == 1  # the inline pool answers at once
    return found[0]


def test_repeated_reads_are_served_from_memory_until_the_ttl(node: Node) -> None:
    store, meta, clock = node
    store.put_object(obj("k"))
    assert _get(meta, "k") == _get(meta, "k") == store.get_object(BUCKET, "k")
    assert store.reads == 1  # the one that filled the cache
    assert _get(meta, "missing") is None and _get(meta, "missing") is None
    assert store.reads == 2  # absence is cached too
    clock.now += 5.0
    _get(meta, "k")
    assert store.reads == 3
    meta.get_object(BUCKET, "k")  # a read that decides a write goes to the database
    assert store.reads == 4


def test_every_kind_of_object_write_is_seen_by_the_next_read(node: Node) -> None:
    store, meta, _clock = node
    assert _get(meta, "k") is None
    first = store.put_object(obj("k")).record
    assert _get(meta, "k") == first
    changed = store.update_object(replace(first, tags={"a": "b"}))
    assert _get(meta, "k") == changed
    store.delete_object_version(BUCKET, "k", NULL_VERSION)
    assert _get(meta, "k") is None
    store.insert_recovered([obj("r")])
    assert _get(meta, "r") is not None
    upload = "u-1"
    store.create_upload(UploadRecord(upload, BUCKET, "m", 10.0))
    completed = store.complete_upload(upload, obj("m", "multi")).record
    assert _get(meta, "m") == completed


def _upload(upload_id: str, key: str):  # type: ignore[no-untyped-def]
    from objstore.meta.records import UploadRecord

    return UploadRecord(upload_id, BUCKET, key, "u-1", 10.0)


def test_a_refused_write_still_moves_the_counter(node: Node) -> None:
    store, meta, _clock = node
    store.put_object(obj("k"))
    counters_before = store.reads
    _get(meta, "k")
    with pytest.raises(PreconditionNotMet):
        store.put_object(obj("k", "e2"), WritePrecondition(if_absent=True))
    _get(meta, "k")
    assert store.reads == counters_before + 2  # conservative: the entry was dropped


def test_a_write_in_another_process_is_seen_at_once(tmp_path: Path) -> None:
    # Two "processes": separate stores, caches and counter maps over one file, as workers.
    shared = str(tmp_path / "generations")
    clock = Clock()
    store_a, meta_a = _node(tmp_path, SharedCounters(shared), clock)
    store_b, meta_b = _node(tmp_path, SharedCounters(shared), clock)
    store_a.migrate()
    store_a.create_bucket(BucketRecord(BUCKET, "u-1", "us-east-1", 1.0))
    try:
        store_a.put_object(obj("k"))
        assert _get(meta_b, "k") is not None and _get(meta_b, "k") == _get(meta_a, "k")
        replaced = store_a.put_object(obj("k", "e2")).record
        assert _get(meta_b, "k") == replaced
        store_a.delete_object_version(BUCKET, "k", NULL_VERSION)
        assert _get(meta_b, "k") is None
    finally:
        store_a.close()
        store_b.close()


def test_a_read_that_raced_a_write_is_not_kept(node: Node) -> None:
    store, _meta, clock = node
    counters = LocalCounters()
    cache = ObjectCache(size=10, ttl_seconds=5.0, clock=clock, counters=counters)
    token = cache.token()
    stale = store.get_object(BUCKET, "k")  # read before ...
    counters.bump(OBJECTS)  # ... a write commits (in any process)
    cache.store((BUCKET, "k", None), stale, token)
    assert cache.get((BUCKET, "k", None)) == (False, None)


def _takes_db(fn: Callable[..., object]) -> bool:
    parameters = list(inspect.signature(fn).parameters)
    return bool(parameters) and parameters[0] == "db"


def test_every_query_that_takes_a_seq_tells_the_caches() -> None:
    # The coherence of the object caches rests on this: a new write path that takes a seq
    # (changes object rows) without `changes_objects` would leave stale reads. Helpers (no
    # Database of their own) run inside a query's transaction: a query that calls one that
    # takes a seq takes a seq too.
    families = [m for name, m in inspect.getmembers(meta_package, inspect.ismodule)
                if name.endswith("_queries") or name == "tombstones"]
    functions = {f"{m.__name__}.{name}": f for m in families
                 for name, f in inspect.getmembers(m, inspect.isfunction)
                 if f.__module__ == m.__name__}
    sources = {q: inspect.getsource(getattr(f, "__wrapped__", f)) for q, f in functions.items()}
    # Helper classes too (a batch delete's `_DeleteBatch`): one that takes a seq in any of
    # its methods makes its constructor a mark.
    classes = {f"{m.__name__}.{name}": inspect.getsource(c) for m in families
               for name, c in inspect.getmembers(m, inspect.isclass)
               if c.__module__ == m.__name__}
    marks = {"next_seq("}
    while True:
        more = {f"{q.rsplit('.', 1)[1]}(" for q, f in functions.items()
                if not _takes_db(f) and any(mark in sources[q] for mark in marks)}
        more |= {f"{q.rsplit('.', 1)[1]}(" for q, source in classes.items()
                 if any(mark in source for mark in marks)}
        if more <= marks:
            break
        marks |= more
    takers = {q for q, f in functions.items()
              if _takes_db(f) and any(mark in sources[q] for mark in marks)}
    for qualified in takers:
        fn = functions[qualified]
        assert fn.__code__.co_qualname.startswith(changes_objects.__name__ + "."), (
            f"{qualified} takes a seq without @changes_objects")
    assert {q.rsplit(".", 1)[1] for q in takers} == {
        "put_object", "delete_object_version", "delete_object_versions", "update_object",
        "complete_upload",
        "insert_recovered", "apply_replicated_object", "apply_replicated_objects",
        "apply_replicated_delete", "journal_finish", "swap_blob", "swap_wrapped_key"}


@pytest.mark.parametrize(("configured", "general", "backend", "expected"), [
    (None, 5.0, "sqlite", 60.0),  # one node's database: the counter sees every writer
    (None, 120.0, "sqlite", 120.0),  # never shorter than the general TTL asks
    (None, 5.0, "postgres", 5.0),  # another node may share the database
    (None, 0.0, "sqlite", 0.0),  # ttl_seconds = 0 turns the caches off, this one too
    (2.0, 5.0, "sqlite", 2.0),  # set on its own, it wins
    (0.0, 5.0, "sqlite", 0.0),
    (30.0, 0.0, "postgres", 30.0),
])
def test_the_ttl_of_object_records_by_backend_unless_set(
        configured: float | None, general: float, backend: str, expected: float) -> None:
    assert objects_ttl_seconds(configured, general, backend) == expected
