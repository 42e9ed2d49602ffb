"""The anti-entropy service (cluster/anti_entropy.py) with fakes on a Clock: pages pulled
from the cursor and applied in order, missing bytes fetched first (and checked), rows that
lose locally cost no fetch, the cursor persisted, rule 9's skip, rule 8's rewind, the extra
per-peer steps (and the rows retried after them), syncing, the sync object and the
metrics' figures. No socket, no thread."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from objstore.cluster.anti_entropy import OPERATION, AntiEntropy
from objstore.cluster.client import BlobFetched, SendFailure
from objstore.cluster.manifest_wire import PulledEntry, PulledPage
from objstore.cluster.membership import Membership, PeerState, ProbeResult
from objstore.cluster.wire import ReplicatedDelete
from objstore.cluster.write_gate import ClusterStatus, ClusterWriteGate
from objstore.config import Cluster
from objstore.convergence.ack import Ack
from objstore.convergence.sync_rules import SKIP_AFTER_PASSES, SyncCursor
from objstore.engine.changes import Caller, Origin
from objstore.errors import S3Error
from objstore.http.health import HealthState
from objstore.meta.records import ObjectRecord, PartRef
from objstore.metrics.collectors import ClusterCollector
from objstore.threads import InlinePool
from tests.unit.conftest import run

NOW = 1_700_000_000.0
PEER_URL = "http://b.test:9000"
CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3, peers=(PEER_URL,),
                  probe_interval_seconds=1.0, anti_entropy_interval_seconds=10.0)
BLOB_A = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
BLOB_B = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
PART = "cccccccc-cccc-4ccc-8ccc-cccccccccccc"
V1 = "11111111-1111-4111-8111-111111111111"


def row(key: str, data: bytes = b"abc", blob: str | None = BLOB_A, **fields: Any
        ) -> ObjectRecord:
    return ObjectRecord("b", key, V1, blob, size=len(data),
                        etag=hashlib.md5(data).hexdigest(), last_modified=10.0, **fields)


@dataclass
class FakePeer:
    """The peer's side: its manifest (entries by seq, max_seq) and its blobs."""

    entries: list[PulledEntry] = field(default_factory=list)
    max_seq: int = 0
    blobs: dict[str, bytes] = field(default_factory=dict)
    asked: list[int] = field(default_factory=list)  # the `since` of each manifest call
    fetched: list[str] = field(default_factory=list)
    down: bool = False
    legacy: bool = False  # answers 404: no manifest route

    def add(self, seq: int, record: ObjectRecord | None = None,
            deletion: ReplicatedDelete | None = None) -> None:
        self.entries.append(PulledEntry(seq, record, deletion))
        self.max_seq = max(self.max_seq, seq)

    async def manifest(self, base_url: str, since: int, limit: int
                       ) -> PulledPage | SendFailure:
        assert base_url == PEER_URL
        self.asked.append(since)
        if self.down:
            return SendFailure("no answer")
        if self.legacy:
            return SendFailure("NotFound: No such cluster endpoint.", 404)
        above = [e for e in self.entries if e.seq > since]
        return PulledPage(tuple(above[:limit]), self.max_seq, more=len(above) > limit)

    async def get_blob(self, base_url: str, blob_id: str, sink: Callable[[bytes], object]
                       ) -> BlobFetched | SendFailure:
        self.fetched.append(blob_id)
        data = self.blobs.get(blob_id)
        if data is None:
            return SendFailure("HTTP 404", 404)
        sink(data)
        return BlobFetched(len(data), hashlib.sha256(data).hexdigest())


@dataclass
class FakeApply:
    """The apply path: records what it was given; raises for keys in `failing` and
    NoSuchBucket for rows of `missing_buckets`."""

    applied: list[tuple[str, str, bytes | None]] = field(default_factory=list)
    stored_blobs: list[tuple[str, bytes]] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)
    missing_buckets: set[str] = field(default_factory=set)
    callers: list[Caller] = field(default_factory=list)
    batches: list[list[str]] = field(default_factory=list)  # keys of each batch
    meta: FakeMeta | None = None  # where applied rows are held
    present: set[str] = field(default_factory=set)  # blobs stored (FakeBlobs.present)

    async def apply_replicated(self, caller: Caller, record: ObjectRecord,
                               body: Any = None) -> Ack:
        self.callers.append(caller)
        if record.bucket in self.missing_buckets:
            raise S3Error("NoSuchBucket", BucketName=record.bucket)
        if record.key in self.failing:
            raise RuntimeError(f"poison {record.key}")
        data = b"".join(body.read_back()) if body is not None else None
        self.applied.append(("row", record.key, data))
        if self.meta is not None:  # held from now on: a later pass finds it identical
            self.meta.rows[record.key] = record
        if data is not None and record.blob_id is not None:
            self.present.add(record.blob_id)  # and its bytes with it
        return Ack(True, True)

    async def apply_replicated_rows(self, caller: Caller,
                                    items: Sequence[tuple[ObjectRecord, Any]]
                                    ) -> list[Ack | Exception]:
        """One batch (one transaction in the real apply): each row's ack or error."""
        self.batches.append([record.key for record, _ in items])
        answers: list[Ack | Exception] = []
        for record, body in items:
            try:
                answers.append(await self.apply_replicated(caller, record, body))
            except Exception as error:  # noqa: BLE001 (the row's answer)
                answers.append(error)
        return answers

    async def apply_replicated_delete(self, caller: Caller, bucket: str, key: str,
                                      version_id: str, deleted_at: float) -> Ack:
        if key in self.failing:
            raise RuntimeError(f"poison {key}")
        self.applied.append(("delete", key, None))
        return Ack(True, True)

    async def store_blob(self, caller: Caller, blob_id: str, body: Any) -> bool:
        self.stored_blobs.append((blob_id, b"".join(body.read_back())))
        return True


@dataclass
class FakeMeta:
    cursors: dict[str, SyncCursor] = field(default_factory=dict)
    rows: dict[str, ObjectRecord] = field(default_factory=dict)  # by key
    tombstones: dict[str, float] = field(default_factory=dict)  # by key: deleted_at
    saves: int = 0
    state_reads: int = 0

    def list_sync_cursors(self) -> Deferred[list[SyncCursor]]:
        return succeed(sorted(self.cursors.values(), key=lambda c: c.peer_node_id))

    def put_sync_cursor(self, cursor: SyncCursor) -> Deferred[None]:
        self.cursors[cursor.peer_node_id] = cursor
        self.saves += 1
        return succeed(None)

    def delete_sync_cursor(self, peer_node_id: str) -> Deferred[bool]:
        return succeed(self.cursors.pop(peer_node_id, None) is not None)

    def get_object(self, bucket: str, key: str, version_id: str | None = None
                   ) -> Deferred[ObjectRecord | None]:
        return succeed(self.rows.get(key))

    def get_tombstone(self, family: str, key: str
                      ) -> Deferred[tuple[float, int | None] | None]:
        deleted_at = self.tombstones.get(key.split(":", 2)[2])
        return succeed(None if deleted_at is None else (deleted_at, 1))

    def register_states(self, registers: Sequence[tuple[str, str, str]]
                        ) -> Deferred[list[tuple[ObjectRecord | None, float | None]]]:
        self.state_reads += 1
        return succeed([(self.rows.get(key), self.tombstones.get(key))
                        for _, key, _ in registers])


@dataclass
class FakeBlobs:
    tmp_dir: str
    present: set[str] = field(default_factory=set)

    def blob_size(self, blob_id: str) -> int | None:
        return 1 if blob_id in self.present else None


class World:
    def __init__(self, tmp_path: Path, *, steps: Any = (), **batching: int) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.membership = Membership("node-a")
        self.peer = FakePeer()
        self.apply = FakeApply()
        self.meta = FakeMeta()
        self.blobs = FakeBlobs(str(tmp_path))
        self.apply.meta = self.meta
        self.apply.present = self.blobs.present
        self.service = AntiEntropy(
            membership=self.membership, meta=self.meta, client=self.peer, apply=self.apply,
            blobs=self.blobs, io=InlinePool(), cluster=CLUSTER, clock=self.clock,
            steps=steps, page_entries=2, **batching)

    def join(self, node_id: str = "node-b", url: str = PEER_URL, max_seq: int = 0) -> None:
        self.membership.propose([url], now=self.clock.seconds())
        self.membership.observe(url, ProbeResult(status=200, mac_ok=True, fingerprint_ok=True,
                                                 node_id=node_id, max_seq=max_seq),
                                now=self.clock.seconds())

    def tick(self) -> None:
        run(self.service.tick())

    @property
    def cursor(self) -> SyncCursor:
        return self.meta.cursors["node-b"]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_pass_applies_every_page_in_seq_order_and_fetches_missing_bytes(world: World
                                                                          ) -> None:
    world.peer.blobs[BLOB_A] = b"abc"
    world.blobs.present.add(BLOB_B)
    world.peer.add(2, row("new"))
    world.peer.add(4, row("held", b"xyz", blob=BLOB_B))
    world.peer.add(5, deletion=ReplicatedDelete("b", "gone", V1, 9.0))
    world.peer.add(7, row("marker", b"", blob=None, is_delete_marker=True))
    world.peer.max_seq = 9
    world.join()
    assert world.service.is_syncing()
    world.tick()
    # A page's rows go in one batch (one transaction), then its deletions one by one.
    assert world.apply.applied == [("row", "new", b"abc"), ("row", "held", None),
                                   ("row", "marker", None), ("delete", "gone", None)]
    assert world.apply.batches == [["new", "held"], ["marker"]]
    assert world.peer.fetched == [BLOB_A]  # BLOB_B is here
    assert world.peer.asked == [0, 4]  # pages of 2 from the cursor
    assert world.cursor.cursor == 9 and world.cursor.peer_max_seq == 9  # gaps scanned
    assert world.cursor.first_pass_done and world.cursor.last_reconcile == NOW
    assert not world.service.is_syncing()
    caller = world.apply.callers[0]
    assert caller.origin is Origin.PEER and caller.operation == OPERATION
    assert caller.details == {"peer_node_id": "node-b"}


def test_the_next_pass_starts_from_the_cursor_after_the_interval(world: World) -> None:
    world.peer.add(1, row("k", b"", blob=None, is_delete_marker=True))
    world.join()
    world.tick()
    world.peer.add(3, row("k2", b"", blob=None, is_delete_marker=True))
    world.clock.advance(CLUSTER.anti_entropy_interval_seconds / 2)
    world.tick()
    assert world.peer.asked == [0]  # not due yet
    world.clock.advance(CLUSTER.anti_entropy_interval_seconds)
    world.tick()
    assert world.peer.asked == [0, 1] and world.cursor.cursor == 3
    assert [key for _, key, _ in world.apply.applied] == ["k", "k2"]


def test_a_pruned_peer_loses_its_cursor_unless_its_node_id_is_still_known(
        world: World) -> None:
    world.peer.add(1, row("k", b"", blob=None, is_delete_marker=True))
    world.join()
    world.tick()
    assert world.cursor.cursor == 1 and "node-b" in world.service.state.cursors
    # the same node id at a second address: pruning the first keeps the cursor
    world.join(url="http://node-b-moved.test:9000")
    gone = world.membership.peers.pop(PEER_URL)
    world.service.peer_pruned(gone)
    assert "node-b" in world.meta.cursors
    # the last address of node-b pruned: its cursor and progress go
    world.service.peer_pruned(world.membership.peers.pop("http://node-b-moved.test:9000"))
    assert "node-b" not in world.meta.cursors
    assert "node-b" not in world.service.state.cursors
    assert "node-b" not in world.service.state.progress
    # a peer that never answered has no cursor to forget
    world.service.peer_pruned(PeerState(address="http://x.test", first_seen=NOW))
    # node-b back later: pulled from 0 at once
    world.join()
    world.tick()
    assert world.peer.asked == [0, 0] and world.cursor.cursor == 1


def test_a_stopping_service_ends_its_pass_at_the_next_batch(tmp_path: Path) -> None:
    calls: list[str] = []

    async def step(node_id: str, base_url: str) -> None:
        calls.append(node_id)

    world = World(tmp_path, steps=[step], batch_rows=1)
    original = world.apply.apply_replicated

    async def then_stop(caller: Caller, record: ObjectRecord, body: Any = None) -> Ack:
        world.service._stopping = True  # what stopService sets
        return await original(caller, record, body)

    world.apply.apply_replicated = then_stop  # type: ignore[method-assign]
    for seq in (1, 2):
        world.peer.add(seq, row(f"k{seq}", b"", blob=None, is_delete_marker=True))
    world.join()
    world.tick()
    assert [key for _, key, _ in world.apply.applied] == ["k1"]
    assert world.cursor.cursor == 1 and not world.cursor.first_pass_done
    assert calls == [] and world.service.is_syncing()


def test_the_timer_polls_and_a_new_peer_is_pulled_at_once(world: World) -> None:
    world.service.startService()
    try:
        assert world.peer.asked == []  # no eligible peer at the first tick
        assert not world.service.is_syncing()
        world.join()
        assert world.service.is_syncing()
        world.clock.advance(CLUSTER.probe_interval_seconds)
        assert world.peer.asked == [0] and not world.service.is_syncing()
    finally:
        world.service.stopService()


def test_rows_that_lose_or_are_held_cost_no_fetch_nor_write(world: World) -> None:
    world.meta.rows["k"] = replace(row("k", b"newer", blob=BLOB_B), last_modified=99.0)
    world.meta.rows["same"] = row("same")
    world.blobs.present.add(BLOB_A)
    world.meta.rows["gone"] = replace(row("gone"), last_modified=20.0)
    world.meta.tombstones["gone"] = 30.0  # the local tombstone beats the incoming row
    world.peer.blobs[BLOB_A] = b"abc"
    world.peer.add(1, row("k"))
    world.peer.add(2, row("same"))
    world.peer.add(3, row("gone"))
    world.join()
    world.tick()
    assert world.peer.fetched == [] and world.apply.applied == []
    assert world.cursor.cursor == 3 and world.cursor.first_pass_done


def test_a_deletion_already_recorded_is_not_applied_again(world: World) -> None:
    world.meta.tombstones["old"] = 9.0
    world.meta.tombstones["beaten"] = 9.0
    world.meta.rows["beaten"] = replace(row("beaten"), last_modified=5.0)
    world.peer.add(1, deletion=ReplicatedDelete("b", "old", V1, 9.0))
    world.peer.add(2, deletion=ReplicatedDelete("b", "newer", V1, 9.0))
    world.peer.add(3, deletion=ReplicatedDelete("b", "beaten", V1, 8.0))
    world.join()
    world.tick()
    assert world.apply.applied == [("delete", "newer", None), ("delete", "beaten", None)]


def test_a_composite_fetches_its_missing_parts_first(world: World) -> None:
    world.peer.blobs[PART] = b"part"
    composite = replace(row("multi", b"part", blob=BLOB_B), etag="x-2",
                        parts=(PartRef(1, PART, 4, "e"),))
    world.peer.add(1, composite)
    world.join()
    world.tick()
    assert world.apply.stored_blobs == [(PART, b"part")]
    assert world.apply.applied == [("row", "multi", None)]


def test_bytes_that_do_not_match_the_etag_fail_the_entry(world: World) -> None:
    world.peer.blobs[BLOB_A] = b"abd"
    world.peer.add(1, row("k"))
    world.join()
    world.tick()
    assert world.apply.applied == []
    assert world.cursor.cursor == 0 and world.cursor.failing_seq == 1
    assert world.service.is_syncing()


@pytest.mark.parametrize("fields", [
    {"last_modified": 1e18}, {"last_modified": -1e15}, {"retain_until_date": 1e12,
                                                       "retention_mode": "COMPLIANCE"},
    {"legal_hold_status": "MAYBE"}, {"storage_class": "FAST"}, {"content_type": "a\r\nb"},
], ids=str)
def test_a_row_the_row_rules_refuse_fails_its_entry_before_any_fetch(
        world: World, fields: dict[str, Any]) -> None:
    """The same rules as the direct route (convergence/row_rules.py): nothing fetched,
    nothing applied, the entry skipped at once (a permanent failure)."""
    world.peer.blobs[BLOB_A] = b"abc"
    world.peer.add(1, replace(row("k"), **fields))
    world.join()
    world.tick()
    assert world.peer.fetched == [] and world.apply.applied == []
    assert world.cursor.cursor == 1 and world.cursor.skipped_entries == 1


def test_a_poison_entry_stops_the_pass_then_is_skipped_after_five(world: World) -> None:
    world.apply.failing.add("poison")
    for seq, key in ((1, "ok"), (2, "poison"), (3, "after")):
        world.peer.add(seq, row(key, b"", blob=None, is_delete_marker=True))
    world.join()
    for passes in range(1, SKIP_AFTER_PASSES):
        world.tick()
        assert world.cursor.cursor == 1 and world.cursor.failed_passes == passes
        assert world.service.is_syncing()
        world.clock.advance(CLUSTER.anti_entropy_interval_seconds)
    world.tick()
    assert world.cursor.cursor == 3 and world.cursor.skipped_entries == 1
    assert [key for _, key, _ in world.apply.applied] == ["ok", "after"]
    assert not world.service.is_syncing()
    assert world.service.figures()[0].skipped_entries == 1


def test_an_oversized_entry_is_skipped_at_once(world: World) -> None:
    """The peer can never send that row within a page: a permanent failure."""
    world.peer.entries.append(PulledEntry(1, oversized=True))
    world.peer.add(2, row("after", b"", blob=None, is_delete_marker=True))
    world.join()
    world.tick()
    assert world.cursor.cursor == 2 and world.cursor.skipped_entries == 1
    assert [key for _, key, _ in world.apply.applied] == ["after"]
    assert not world.service.is_syncing()


def test_a_rewound_peer_is_pulled_again_from_zero(world: World) -> None:
    world.meta.cursors["node-b"] = SyncCursor("node-b", cursor=50, peer_max_seq=50,
                                              first_pass_done=True)
    world.peer.add(2, row("k", b"", blob=None, is_delete_marker=True))
    world.join()
    world.tick()
    assert world.peer.asked == [50, 0]
    assert world.cursor.cursor == 2 and world.apply.applied == [("row", "k", None)]


def test_an_unreachable_peer_keeps_the_node_syncing_and_is_retried_each_poll(
        world: World) -> None:
    world.meta.cursors["node-b"] = SyncCursor("node-b", cursor=5, first_pass_done=True)
    world.peer.down = True
    world.peer.max_seq = 5
    world.join()
    world.tick()
    assert world.service.is_syncing() and world.cursor.cursor == 5
    world.peer.down = False
    world.clock.advance(CLUSTER.probe_interval_seconds)  # a poll, not an interval
    world.tick()
    assert world.peer.asked == [5, 5] and not world.service.is_syncing()


def test_a_peer_without_the_manifest_route_does_not_hold_syncing(world: World) -> None:
    world.meta.cursors["node-b"] = SyncCursor("node-b", cursor=5, first_pass_done=True)
    world.peer.legacy = True
    world.join()
    world.tick()
    assert not world.service.is_syncing() and world.cursor.cursor == 5


def test_steps_run_after_the_object_pass_and_gate_first_pass_done(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    outcome = {"fail": True}

    async def step(node_id: str, base_url: str) -> None:
        calls.append((node_id, base_url))
        if outcome["fail"]:
            raise RuntimeError("snapshot refused")

    world = World(tmp_path, steps=[step])
    world.join()
    world.tick()
    assert calls == [("node-b", PEER_URL)] and world.service.is_syncing()
    assert "node-b" not in world.meta.cursors or not world.cursor.first_pass_done
    outcome["fail"] = False
    world.clock.advance(CLUSTER.anti_entropy_interval_seconds)
    world.tick()
    assert len(calls) == 2 and world.cursor.first_pass_done
    assert not world.service.is_syncing()


def test_a_row_whose_bucket_the_steps_bring_is_applied_by_the_same_pass(
        tmp_path: Path) -> None:
    steps: list[str] = []

    async def reconcile_control(node_id: str, base_url: str) -> None:
        steps.append(node_id)
        world.apply.missing_buckets.discard("fresh")  # the peer's snapshot has the bucket

    world = World(tmp_path, steps=[reconcile_control])
    world.apply.missing_buckets.add("fresh")
    world.peer.blobs[BLOB_A] = b"abc"
    world.peer.add(1, row("before", b"", blob=None, is_delete_marker=True))
    world.peer.add(2, replace(row("new"), bucket="fresh"))
    world.peer.add(3, row("after", b"", blob=None, is_delete_marker=True))
    world.join()
    assert run(world.service.run_pass("node-b", PEER_URL)) is True
    assert world.apply.applied == [("row", "before", None), ("row", "new", b"abc"),
                                   ("row", "after", None)]
    assert steps == ["node-b"]  # the steps ran once; the rows were pulled again
    assert world.peer.asked == [0, 1]
    assert world.cursor.cursor == 3 and world.cursor.first_pass_done
    assert world.cursor.failing_seq is None and world.cursor.failed_passes == 0
    assert world.cursor.skipped_entries == 0
    assert world.service.state.progress["node-b"].passed  # syncing ends with this pass


def test_an_entry_that_keeps_failing_fails_each_pass_and_counts_once_per_pass(
        tmp_path: Path) -> None:
    async def reconcile_control(node_id: str, base_url: str) -> None:
        return None

    world = World(tmp_path, steps=[reconcile_control])
    world.apply.missing_buckets.add("never")
    world.peer.add(1, replace(row("k", b"", blob=None, is_delete_marker=True),
                              bucket="never"))
    world.peer.add(2, row("after", b"", blob=None, is_delete_marker=True))
    world.join()
    for passes in range(1, SKIP_AFTER_PASSES):
        assert run(world.service.run_pass("node-b", PEER_URL)) is False
        assert world.peer.asked == [0, 0] * passes  # each pass retried its rows once
        assert world.cursor.failing_seq == 1 and world.cursor.failed_passes == passes
        assert not world.service.state.progress["node-b"].passed
    assert run(world.service.run_pass("node-b", PEER_URL)) is True  # rule 9: skipped
    assert world.cursor.cursor == 2 and world.cursor.skipped_entries == 1
    assert world.apply.applied == [("row", "after", None)]


def test_rows_are_not_retried_after_a_step_that_failed(tmp_path: Path) -> None:
    async def reconcile_control(node_id: str, base_url: str) -> None:
        raise RuntimeError("snapshot refused")

    world = World(tmp_path, steps=[reconcile_control])
    world.apply.failing.add("poison")
    world.peer.add(1, row("poison", b"", blob=None, is_delete_marker=True))
    world.join()
    assert run(world.service.run_pass("node-b", PEER_URL)) is False
    assert world.peer.asked == [0] and world.cursor.failed_passes == 1


def test_the_sync_object_of_a_peer(world: World) -> None:
    world.peer.add(3, row("k", b"", blob=None, is_delete_marker=True))
    world.join(max_seq=3)
    peer = world.membership.eligible_peers()[0]
    assert world.service.peer_sync(peer) == {
        "hwm": None, "lag": 3, "last_reconcile": None, "first_pass_done": False,
        "skipped_entries": 0}
    world.tick()
    sync = world.service.peer_sync(peer)
    assert sync is not None and sync["hwm"] == 3 and sync["lag"] == 0
    assert sync["first_pass_done"] and sync["last_reconcile"].startswith("2023-11-14T")
    assert [(f.node_id, f.lag) for f in world.service.figures()] == [("node-b", 0)]


def test_health_answers_syncing_until_the_first_pass(world: World) -> None:
    gate = ClusterWriteGate(world.membership, CLUSTER, lambda: 10**12)
    status = ClusterStatus(gate, world.clock.seconds, is_syncing=world.service.is_syncing,
                           peer_sync=world.service.peer_sync)
    health = HealthState(cluster=status)
    assert health.status() == (200, "ok")  # no eligible peer
    world.join()
    assert health.status() == (503, "syncing")
    verbose = health.verbose()
    assert verbose["status"] == "syncing" and verbose["cluster"]["syncing"] is True
    world.tick()
    assert health.status() == (200, "ok")
    entry = [n for n in status.snapshot()["nodes"] if n["node_id"] == "node-b"][0]
    assert entry["sync"]["first_pass_done"] and entry["sync"]["hwm"] == 0


def test_lag_and_skipped_entries_are_metrics(world: World) -> None:
    world.meta.cursors["node-b"] = SyncCursor("node-b", cursor=4, peer_max_seq=4,
                                              first_pass_done=True, skipped_entries=2)
    world.peer.down = True
    world.join(max_seq=10)
    world.tick()
    registry = CollectorRegistry()
    gate = ClusterWriteGate(world.membership, CLUSTER, lambda: 10**12)
    registry.register(ClusterCollector(peers=lambda: world.membership.peers.values(),
                                       gate=gate.figures, fanout=None,
                                       sync=world.service.figures))
    text = generate_latest(registry).decode()
    assert 'objstore_cluster_peer_sync_lag{node_id="node-b"} 6.0' in text
    assert 'objstore_cluster_peer_sync_skipped_entries_total{node_id="node-b"} 2.0' in text


# -- batches: bounded parallel fetches, pipelined; skip sooner; the start-up look --------


class HeldPeer(FakePeer):
    """A peer whose blob answers wait until the test releases them, one by one."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[tuple[str, Deferred[None]]] = []

    async def get_blob(self, base_url: str, blob_id: str, sink: Callable[[bytes], object]
                       ) -> BlobFetched | SendFailure:
        answered: Deferred[None] = Deferred()
        self.waiting.append((blob_id, answered))
        await answered
        return await super().get_blob(base_url, blob_id, sink)

    def release(self) -> str:
        blob_id, answered = self.waiting.pop(0)
        answered.callback(None)
        return blob_id


def blob_id(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-000000000000"


def test_fetches_run_in_parallel_bounded_and_the_next_batch_s_ahead(tmp_path: Path
                                                                   ) -> None:
    """Five rows in batches of two, at most two fetches in flight: the second batch's
    bytes are fetched as soon as a place is free (while the first batch waits for its
    own), and each batch is applied in one call as soon as its bytes are there."""
    world = World(tmp_path, batch_rows=2, fetch_concurrency=2)
    world.peer = peer = HeldPeer()
    world.service._client = peer
    for n in range(1, 6):
        data = b"x%d" % n
        peer.blobs[blob_id(n)] = data
        peer.add(n, row(f"k{n}", data, blob=blob_id(n)))
    world.service._page_entries = 10
    world.join()
    done: list[Any] = []
    Deferred.fromCoroutine(world.service.run_pass("node-b", PEER_URL)).addBoth(done.append)
    assert [b for b, _ in peer.waiting] == [blob_id(1), blob_id(2)]  # the bound
    assert peer.release() == blob_id(1)
    # the first batch still waits for k2; a third fetch took the free place
    assert world.apply.batches == [] and len(peer.waiting) == 2
    assert peer.release() == blob_id(2)
    assert world.apply.batches == [["k1", "k2"]]  # the batch went at once, in one call
    assert [b for b, _ in peer.waiting] == [blob_id(3), blob_id(4)]
    assert peer.release() == blob_id(3)
    assert [b for b, _ in peer.waiting] == [blob_id(4), blob_id(5)]  # the third batch's
    while peer.waiting:
        peer.release()
    assert done == [True]
    assert world.apply.batches == [["k1", "k2"], ["k3", "k4"], ["k5"]]
    assert [data for _, _, data in world.apply.applied] == [b"x1", b"x2", b"x3", b"x4",
                                                            b"x5"]
    assert world.cursor.cursor == 5


def test_a_row_refused_as_invalid_is_skipped_at_once(world: World) -> None:
    """A 400 from the apply's validation is permanent: skipped on the first pass, the
    rows after it applied and the node out of syncing; a missing bucket (404) is not."""
    original = world.apply.apply_replicated

    async def validating(caller: Caller, record: ObjectRecord, body: Any = None) -> Ack:
        if record.key == "invalid":
            raise S3Error("InvalidArgument", "The row's stamps must be finite times.")
        return await original(caller, record, body)

    world.apply.apply_replicated = validating  # type: ignore[method-assign]
    world.apply.missing_buckets.add("later")
    world.peer.add(1, row("invalid", b"", blob=None, is_delete_marker=True))
    world.peer.add(2, row("after", b"", blob=None, is_delete_marker=True))
    world.peer.add(3, replace(row("k", b"", blob=None, is_delete_marker=True),
                              bucket="later"))
    world.join()
    world.tick()
    assert world.cursor.skipped_entries == 1  # seq 1 at once
    assert world.cursor.cursor == 2 and world.cursor.failing_seq == 3
    assert world.cursor.failed_passes == 1  # NoSuchBucket counts passes as before
    assert [key for _, key, _ in world.apply.applied] == ["after"]


def test_a_blob_the_peer_refuses_with_400_is_skipped_at_once(world: World) -> None:
    async def refusing(base_url: str, blob_id: str, sink: Callable[[bytes], object]
                       ) -> BlobFetched | SendFailure:
        return SendFailure("BadRequest: not a blob id", 400)

    world.peer.get_blob = refusing  # type: ignore[method-assign]
    world.peer.add(1, row("k"))
    world.join()
    world.tick()
    assert world.cursor.cursor == 1 and world.cursor.skipped_entries == 1


def test_the_first_passes_start_as_soon_as_peers_are_eligible(world: World) -> None:
    """At start-up the peers become eligible a moment after the first tick: the passes
    start then, not a poll interval later."""
    world.service.startService()
    try:
        assert world.peer.asked == []
        world.join()
        world.clock.advance(0.1)
        assert world.peer.asked == [0]
        assert CLUSTER.probe_interval_seconds > 0.1
    finally:
        world.service.stopService()


def test_a_batch_that_fails_as_a_whole_is_applied_row_by_row(world: World) -> None:
    async def broken(caller: Caller, items: Sequence[tuple[ObjectRecord, Any]]
                     ) -> list[Ack | Exception]:
        raise RuntimeError("the transaction failed")

    world.apply.apply_replicated_rows = broken  # type: ignore[method-assign]
    for seq in (1, 2):
        world.peer.add(seq, row(f"k{seq}", b"", blob=None, is_delete_marker=True))
    world.join()
    world.tick()
    assert [key for _, key, _ in world.apply.applied] == ["k1", "k2"]
    assert world.cursor.cursor == 2 and world.cursor.first_pass_done


class TwoPeers:
    """Two peers holding the same rows, answering blobs when the test releases them."""

    def __init__(self, first: HeldPeer, second: HeldPeer) -> None:
        self.by_url = {PEER_URL: first, OTHER_URL: second}

    async def manifest(self, base_url: str, since: int, limit: int
                       ) -> PulledPage | SendFailure:
        peer = self.by_url[base_url]
        return await FakePeer.manifest(peer, PEER_URL, since, limit)

    async def get_blob(self, base_url: str, blob_id: str, sink: Callable[[bytes], object]
                       ) -> BlobFetched | SendFailure:
        return await self.by_url[base_url].get_blob(PEER_URL, blob_id, sink)


OTHER_URL = "http://c.test:9000"


def test_the_same_rows_from_two_peers_are_fetched_once_whatever_their_order(
        tmp_path: Path) -> None:
    """Peers b and c hold the same six rows, in opposite seq orders; passes toward both
    run at once, in batches of two. Each blob is fetched once (a batch waits while an
    older batch of the other pass holds its rows, then finds them held), and both passes
    complete: waiting only on older batches, they never wait on each other in a cycle."""
    world = World(tmp_path, batch_rows=2, fetch_concurrency=8)
    b, c = HeldPeer(), HeldPeer()
    world.service._client = TwoPeers(b, c)
    world.service._page_entries = 10
    keys = [f"k{n}" for n in range(6)]
    for n, key in enumerate(keys):
        data = b"x%d" % n
        for peer, seq in ((b, n + 1), (c, 6 - n)):
            peer.blobs[blob_id(n)] = data
            peer.add(seq, row(key, data, blob=blob_id(n)))
    c.entries.sort(key=lambda entry: entry.seq)
    world.join()
    world.join("node-c", OTHER_URL)
    done: list[Any] = []
    for node_id, url in (("node-b", PEER_URL), ("node-c", OTHER_URL)):
        Deferred.fromCoroutine(world.service.run_pass(node_id, url)).addBoth(done.append)
    for _ in range(100):
        waiting = b.waiting or c.waiting
        if not waiting:
            break
        (b if b.waiting else c).release()
    assert done == [True, True]
    fetched = b.fetched + c.fetched
    assert sorted(fetched) == sorted(blob_id(n) for n in range(6))  # each one once
    assert sorted(key for _, key, _ in world.apply.applied) == keys
    assert world.service._claimed == {}
