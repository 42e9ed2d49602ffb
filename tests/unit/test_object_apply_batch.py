"""The batched apply of replicated rows (`apply_replicated_objects`, anti-entropy's one
transaction per batch) gives, on SQLite and PostgreSQL, the same verdict for each row and
leaves the same rows, latest flags and tombstones as applying the rows one by one
(`apply_replicated_object`); it takes a seq only for the rows it stores, none when it
stores nothing, and answers a row's own error in its place. `register_states` reads what
the verdicts need."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from objstore.meta.apply_statements import (
    KEY_STAMPS,
    REGISTER_STATES,
    key_stamps_values,
    register_states_values,
)
from objstore.meta.driver import driver_statement
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import (
    TOMBSTONE_OBJECT,
    ApplyResult,
    ApplyVerdict,
    RecordNotFound,
    SyncMetaStore,
    object_tombstone_key,
)
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

ONE, BATCH = "one-by-one", "batched"
V1 = "11111111-1111-4111-8111-111111111111"
V2 = "22222222-2222-4222-8222-222222222222"


def blob(n: int) -> str:
    return f"{n:08x}-aaaa-4aaa-8aaa-aaaaaaaaaaaa"


def row(bucket: str, key: str, at: float, n: int, version_id: str = V1,
        **fields: object) -> ObjectRecord:
    values: dict[str, object] = {"size": 3, "etag": f"e{n}", **fields}
    return ObjectRecord(bucket, key, version_id, blob(n), last_modified=at,
                        **values)  # type: ignore[arg-type]


def seed(store: SyncMetaStore, bucket: str) -> None:
    """The local state both buckets start from."""
    store.create_bucket(BucketRecord(bucket, "u-1", "us-east-1", 1.0))
    store.put_object(row(bucket, "newer", 10.0, 1))
    store.put_object(row(bucket, "older", 10.0, 2))
    store.put_object(row(bucket, "same", 10.0, 3))
    store.apply_replicated_delete(bucket, "dead", V1, 20.0)
    store.apply_replicated_delete(bucket, "alive", V1, 20.0)
    store.put_object(row(bucket, "versions", 30.0, 4, version_id=V2))
    store.put_object(row(bucket, "marked", 10.0, 5))


def incoming(bucket: str) -> list[ObjectRecord]:
    """One row per case, in a page's order; `twice` names its register twice."""
    return [
        row(bucket, "new", 5.0, 10),  # no local row: applied
        row(bucket, "newer", 11.0, 11),  # newer than the local row: applied
        row(bucket, "older", 9.0, 12),  # older: the local row stays
        row(bucket, "same", 10.0, 3),  # identical
        row(bucket, "dead", 15.0, 13),  # the tombstone beats it
        row(bucket, "alive", 25.0, 14),  # strictly newer than the tombstone
        row(bucket, "versions", 12.0, 15),  # an old version: applied, not latest
        replace(row(bucket, "marked", 12.0, 16), is_delete_marker=True, size=0),
        row(bucket, "twice", 7.0, 17),
        row(bucket, "twice", 8.0, 18),  # the same register again, newer
        row(bucket, "twice", 7.5, 19),  # and older than what the batch just stored
        row(bucket, "pair", 20.0, 20),  # two versions of one key in one batch:
        row(bucket, "pair", 15.0, 21, version_id=V2),  # the older one is not latest
    ]


def state(store: SyncMetaStore, bucket: str) -> object:
    """Every version and tombstone of `bucket`, without node-local seqs."""
    versions = sorted((r.key, r.version_id, r.is_latest, r.blob_id, r.last_modified,
                       r.is_delete_marker)
                      for r in store.list_versions(bucket, limit=1000))
    stamps = {key: store.get_tombstone(TOMBSTONE_OBJECT,
                                       object_tombstone_key(bucket, key, V1))
              for key in ("dead", "alive")}
    return versions, {key: None if found is None else found[0]
                      for key, found in stamps.items()}


def verdict(answer: ApplyResult | Exception) -> object:
    if isinstance(answer, Exception):
        return type(answer)
    stored = answer.record
    return answer.verdict, answer.orphaned_blob_ids, \
        None if stored is None else (stored.blob_id, stored.is_latest)


def test_a_batch_decides_and_leaves_what_rows_one_by_one_do(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    seed(store, ONE)
    seed(store, BATCH)
    single = [store.apply_replicated_object(record) for record in incoming(ONE)]
    before = store.max_seq()
    batched = store.apply_replicated_objects(incoming(BATCH))
    assert [verdict(a) for a in batched] == [verdict(a) for a in single]
    assert state(store, BATCH) == state(store, ONE)
    applied = [a for a in batched if isinstance(a, ApplyResult) and a.applied]
    assert [a.verdict for a in batched if isinstance(a, ApplyResult)].count(
        ApplyVerdict.KEEP_LOCAL) == 2  # "older" and the last "twice"
    assert {ApplyVerdict.IDENTICAL, ApplyVerdict.DELETED} <= {
        a.verdict for a in batched if isinstance(a, ApplyResult)}
    # One fresh seq per stored row, in order, no gap.
    seqs = [a.record.seq for a in applied if a.record is not None]
    assert seqs == list(range(before + 1, before + 1 + len(applied)))
    assert store.max_seq() == before + len(applied)


def test_a_row_s_own_error_takes_its_place_and_the_others_apply(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    seed(store, BATCH)
    answers = store.apply_replicated_objects([
        row("no-such-bucket", "k", 1.0, 1),
        row(BATCH, "bad-stamp", math.inf, 2),
        row(BATCH, "good", 1.0, 3),
    ])
    assert isinstance(answers[0], RecordNotFound)
    assert isinstance(answers[1], ValueError)
    assert isinstance(answers[2], ApplyResult) and answers[2].applied
    assert store.get_object(BATCH, "good", V1) is not None


def test_a_batch_that_stores_nothing_takes_no_seq(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    seed(store, BATCH)
    before = store.max_seq()
    answers = store.apply_replicated_objects([row(BATCH, "same", 10.0, 3),
                                              row(BATCH, "older", 9.0, 12)])
    assert [verdict(a)[0] for a in answers] == [ApplyVerdict.IDENTICAL,  # type: ignore[index]
                                                ApplyVerdict.KEEP_LOCAL]
    assert store.max_seq() == before
    assert store.apply_replicated_objects([]) == []
    assert store.max_seq() == before


@pytest.mark.parametrize("count", [1, 600])
def test_register_states_reads_rows_and_tombstones(
        meta_store: SyncMetaStore, count: int) -> None:  # noqa: F811
    store = meta_store
    seed(store, BATCH)
    registers = [(BATCH, "newer", V1), (BATCH, "dead", V1), (BATCH, "nothing", V1),
                 (BATCH, "versions", V2)] + [(BATCH, f"absent-{n}", V1)
                                             for n in range(count)]
    states = store.register_states(registers)
    assert len(states) == len(registers)
    newer, dead, nothing, versions = states[:4]
    assert newer[0] is not None and newer[0].blob_id == blob(1) and newer[1] is None
    assert dead == (None, 20.0)
    assert nothing == (None, None)
    assert versions[0] is not None and versions[0].version_id == V2
    assert all(found == (None, None) for found in states[4:])


# Keys the registers' JSON array must carry intact (quotes, backslashes, non-ASCII,
# control characters, a JSON path's own characters).
ODD = ['k "quoted" \\ back', "ключ/☃ é", "tab\tnew\nline", "$[0].x", "\u2028 \U0001f600"]


def odd_key(n: int) -> str:
    return f"{ODD[n % len(ODD)]}-{n}"


@pytest.mark.parametrize("count", [2, 5, 64, 150])
def test_register_states_answers_each_register_in_its_place(
        meta_store: SyncMetaStore, count: int) -> None:  # noqa: F811
    """Registers read in one statement come back each in its own place, named twice or
    not, with its own row and tombstone, whatever their keys hold: as the register read
    alone."""
    store = meta_store
    store.create_bucket(BucketRecord(BATCH, "u-1", "us-east-1", 1.0))
    for n in range(0, count, 2):
        store.put_object(row(BATCH, odd_key(n), 10.0 + n, n))
    for n in range(0, count, 3):
        store.apply_replicated_delete(BATCH, odd_key(n), V1, 5.0 + n)  # older than the row
    registers = [(BATCH, odd_key(n), V1) for n in reversed(range(count))]
    registers.insert(1, registers[-1])  # a register named twice
    states = store.register_states(registers)
    assert len(states) == len(registers)
    for (_, key, _), (local, deleted_at) in zip(registers, states, strict=True):
        n = int(key.rsplit("-", 1)[1])
        if n % 2 == 0:
            assert local is not None and (local.key, local.blob_id) == (key, blob(n))
        else:
            assert local is None
        assert deleted_at == (5.0 + n if n % 3 == 0 else None)
    assert states == [store.register_states([r])[0] for r in registers]
    assert store.register_states([]) == []


@pytest.mark.parametrize("mode", [ONE, BATCH])
def test_batch_reads_the_state_of_odd_keys(meta_store: SyncMetaStore,  # noqa: F811
                                           mode: str) -> None:
    """The batch reads its registers and its keys' other versions in one statement each
    (a JSON array): rows of keys JSON must escape get the verdicts and latest flags of the
    one-by-one apply."""
    store = meta_store
    store.create_bucket(BucketRecord(mode, "u-1", "us-east-1", 1.0))
    for n in range(len(ODD)):
        store.put_object(row(mode, odd_key(n), 20.0, n))  # V1, newer than what comes
    store.apply_replicated_delete(mode, odd_key(0), V2, 50.0)
    rows = [row(mode, odd_key(n), 10.0 + n, 100 + n, version_id=V2) for n in range(len(ODD))]
    rows.append(row(mode, odd_key(1), 30.0, 200))  # newer than the local V1: replaces it
    if mode == BATCH:
        answers = store.apply_replicated_objects(rows)
    else:
        answers = [store.apply_replicated_object(r) for r in rows]
    assert [verdict(a)[0] for a in answers] == [  # type: ignore[index]
        ApplyVerdict.DELETED, *[ApplyVerdict.APPLIED] * (len(ODD) - 1), ApplyVerdict.APPLIED]
    for n in range(1, len(ODD)):
        older = store.get_object(mode, odd_key(n), V2)
        assert older is not None and not older.is_latest  # V1 (20.0 or 30.0) is newer
    latest = store.get_object(mode, odd_key(1))
    assert latest is not None and (latest.version_id, latest.etag) == (V1, "e200")


def test_the_page_reads_look_rows_up_by_their_keys(meta_store: SyncMetaStore  # noqa: F811
                                                   ) -> None:
    """REGISTER_STATES and KEY_STAMPS reach the rows and tombstones through their primary
    keys from the JSON array's items (no scan of `objects`, whatever its size). On
    PostgreSQL, whose planner may rightly prefer a hash join over a small table, the
    other joins are turned off to show the index lookup is possible."""
    engine = meta_store.engine
    dialect = engine.dialect
    registers = [(BATCH, "a", V1), (BATCH, "b", V1)]
    queries = [(REGISTER_STATES[dialect.name], register_states_values(registers)),
               (KEY_STAMPS[dialect.name], key_stamps_values([(BATCH, "a"), (BATCH, "b")]))]
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        plans = []
        if dialect.name == "postgresql":
            cursor.execute("SET enable_hashjoin = off")
            cursor.execute("SET enable_mergejoin = off")
            cursor.execute("SET enable_seqscan = off")
        explain = "EXPLAIN QUERY PLAN " if dialect.name == "sqlite" else "EXPLAIN "
        for statement, values in queries:
            query = driver_statement(dialect, statement)
            cursor.execute(explain + query.sql, query.parameters(values))
            plans.append(" ".join(str(line[-1]) for line in cursor.fetchall()))
        raw.rollback()
    finally:
        raw.close()
    if dialect.name == "sqlite":
        assert "SEARCH o USING INDEX sqlite_autoindex_objects_1 (bucket=? AND key=? AND " \
            "version_id=?)" in plans[0]
        assert "SEARCH t USING INDEX sqlite_autoindex_tombstones_1 (family=? AND key=?)" \
            in plans[0]
        assert re.search(r"SEARCH o USING INDEX \w+ \(bucket=\? AND key=\?", plans[1])
    else:
        for plan in plans:
            assert re.search(r"Nested Loop.*Index Scan using \w+ on objects o .*"
                             r"Index Cond: \(\(bucket = \(+r\.v ->> 0\).*"
                             r"AND \(key = \(+r\.v ->> 1\)", plan), plan
        assert re.search(r"Index Scan using pk_tombstones on tombstones t .*Index Cond: "
                         r"\(\(family = 'object'::text\) AND \(key = \(+r\.v ->> 3\)",
                         plans[0]), plans[0]
