"""`PeerUploads` (cluster/upload_peers.py) in memory: a fake reconciler whose pulls the test
answers, a `Clock`, and for the part blobs the real `PeerBlobRepair` over SQLite in a temp
dir and the fake peers of test_cluster_blob_repair.py. A refresh pulls every eligible
peer in parallel, survives a failing one, coalesces the calls that arrive while a round
runs into ONE next round, and waits at most its bound; missing part blobs are fetched,
verified against the part's size and ETag, stored with the part's sidecar, and not kept
when the part row changed meanwhile. A round is complete only when every node of the
cluster answered (a failing, timed-out or down member, or fewer than cluster_size - 1
answers, make it incomplete)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from objstore.blobs.store import BlobStore
from objstore.cluster.blob_repair import PeerBlobRepair
from objstore.cluster.membership import PeerState, Verdict
from objstore.cluster.upload_peers import (
    PeerUploads,
    UploadPeersStats,
    expected_part,
    round_complete,
    unasked_members,
)
from objstore.cluster.upload_peers_metrics import UploadPeersCollector
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, PartRecord, UploadRecord
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run
from tests.unit.test_cluster_blob_repair import IDS, P1, P2, FakePeers, FakeSource

UPLOAD = UploadRecord(upload_id="up-1", bucket="b", key="big", initiated_at=5.0,
                      owner_id="u-root", owner_name="root")


@dataclass
class FakeReconciler:
    """Pulls answered by the test (`pending`), or at once when `instant`."""

    client: object | None = "client"
    instant: bool = False
    failing: set[str] = field(default_factory=set)
    pulls: list[str] = field(default_factory=list)
    pending: list[Deferred[None]] = field(default_factory=list)

    async def reconcile_control(self, peer_node_id: str, base_url: str) -> None:
        self.pulls.append(peer_node_id)
        if peer_node_id in self.failing:
            raise ConnectionError("refused")
        if not self.instant:
            gate: Deferred[None] = Deferred()
            self.pending.append(gate)
            await gate

    def answer_all(self) -> None:
        pending, self.pending = self.pending, []
        for gate in pending:
            gate.callback(None)


@dataclass
class Setup:
    sql: SyncMetaStore
    blobs: BlobStore
    source: FakeSource
    repair: PeerBlobRepair
    uploads: PeerUploads
    control: FakeReconciler
    clock: Clock

    def part(self, number: int, blob_id: str, data: bytes) -> PartRecord:
        part = PartRecord(UPLOAD.upload_id, number, blob_id, len(data),
                          hashlib.md5(data).hexdigest(), 7.0)
        self.sql.put_part(part)
        self.source.held.setdefault(P2, {})[blob_id] = data
        return part

    def content(self, blob_id: str) -> bytes | None:
        try:
            with open(self.blobs.blob_path(blob_id), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    sql = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2),
                        clock=lambda: 1000.0)
    sql.migrate()
    sql.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    sql.create_upload(UPLOAD)
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    meta = MetaStore(sql, SyncDbPool())
    source, peers, clock = FakeSource(), FakePeers(), Clock()
    repair = PeerBlobRepair(peers=peers, rows=meta, blobs=blobs, io=InlinePool(),
                            source=source)
    uploads = PeerUploads(peers=peers, repair=repair, rows=meta, blobs=blobs,
                          io=InlinePool(), clock=clock, wait_seconds=10.0)
    control = FakeReconciler()
    uploads.control = control  # type: ignore[assignment]
    yield Setup(sql, blobs, source, repair, uploads, control, clock)
    sql.close()


def started(coroutine: Any) -> Deferred[Any]:
    return Deferred.fromCoroutine(coroutine)


def test_enabled_once_the_reconciler_has_its_client(setup: Setup) -> None:
    assert setup.uploads.enabled
    setup.control.client = None
    assert not setup.uploads.enabled
    setup.control.client = "client"
    setup.uploads.control = None
    assert not setup.uploads.enabled


def test_a_refresh_pulls_every_eligible_peer_and_waits_for_them(setup: Setup) -> None:
    done = started(setup.uploads.refresh())
    assert sorted(setup.control.pulls) == [P1, P2]
    assert not done.called
    setup.control.answer_all()
    assert done.called and setup.uploads.stats.rounds == 1


def test_a_failing_peer_does_not_fail_the_refresh(setup: Setup) -> None:
    setup.control.instant = True
    setup.control.failing = {P1}
    run(setup.uploads.refresh())
    assert sorted(setup.control.pulls) == [P1, P2]


def test_calls_during_a_round_share_one_next_round(setup: Setup) -> None:
    first = started(setup.uploads.refresh())
    second = started(setup.uploads.refresh())
    third = started(setup.uploads.refresh())
    assert len(setup.control.pulls) == 2  # the second round waits for the first
    setup.control.answer_all()
    assert first.called and not second.called and not third.called
    assert len(setup.control.pulls) == 4 and setup.uploads.stats.rounds == 2
    setup.control.answer_all()
    assert second.called and third.called
    assert setup.uploads.stats.rounds == 2


def test_a_refresh_waits_at_most_its_bound(setup: Setup) -> None:
    done = started(setup.uploads.refresh())
    setup.clock.advance(9.9)
    assert not done.called
    setup.clock.advance(0.2)
    assert done.called
    assert setup.clock.getDelayedCalls() == []
    late = started(setup.uploads.refresh())  # the first round still runs: the next one
    setup.control.answer_all()
    setup.control.answer_all()
    assert late.called and setup.uploads.stats.rounds == 2


def test_missing_part_blobs_are_fetched_verified_with_the_parts_sidecar(
        setup: Setup) -> None:
    here = setup.part(1, IDS[0], b"local part")
    setup.blobs.commit_bytes(b"local part", IDS[0], {"kind": "part"})
    elsewhere = setup.part(2, IDS[1], b"made on another node")
    setup.source.held[P1] = {IDS[1]: b"made on another NODE"}  # same size, wrong MD5
    assert run(setup.uploads.fetch_parts(UPLOAD, [here, elsewhere]))
    assert setup.content(IDS[1]) == b"made on another node"
    sidecar = setup.blobs.read_sidecar(IDS[1])
    assert (sidecar["kind"], sidecar["upload_id"], sidecar["part_number"]) == (
        "part", "up-1", 2)
    assert setup.source.requests == [(P1, IDS[1]), (P2, IDS[1])]
    assert (setup.repair.stats.rejected, setup.uploads.stats.parts_fetched) == (1, 1)


def test_a_part_no_peer_has_is_not_fetched(setup: Setup) -> None:
    part = setup.part(1, IDS[0], b"gone")
    setup.source.held.clear()
    assert not run(setup.uploads.fetch_parts(UPLOAD, [part]))
    assert setup.content(IDS[0]) is None
    assert setup.uploads.stats.parts_unavailable == 1


def test_a_part_replaced_meanwhile_keeps_nothing(setup: Setup) -> None:
    old = setup.part(1, IDS[0], b"old bytes")
    setup.part(1, IDS[1], b"new bytes")  # the row now names another blob
    assert not run(setup.uploads.fetch_parts(UPLOAD, [old]))
    assert setup.content(IDS[0]) is None


def test_expected_part_states_size_md5_and_sidecar() -> None:
    part = PartRecord("up-1", 3, IDS[2], 4, hashlib.md5(b"abcd").hexdigest(), 7.0)
    expected = expected_part(UPLOAD, part)
    assert (expected.blob_id, expected.size, expected.md5) == (
        IDS[2], 4, hashlib.md5(b"abcd").hexdigest())
    assert expected.sidecar["upload_id"] == "up-1" and expected.sidecar["key"] == "big"


def test_the_counts_are_exported() -> None:
    registry = CollectorRegistry()
    registry.register(UploadPeersCollector(UploadPeersStats(rounds=3, parts_fetched=2,
                                                            parts_unavailable=1)))
    text = generate_latest(registry).decode()
    assert "objstore_cluster_upload_refresh_rounds_total 3.0" in text
    assert "objstore_cluster_upload_parts_fetched_total 2.0" in text
    assert "objstore_cluster_upload_parts_unavailable_total 1.0" in text


# -- whether a round heard every node (a part not found: InvalidPart or 503) ---------------


def member(node_id: str, *, alive: bool = True, verdict: Verdict | None =
           Verdict.AUTHENTICATED) -> PeerState:
    return PeerState(f"http://{node_id}:9000", 0.0, node_id=node_id, alive=alive,
                     authenticated=alive, config_ok=True, last_verdict=verdict)


def test_a_round_is_complete_only_when_every_member_answered() -> None:
    known = [member("n2"), member("n3")]
    assert round_complete(known, {"n2", "n3"}, failed=0, cluster_size=3)
    assert not round_complete(known, {"n2"}, failed=1, cluster_size=3)  # n3 failed
    down = [member("n2"), member("n3", alive=False)]  # not eligible: never pulled
    assert unasked_members(down, {"n2"}) == ["n3"]
    assert not round_complete(down, {"n2"}, failed=0, cluster_size=3)


def test_cluster_size_counts_the_nodes_never_reached() -> None:
    assert not round_complete([member("n2")], {"n2"}, failed=0, cluster_size=3)
    assert round_complete([member("n2")], {"n2"}, failed=0, cluster_size=2)


def test_peers_not_of_this_cluster_are_not_waited_for() -> None:
    strangers = [member("other", verdict=Verdict.UNTRUSTED),
                 member("wrong-secret", alive=False, verdict=Verdict.REJECTED),
                 member("old", verdict=Verdict.LEGACY), member("me", verdict=Verdict.SELF),
                 PeerState("http://never:9000", 0.0)]
    assert unasked_members(strangers, set()) == []
    assert round_complete(strangers, set(), failed=0, cluster_size=1)


def uploads_with(setup: Setup, known: list[PeerState], cluster_size: int) -> PeerUploads:
    uploads = PeerUploads(peers=FakePeers(), repair=setup.repair, rows=setup.uploads._rows,
                          blobs=setup.blobs, io=InlinePool(), clock=setup.clock,
                          wait_seconds=10.0, cluster_size=cluster_size,
                          known=lambda: known)
    uploads.control = setup.control  # type: ignore[assignment]
    return uploads


def test_a_refresh_says_whether_every_node_answered(setup: Setup) -> None:
    setup.control.instant = True
    everyone = [member(P1), member(P2)]
    assert run(uploads_with(setup, everyone, 3).refresh()) is True
    setup.control.failing = {P1}  # a 5xx, a refused connection
    uploads = uploads_with(setup, everyone, 3)
    assert run(uploads.refresh()) is False
    assert uploads.stats.incomplete_rounds == 1
    setup.control.failing = set()
    third_down = [*everyone, member("n4", alive=False)]
    assert run(uploads_with(setup, third_down, 4).refresh()) is False


def test_a_round_past_the_wait_is_incomplete(setup: Setup) -> None:
    uploads = uploads_with(setup, [member(P1), member(P2)], 3)
    done = started(uploads.refresh())
    setup.clock.advance(10.1)  # a hung peer: the caller stops waiting
    assert done.called and done.result is False
    setup.control.answer_all()
