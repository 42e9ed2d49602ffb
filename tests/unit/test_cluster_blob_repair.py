"""Blob repair (cluster/blob_repair.py) in memory: SQLite in a temp dir, inline DB and IO
pools, a real BlobStore (fsync off), fake peers answering GET /cluster/v1/blob. A fetch
keeps only bytes that match the row (else the next peer), restores the row's sidecar,
fetches a blob once however many reads wait for it, and stores nothing for a row that
changed; the proactive tick walks rows in blob-id order from its cursor, finds missing and
corrupt blobs, spends at most its budget of peer fetches (checked between rows), resumes
and wraps, and keeps its cursor in an owner-only file. A blob no peer gives is logged once
and asked again by the pass with a doubling delay (a Clock), by reads at once."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogLevel, globalLogPublisher
from zope.interface import provider

from objstore.blobs.sidecar import record_to_sidecar
from objstore.blobs.store import BlobStore
from objstore.cluster.blob_repair import (
    BlobRepairService,
    BlobRepairStats,
    PeerBlobRepair,
    read_cursor,
)
from objstore.cluster.client import BlobFetched, SendFailure
from objstore.cluster.membership import Membership, PeerState
from objstore.cluster.write_gate import ClusterWriteGate
from objstore.config import Cluster
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord, PartRef
from objstore.meta.store import SyncMetaStore
from objstore.metrics.collectors import ClusterCollector
from objstore.threads import InlinePool
from tests.unit.conftest import run

P1, P2 = "http://peer-1:9000", "http://peer-2:9000"
IDS = [f"{n:08x}-0000-4000-8000-000000000000" for n in range(1, 6)]
COMPOSITE = "cccccccc-cccc-4ccc-8ccc-cccccccccccc"


@dataclass
class FakeSource:
    """Peers' blobs by base URL; every request is recorded. `paused` holds answers back
    until the test fires them."""

    held: dict[str, dict[str, bytes]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    paused: list[Deferred[None]] | None = None

    def get_blob(self, base_url: str, blob_id: str, sink: Callable[[bytes], object]
                 ) -> Deferred[BlobFetched | SendFailure]:
        self.requests.append((base_url, blob_id))
        data = self.held.get(base_url, {}).get(blob_id)

        def answer(_: object = None) -> BlobFetched | SendFailure:
            if data is None:
                return SendFailure("not here", 404)
            sink(data)
            return BlobFetched(len(data), hashlib.sha256(data).hexdigest())

        if self.paused is None:
            return succeed(answer())
        gate: Deferred[None] = Deferred()
        self.paused.append(gate)
        return gate.addCallback(answer)


@dataclass
class FakePeers:
    addresses: list[str] = field(default_factory=lambda: [P1, P2])

    def eligible_peers(self) -> tuple[PeerState, ...]:
        return tuple(PeerState(address, 0.0, node_id=address, alive=True,
                               authenticated=True, config_ok=True)
                     for address in self.addresses)


@dataclass
class Node:
    sql: SyncMetaStore
    meta: MetaStore
    blobs: BlobStore
    source: FakeSource
    peers: FakePeers
    repair: PeerBlobRepair
    tmp_path: Path

    def put(self, key: str, blob_id: str, data: bytes) -> ObjectRecord:
        record = ObjectRecord("b", key, "null", blob_id, size=len(data),
                              etag=hashlib.md5(data).hexdigest(), last_modified=10.0,
                              tags={"key": key})
        self.blobs.commit_bytes(data, blob_id, record_to_sidecar(record))
        stored = self.sql.put_object(record).record
        for peer in (P1, P2):
            self.source.held.setdefault(peer, {})[blob_id] = data
        return stored

    def lose(self, blob_id: str) -> None:
        os.unlink(self.blobs.blob_path(blob_id))

    def content(self, blob_id: str) -> bytes | None:
        try:
            with open(self.blobs.blob_path(blob_id), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def service(self, budget: int, cursor_path: str | None = None) -> BlobRepairService:
        return BlobRepairService(repair=self.repair, peers=self.peers, rows=self.meta,
                                 blobs=self.blobs, io=InlinePool(), budget=budget,
                                 interval_seconds=1.0, clock=Clock(),
                                 cursor_path=cursor_path)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    sql = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2),
                        clock=lambda: 1000.0)
    sql.migrate()
    sql.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    meta = MetaStore(sql, SyncDbPool())
    source, peers = FakeSource(), FakePeers()
    repair = PeerBlobRepair(peers=peers, rows=meta, blobs=blobs, io=InlinePool(),
                            source=source)
    yield Node(sql, meta, blobs, source, peers, repair, tmp_path)
    sql.close()


def test_a_missing_blob_comes_back_with_the_rows_sidecar(node: Node) -> None:
    record = node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    os.unlink(node.blobs.sidecar_path(IDS[0]))
    assert run(node.repair.repair_missing(record))
    assert node.content(IDS[0]) == b"hello"
    sidecar = node.blobs.read_sidecar(IDS[0])
    assert sidecar["kind"] == "object" and sidecar["tags"] == {"key": "k"}
    assert node.source.requests == [(P1, IDS[0])]
    assert (node.repair.stats.repaired, node.repair.stats.missing_found) == (1, 1)


def test_bytes_that_do_not_match_the_row_are_refused_and_the_next_peer_asked(
        node: Node) -> None:
    record = node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    node.source.held[P1][IDS[0]] = b"jello"  # same size, wrong MD5
    assert run(node.repair.repair_missing(record))
    assert node.content(IDS[0]) == b"hello"
    assert node.source.requests == [(P1, IDS[0]), (P2, IDS[0])]
    assert node.repair.stats.rejected == 1


def test_no_peer_with_good_bytes_leaves_nothing_behind(node: Node) -> None:
    record = node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    node.source.held[P1][IDS[0]] = b"hello, longer"  # wrong size
    del node.source.held[P2][IDS[0]]  # 404
    assert not run(node.repair.repair_missing(record))
    assert node.content(IDS[0]) is None
    assert os.listdir(node.blobs.tmp_dir) == []
    assert (node.repair.stats.failed, node.repair.stats.repaired) == (1, 0)


def test_large_bytes_are_spooled_and_verified(node: Node) -> None:
    data = os.urandom(3 * 1024 * 1024)
    record = node.put("k", IDS[0], data)
    node.lose(IDS[0])
    assert run(node.repair.repair_missing(record))
    assert node.content(IDS[0]) == data


def test_two_reads_of_one_missing_blob_fetch_it_once(node: Node) -> None:
    record = node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    node.source.paused = []
    first = Deferred.fromCoroutine(node.repair.repair_missing(record))
    second = Deferred.fromCoroutine(node.repair.repair_missing(record))
    assert len(node.source.requests) == 1
    node.source.paused[0].callback(None)
    outcomes: list[object] = []
    first.addBoth(outcomes.append)
    second.addBoth(outcomes.append)
    assert outcomes == [True, True]
    assert node.repair.stats.repaired == 1


def test_a_row_that_changed_meanwhile_gets_no_files(node: Node) -> None:
    record = node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    newer = ObjectRecord("b", "k", "null", IDS[1], size=3, etag="x", last_modified=20.0)
    node.sql.put_object(newer)  # an overwrite won: IDS[0] is referenced no more...
    os.unlink(node.blobs.sidecar_path(IDS[0]))  # ...and its files went
    assert not run(node.repair.repair_missing(record))
    assert node.content(IDS[0]) is None
    assert not os.path.exists(node.blobs.sidecar_path(IDS[0]))


def test_a_composites_missing_part_comes_back_with_a_part_sidecar(node: Node) -> None:
    first, second = b"a" * 10, b"b" * 7
    for blob_id, data in ((IDS[0], first), (IDS[1], second)):
        node.blobs.commit_bytes(data, blob_id, {"kind": "part"})
        node.source.held.setdefault(P2, {})[blob_id] = data
    parts = (PartRef(1, IDS[0], 10, hashlib.md5(first).hexdigest()),
             PartRef(2, IDS[1], 7, hashlib.md5(second).hexdigest()))
    record = node.sql.put_object(ObjectRecord(
        "b", "multi", "null", COMPOSITE, size=17, etag="f" * 32 + "-2", last_modified=5.0,
        parts=parts)).record
    node.lose(IDS[1])
    assert run(node.repair.repair_missing(record))
    assert node.content(IDS[1]) == second
    sidecar = node.blobs.read_sidecar(IDS[1])
    assert (sidecar["kind"], sidecar["part_number"], sidecar["key"]) == ("part", 2, "multi")
    assert node.source.requests == [(P1, IDS[1]), (P2, IDS[1])]  # P1 had none


def test_a_tick_spends_at_most_its_budget_then_resumes_and_wraps(node: Node) -> None:
    for n, blob_id in enumerate(IDS[:4]):
        node.put(f"k{n}", blob_id, f"bytes {n}".encode())
    for blob_id in IDS[:3]:
        node.lose(blob_id)
    service = node.service(budget=1)
    reports = [run(service.tick()) for _ in range(4)]
    assert [report.fetches for report in reports] == [1, 1, 1, 0]
    assert [report.repaired for report in reports] == [1, 1, 1, 0]
    assert [blob_id for _, blob_id in node.source.requests] == IDS[:3]  # blob-id order
    assert [report.wrapped for report in reports] == [False, False, False, True]
    assert service.cursor is None and service.passes == 1
    assert all(node.content(blob_id) is not None for blob_id in IDS[:4])


def test_a_tick_with_budget_to_spare_walks_every_row(node: Node) -> None:
    for n, blob_id in enumerate(IDS):
        node.put(f"k{n}", blob_id, f"bytes {n}".encode())
    node.lose(IDS[1])
    node.lose(IDS[3])
    report = run(node.service(budget=100).tick())
    assert (report.rows, report.missing, report.repaired, report.wrapped) == (5, 2, 2, True)


def test_a_corrupt_blob_is_found_and_fetched_again(node: Node) -> None:
    node.put("k", IDS[0], b"hello")
    node.put("j", IDS[1], b"world")
    with open(node.blobs.blob_path(IDS[1]), "r+b") as handle:
        handle.write(b"W")  # same size, other bytes
    report = run(node.service(budget=10).tick())
    assert (report.corrupt, report.missing, report.repaired) == (1, 0, 1)
    assert node.content(IDS[1]) == b"world"
    assert node.repair.stats.corrupt_found == 1
    assert node.source.requests == [(P1, IDS[1])]


def test_the_cursor_is_kept_in_an_owner_only_file_and_resumed(node: Node) -> None:
    for n, blob_id in enumerate(IDS[:3]):
        node.put(f"k{n}", blob_id, f"bytes {n}".encode())
        node.lose(blob_id)
    path = str(node.tmp_path / "data" / "blob-repair.cursor")
    run(node.service(budget=1, cursor_path=path).tick())
    assert read_cursor(path) == IDS[0]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    later = node.service(budget=1, cursor_path=path)  # a restart
    run(later.tick())
    assert [blob_id for _, blob_id in node.source.requests] == IDS[:2]
    assert read_cursor(path) == IDS[1]


def test_without_an_eligible_peer_a_tick_walks_nothing(node: Node) -> None:
    node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    node.peers.addresses = []
    report = run(node.service(budget=5).tick())
    assert report.skipped and report.rows == 0
    assert node.source.requests == []


class VanishingRows:
    """The rows of `meta`, where a version goes after the first look (a delete that
    commits while the repair stores the bytes)."""

    def __init__(self, meta: MetaStore) -> None:
        self.meta = meta
        self.looks = 0

    def get_object(self, bucket: str, key: str, version_id: str | None = None
                   ) -> Deferred[ObjectRecord | None]:
        self.looks += 1
        if self.looks > 1:
            return succeed(None)
        return self.meta.get_object(bucket, key, version_id)

    def objects_by_blob_id(self, after: str | None, limit: int = 200
                           ) -> Deferred[list[ObjectRecord]]:
        return self.meta.objects_by_blob_id(after, limit)


def test_bytes_stored_for_a_row_deleted_meanwhile_go_again(node: Node) -> None:
    record = node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    os.unlink(node.blobs.sidecar_path(IDS[0]))
    repair = PeerBlobRepair(peers=node.peers, rows=VanishingRows(node.meta),
                            blobs=node.blobs, io=InlinePool(), source=node.source)
    assert not run(repair.repair_missing(record))
    assert node.content(IDS[0]) is None
    assert not os.path.exists(node.blobs.sidecar_path(IDS[0]))


def test_the_collector_exposes_the_repair_counts() -> None:
    membership = Membership("s")
    gate = ClusterWriteGate(membership, Cluster(enabled=True, secret="s" * 16), lambda: 1)
    stats = BlobRepairStats(repaired=3, failed=1, missing_found=2, corrupt_found=2,
                            fetches=5, rejected=1)
    registry = CollectorRegistry()
    registry.register(ClusterCollector(peers=lambda: (), gate=gate.figures, fanout=None,
                                       repair=stats))
    text = generate_latest(registry).decode()
    for line in ('objstore_cluster_blob_repairs_total{result="repaired"} 3.0',
                 'objstore_cluster_blob_repairs_total{result="failed"} 1.0',
                 'objstore_cluster_blob_repair_found_total{state="missing"} 2.0',
                 'objstore_cluster_blob_repair_found_total{state="corrupt"} 2.0',
                 "objstore_cluster_blob_repair_fetches_total 5.0",
                 "objstore_cluster_blob_repair_rejected_total 1.0"):
        assert line in text.splitlines()


# -- a blob no peer has: logged once, then asked again with a growing delay ---------------


@pytest.fixture
def repair_log() -> Iterator[list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []

    @provider(ILogObserver)
    def observer(event: dict[str, Any]) -> None:
        if event.get("log_namespace") == "objstore.cluster.blob_repair" and \
                event.get("log_level") in (LogLevel.info, LogLevel.warn):
            events.append(event)

    globalLogPublisher.addObserver(observer)
    yield events
    globalLogPublisher.removeObserver(observer)


def timed_node(node: Node, clock: Clock) -> Node:
    node.repair = PeerBlobRepair(peers=node.peers, rows=node.meta, blobs=node.blobs,
                                 io=InlinePool(), source=node.source, clock=clock,
                                 retry_base_seconds=1.0)
    return node


def test_a_blob_no_node_has_is_logged_once_then_asked_with_backoff(
        node: Node, repair_log: list[dict[str, Any]]) -> None:
    clock = Clock()
    clock.advance(1000.0)
    node = timed_node(node, clock)
    node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    for peer in (P1, P2):
        del node.source.held[peer][IDS[0]]
    service = node.service(budget=5)
    asked: list[int] = []
    for _ in range(8):  # a tick every second for eight seconds
        before = len(node.source.requests)
        report = run(service.tick())
        asked.append(len(node.source.requests) - before)
        clock.advance(1.0)
    # Asked at 0 s, then 1 s later, then 2 s after that, then 4 s: not at every tick.
    assert asked == [2, 2, 0, 2, 0, 0, 0, 2]
    assert report.deferred == 0 and node.repair.stats.deferred == 4
    assert len(repair_log) == 1  # one line, naming both peers' answers
    assert "no eligible peer gave it" in repair_log[0]["log_format"]
    assert P1 in repair_log[0]["why"] and P2 in repair_log[0]["why"]
    assert node.repair.stats.unavailable == 1


def test_a_read_still_asks_at_once_quietly_and_a_success_forgets_the_blob(
        node: Node, repair_log: list[dict[str, Any]]) -> None:
    clock = Clock()
    node = timed_node(node, clock)
    record = node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    kept = node.source.held[P2].pop(IDS[0])
    del node.source.held[P1][IDS[0]]
    assert not run(node.repair.repair_missing(record))
    assert not run(node.repair.repair_missing(record))  # asked again: a client waits
    assert len(node.source.requests) == 4 and len(repair_log) == 1
    assert not node.repair.retry_due(IDS[0])
    node.source.held[P2][IDS[0]] = kept  # the node holding it is back
    assert run(node.repair.repair_missing(record))
    assert node.content(IDS[0]) == b"hello"
    assert node.repair.retry_due(IDS[0]) and node.repair.stats.unavailable == 0
    assert "came back" in repair_log[-1]["log_format"]


def test_the_proactive_pass_finds_the_blob_once_its_peer_is_back(node: Node) -> None:
    clock = Clock()
    node = timed_node(node, clock)
    node.put("k", IDS[0], b"hello")
    node.lose(IDS[0])
    kept = node.source.held[P1].pop(IDS[0])
    del node.source.held[P2][IDS[0]]
    service = node.service(budget=5)
    assert run(service.tick()).repaired == 0
    node.source.held[P1][IDS[0]] = kept
    assert run(service.tick()).deferred == 1  # not due yet
    clock.advance(1.0)
    assert run(service.tick()).repaired == 1
    assert node.content(IDS[0]) == b"hello"
