"""Cluster fan-out (rules 1-3): a fake PeerSender whose answers the test settles, a Clock
for the request timeout, real Membership views. No sockets, no reactor."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from objstore.cluster.client import ClusterClient, SendFailure
from objstore.cluster.fanout import BlobPayload, ClusterOp, FanOut, StoredBlobs
from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.sender import ClientSender
from objstore.cluster.wire import INLINE_BLOB_BYTES
from objstore.config import Cluster
from objstore.convergence import lww
from objstore.convergence.ack import FULL_ACK, Ack
from objstore.engine.changes import Caller, Change, ChangeKind, Origin
from objstore.errors import S3Error
from objstore.iam.identity import Principal
from objstore.meta.records import ObjectRecord, PartRef
from objstore.threads import InlinePool

ALICE = Principal("u-1", "alice", False, "AKALICE")
CLIENT = Caller(ALICE)
PEER = Caller(ALICE, origin=Origin.PEER)
BLOB = "0b7c5a52-3a43-4a6f-9d1e-2c3b4a5d6e7f"
PART = "1c8d6b63-4b54-4b7a-8e2f-3d4c5b6e7f80"
ROW = ObjectRecord("b", "k", "null", BLOB, 3, "etag", 100.0)


def cluster(consistency: str = "quorum", size: int = 3) -> Cluster:
    return Cluster(enabled=True, secret="s" * 16, cluster_size=size, consistency=consistency,
                   request_timeout_seconds=2.0)


def membership(*eligible: str, drifted: str = "") -> Membership:
    view = Membership("self")
    for node in eligible:
        view.observe(f"http://{node}:9000", ProbeResult(status=200, mac_ok=True,
                                                        fingerprint_ok=True, node_id=node),
                     now=1.0)
    if drifted:
        view.observe(f"http://{drifted}:9000", ProbeResult(status=200, mac_ok=True,
                                                           fingerprint_ok=False,
                                                           node_id=drifted), now=1.0)
    return view


class FakeSender:
    """Records every call; answers from `answers` (base_url -> Ack | None | Deferred)."""

    def __init__(self, answers: dict[str, Any] | None = None, *,
                 blob_ok: bool = True) -> None:
        self.answers = answers or {}
        self.inline_answers: dict[str, Ack | None] = {}  # a row sent with its bytes
        self.blob_ok = blob_ok
        self.calls: list[tuple[Any, ...]] = []
        self.deadlines: list[float | None] = []
        self.ops: dict[str, Deferred[bool]] = {}

    async def send_object(self, base_url: str, record: ObjectRecord, *,
                          deadline: float | None = None, blob: bytes | None = None
                          ) -> Ack | None:
        if blob is None:
            self.calls.append(("object", base_url, record.key))
            self.deadlines.append(deadline)
            return await self._answer(base_url)
        self.calls.append(("object+blob", base_url, record.key, blob))
        self.deadlines.append(deadline)
        return self.inline_answers.get(base_url, FULL_ACK)

    async def send_delete(self, base_url: str, bucket: str, key: str, version_id: str,
                          deleted_at: float, *, deadline: float | None = None
                          ) -> Ack | None:
        self.calls.append(("delete", base_url, key, version_id, deleted_at))
        self.deadlines.append(deadline)
        return await self._answer(base_url)

    async def put_blob(self, base_url: str, blob_id: str, blob: BlobPayload, *,
                       deadline: float | None = None) -> bool:
        self.calls.append(("blob", base_url, blob_id, blob.sha256))
        self.deadlines.append(deadline)
        return self.blob_ok

    async def send_op(self, base_url: str, op: ClusterOp) -> bool:
        self.calls.append(("op", base_url, op.kind, op.record is not None))
        self.ops[base_url] = Deferred()
        return await self.ops[base_url]

    async def _answer(self, base_url: str) -> Ack | None:
        answer = self.answers.get(base_url, FULL_ACK)
        if isinstance(answer, Deferred):
            return await answer
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]


class Blobs:
    def __init__(self, missing: tuple[str, ...] = (), data: bytes | None = None) -> None:
        self.missing = missing
        self.data = data  # the bytes of a blob small enough to travel in its row

    async def payload(self, blob_id: str) -> BlobPayload | None:
        return None if blob_id in self.missing else BlobPayload(f"/d/{blob_id}", 3, "ab",
                                                                self.data)


def fanout(sender: FakeSender, view: Membership, config: Cluster | None = None,
           clock: Clock | None = None, blobs: Blobs | None = None) -> FanOut:
    return FanOut(cluster=config or cluster(), membership=view, sender=sender,
                  blobs=blobs or Blobs(), clock=clock or Clock())


def written(caller: Caller = CLIENT, record: ObjectRecord = ROW,
            kind: ChangeKind = ChangeKind.OBJECT_WRITTEN) -> Change:
    return Change(kind, caller, record.bucket, record.key, record.version_id, record)


def outcome(waiting: Deferred[None] | None) -> Any:
    """The settled result of the sink's awaitable: None, or the failure's exception."""
    assert waiting is not None
    results: list[Any] = []
    waiting.addBoth(lambda r: results.append(r.value if isinstance(r, Failure) else r))
    assert results, "the fan-out has not settled"
    return results[0]


def test_a_peer_change_is_never_sent_on() -> None:
    sender = FakeSender()
    sink = fanout(sender, membership("a", "b"))
    for kind in ChangeKind:
        assert sink.committed(written(PEER, kind=kind)) is None
    assert sender.calls == []


def test_a_write_goes_to_every_eligible_peer_blob_first() -> None:
    sender = FakeSender()
    sink = fanout(sender, membership("a", "b", drifted="x"))
    assert outcome(sink.committed(written())) is None
    for peer in ("http://a:9000", "http://b:9000"):
        calls = [c for c in sender.calls if c[1] == peer]
        assert calls == [("blob", peer, BLOB, "ab"), ("object", peer, "k")]
    assert not [c for c in sender.calls if c[1] == "http://x:9000"]  # not eligible
    assert (sink.stats.writes, sink.stats.acks, sink.stats.shortfalls) == (1, 2, 0)


def test_sends_are_parallel() -> None:
    slow: Deferred[Ack | None] = Deferred()
    sender = FakeSender({"http://a:9000": slow})
    waiting = fanout(sender, membership("a", "b")).committed(written())
    assert ("object", "http://b:9000", "k") in sender.calls  # b was not held up by a
    assert waiting is not None and not waiting.called
    slow.callback(FULL_ACK)
    assert outcome(waiting) is None


def test_a_composite_sends_its_parts_and_a_marker_no_blob() -> None:
    composite = ObjectRecord("b", "k", "v1", BLOB, 6, "e-2", 1.0,
                             parts=(PartRef(1, PART, 6, "e"),))
    sender = FakeSender()
    outcome(fanout(sender, membership("a")).committed(written(record=composite)))
    assert [c[2] for c in sender.calls if c[0] == "blob"] == [PART]
    marker = ObjectRecord("b", "k", "v2", None, 0, "", 2.0, is_delete_marker=True)
    sender = FakeSender()
    outcome(fanout(sender, membership("a")).committed(
        written(record=marker, kind=ChangeKind.DELETE_MARKER_WRITTEN)))
    assert sender.calls == [("object", "http://a:9000", "k")]


def test_a_missing_blob_still_sends_the_row() -> None:
    sender = FakeSender()
    outcome(fanout(sender, membership("a"), blobs=Blobs(missing=(BLOB,))).committed(written()))
    assert sender.calls == [("object", "http://a:9000", "k")]


def test_a_blob_that_can_not_be_read_sends_the_row_alone() -> None:
    class Broken:
        async def payload(self, blob_id: str) -> BlobPayload | None:
            raise OSError("EIO")

    sender = FakeSender({"http://a:9000": Ack(True, False)})
    result = outcome(fanout(sender, membership("a"), blobs=Broken(),  # type: ignore[arg-type]
                            config=cluster(size=2)).committed(written()))
    assert sender.calls == [("object", "http://a:9000", "k")]
    assert isinstance(result, S3Error)  # 1 + 0 full acks < 2


def test_a_deletion_without_a_stamp_is_stamped_no_older_than_the_row_it_removes() -> None:
    clock = Clock()
    clock.advance(50.0)  # behind the removed row (100.0)
    sender = FakeSender()
    outcome(fanout(sender, membership("a"), clock=clock).committed(
        written(kind=ChangeKind.VERSION_DELETED)))
    # strictly after the removed row (lww.tombstone_stamp): 1 µs on
    assert sender.calls == [("delete", "http://a:9000", "k", "null",
                             lww.stamp_write(0.0, 100.0))]
    clock.advance(100.0)
    sender.calls.clear()
    outcome(fanout(sender, membership("a"), clock=clock).committed(
        written(kind=ChangeKind.VERSION_DELETED)))
    assert sender.calls[0][4] == 150.0


def test_a_deletion_sends_exactly_the_stamp_of_its_local_tombstone() -> None:
    clock = Clock()
    clock.advance(150.25)  # the fan-out runs later than the delete committed
    deleted = Change(ChangeKind.VERSION_DELETED, CLIENT, ROW.bucket, ROW.key,
                     ROW.version_id, ROW, deleted_at=150.0)
    sender = FakeSender()
    outcome(fanout(sender, membership("a", "b"), clock=clock).committed(deleted))
    assert sorted(sender.calls) == [("delete", "http://a:9000", "k", "null", 150.0),
                                    ("delete", "http://b:9000", "k", "null", 150.0)]


@pytest.mark.parametrize(("answers", "refused"), [
    ({}, False),  # 1 + 2 >= 2
    ({"http://a:9000": None}, False),  # 1 + 1 >= 2
    ({"http://a:9000": None, "http://b:9000": Ack(True, False)}, True),  # no blob there
    ({"http://a:9000": RuntimeError("down"), "http://b:9000": Ack(False, True)}, True),
])
def test_quorum_counts_full_acknowledgements_after_the_fanout(
        answers: dict[str, Any], refused: bool) -> None:
    sink = fanout(FakeSender(answers), membership("a", "b"))
    result = outcome(sink.committed(written()))
    if refused:
        assert isinstance(result, S3Error) and result.code == "ServiceUnavailable"
        assert "stored on this node" in result.message
        assert sink.stats.shortfalls == 1
    else:
        assert result is None


def test_membership_alone_is_not_a_quorum() -> None:
    # Every peer eligible, none acknowledges: the write is refused (PITFALLS: count acks).
    sink = fanout(FakeSender({"http://a:9000": None, "http://b:9000": None}),
                  membership("a", "b"))
    assert isinstance(outcome(sink.committed(written())), S3Error)
    assert sink.stats.missed_acks == 2


def test_available_mode_ignores_acknowledgements() -> None:
    sender = FakeSender({"http://a:9000": None, "http://b:9000": None})
    sink = fanout(sender, membership("a", "b"), config=cluster("available"))
    assert outcome(sink.committed(written())) is None
    assert len([c for c in sender.calls if c[0] == "object"]) == 2


def test_a_peer_slower_than_the_request_timeout_is_no_ack() -> None:
    clock = Clock()
    never: Deferred[Ack | None] = Deferred()
    sink = fanout(FakeSender({"http://a:9000": never, "http://b:9000": Deferred()}),
                  membership("a", "b"), clock=clock)
    waiting = sink.committed(written())
    assert waiting is not None and not waiting.called
    clock.advance(1.9)
    assert not waiting.called
    clock.advance(0.2)
    assert isinstance(outcome(waiting), S3Error)


def test_a_single_node_cluster_needs_no_peer() -> None:
    sink = fanout(FakeSender(), membership(), config=cluster(size=1))
    assert outcome(sink.committed(written())) is None


@pytest.mark.parametrize("kind", [ChangeKind.TAGS_CHANGED, ChangeKind.LOCK_CHANGED,
                                  ChangeKind.ACL_CHANGED, ChangeKind.BUCKET_CREATED,
                                  ChangeKind.IAM_CHANGED,
                                  ChangeKind.SETTING_CHANGED])
def test_control_plane_changes_are_fire_and_forget(kind: ChangeKind) -> None:
    clock = Clock()
    sender = FakeSender()
    sink = fanout(sender, membership("a", "b"), clock=clock)
    assert sink.committed(written(kind=kind)) is None  # the client never waits
    carries_row = kind in (ChangeKind.TAGS_CHANGED, ChangeKind.LOCK_CHANGED,
                           ChangeKind.ACL_CHANGED)
    assert sorted(sender.calls) == [("op", "http://a:9000", kind.value, carries_row),
                                    ("op", "http://b:9000", kind.value, carries_row)]
    assert sink.in_flight == 2
    sender.ops["http://a:9000"].callback(True)
    sender.ops["http://b:9000"].errback(RuntimeError("refused"))
    assert (sink.in_flight, sink.stats.ops_sent, sink.stats.ops_failed) == (0, 1, 1)


def test_a_best_effort_op_times_out_quietly() -> None:
    clock = Clock()
    sink = fanout(FakeSender(), membership("a"), clock=clock)
    sink.committed(written(kind=ChangeKind.BUCKET_CONFIGURED))
    clock.advance(2.1)
    assert (sink.in_flight, sink.stats.ops_failed) == (0, 1)


def test_upload_changes_are_best_effort_notices() -> None:
    sender = FakeSender()
    sink = fanout(sender, membership("a"))
    kinds = (ChangeKind.UPLOAD_CREATED, ChangeKind.PART_WRITTEN, ChangeKind.UPLOAD_ABORTED,
             ChangeKind.UPLOAD_COMPLETED)
    for kind in kinds:
        assert sink.committed(written(kind=kind)) is None
    assert [(call[0], call[2]) for call in sender.calls] == [
        ("op", kind.value) for kind in kinds]


def test_a_small_blob_travels_inside_its_row() -> None:
    sender = FakeSender()
    sink = fanout(sender, membership("a", "b"), blobs=Blobs(data=b"abc"))
    assert outcome(sink.committed(written())) is None
    assert sorted(sender.calls) == [("object+blob", f"http://{n}:9000", "k", b"abc")
                                    for n in ("a", "b")]
    assert sink.stats.acks == 2


def test_a_peer_that_ignores_the_bytes_gets_them_the_old_way() -> None:
    """An older node applies the row without the bytes it does not know of and says
    has_blob: false; the blob then goes through the blob route and the row again."""
    sender = FakeSender()
    sender.inline_answers["http://a:9000"] = Ack(applied=True, has_blob=False)
    sink = fanout(sender, membership("a"), cluster(size=2), blobs=Blobs(data=b"abc"))
    assert outcome(sink.committed(written())) is None
    assert sender.calls == [("object+blob", "http://a:9000", "k", b"abc"),
                            ("blob", "http://a:9000", BLOB, "ab"),
                            ("object", "http://a:9000", "k")]
    assert len(set(sender.deadlines)) == 1  # one deadline for the whole exchange


def test_no_answer_to_a_row_with_its_bytes_is_no_ack_and_nothing_more() -> None:
    sender = FakeSender()
    sender.inline_answers["http://a:9000"] = None
    sink = fanout(sender, membership("a"), cluster(size=2), blobs=Blobs(data=b"abc"))
    assert isinstance(outcome(sink.committed(written())), S3Error)  # quorum 2 of 2
    assert [c[0] for c in sender.calls] == ["object+blob"]


def test_a_composite_and_a_large_blob_keep_the_blob_route() -> None:
    composite = ObjectRecord("b", "k", "null", BLOB, 6, "etag-2", 100.0,
                             parts=(PartRef(1, PART, 3, "e1"), PartRef(2, BLOB, 3, "e2")))
    sender = FakeSender()
    sink = fanout(sender, membership("a"), cluster(size=2), blobs=Blobs(data=b"abc"))
    assert outcome(sink.committed(written(record=composite))) is None
    assert [c[0] for c in sender.calls] == ["blob", "blob", "object"]
    large = FakeSender()
    sink = fanout(large, membership("a"), cluster(size=2), blobs=Blobs(data=None))
    assert outcome(sink.committed(written())) is None
    assert [c[0] for c in large.calls] == ["blob", "object"]


def test_stored_blobs_measure_and_hash_the_file(tmp_path: Any) -> None:
    class Store:
        def blob_path(self, blob_id: str) -> str:
            return str(tmp_path / blob_id)

    class Inline:
        def run(self, fn: Any, *args: Any) -> Deferred[Any]:
            from twisted.internet.defer import succeed
            return succeed(fn(*args))

    (tmp_path / BLOB).write_bytes(b"abc")
    source = StoredBlobs(Store(), Inline())  # type: ignore[arg-type]
    found = outcome(Deferred.fromCoroutine(source.payload(BLOB)))
    assert found == BlobPayload(str(tmp_path / BLOB), 3, "ba7816bf8f01cfea414140de5dae2223"
                                "b00361a396177a9cb410ff61f20015ad", b"abc")
    assert outcome(Deferred.fromCoroutine(source.payload(PART))) is None
    # Past the inline size the bytes are not kept (the blob route streams the file).
    (tmp_path / PART).write_bytes(b"x" * (INLINE_BLOB_BYTES + 1))
    large = outcome(Deferred.fromCoroutine(source.payload(PART)))
    assert large.size == INLINE_BLOB_BYTES + 1 and large.data is None


# -- one deadline per write and peer: the real client over an HTTP stand-in ----------------


class HungHttp:
    """A peer that takes every request and never answers (a SIGSTOPped process): each
    request a fresh Deferred, cancelled by the client's bound. `answer_after` maps a
    method to the seconds after which that request is answered instead (a slow peer)."""

    def __init__(self, clock: Clock, answer_after: dict[str, float] | None = None) -> None:
        self.clock = clock
        self.answer_after = answer_after or {}
        self.started: list[tuple[str, float]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[Any]:
        self.started.append((method, self.clock.seconds()))
        pending: Deferred[Any] = Deferred()
        if method in self.answer_after:
            self.clock.callLater(self.answer_after[method], _answer_refused, pending)
        return pending


def _answer_refused(pending: Deferred[Any]) -> None:
    if not pending.called:
        pending.errback(ConnectionRefusedError("the peer gave up"))


class FileBlobs:
    def __init__(self, path: Any) -> None:
        self.path = path

    async def payload(self, blob_id: str) -> BlobPayload | None:
        return BlobPayload(str(self.path), 3, "ab" * 32)


def real_sender_fanout(http: HungHttp, tmp_path: Any, config: Cluster) -> FanOut:
    (tmp_path / "blob").write_bytes(b"abc")
    client = ClusterClient(cluster=config, node_id="self", http=http, clock=http.clock)
    return FanOut(cluster=config, membership=membership("a"),
                  sender=ClientSender(client, InlinePool()),
                  blobs=FileBlobs(tmp_path / "blob"), clock=http.clock)


def test_a_hung_peer_holds_a_write_for_one_request_timeout_not_two(tmp_path: Any) -> None:
    clock = Clock()
    clock.advance(1000.0)
    http = HungHttp(clock)
    sink = real_sender_fanout(http, tmp_path, cluster(size=2))
    waiting = sink.committed(written())
    assert waiting is not None and [method for method, _ in http.started] == ["PUT"]
    clock.advance(1.9)
    assert not waiting.called
    clock.advance(0.2)  # past request_timeout_seconds (2.0) from the start: no ack
    assert isinstance(outcome(waiting), S3Error)
    clock.advance(10.0)  # and nothing of this write asks the peer anything later
    assert [method for method, _ in http.started] == ["PUT"]
    assert sink.stats.missed_acks == 1


def test_the_row_gets_what_the_blob_left_of_the_deadline(tmp_path: Any) -> None:
    clock = Clock()
    clock.advance(1000.0)
    http = HungHttp(clock, answer_after={"PUT": 1.5})  # the blob fails after 1.5 s
    sink = real_sender_fanout(http, tmp_path, cluster("available", size=2))
    waiting = sink.committed(written())
    assert waiting is not None
    clock.advance(1.5)
    assert [method for method, _ in http.started] == ["PUT", "POST"]
    assert http.started[1][1] == 1001.5
    clock.advance(0.4)
    assert not waiting.called
    clock.advance(0.2)  # 2.1 s after the start, not 1.5 + 2.0
    assert waiting.called and outcome(waiting) is None
    assert (sink.stats.blob_failures, sink.stats.missed_acks) == (1, 1)


def test_every_request_of_a_write_gets_the_same_deadline() -> None:
    clock = Clock()
    clock.advance(50.0)
    sender = FakeSender()
    sink = fanout(sender, membership("a"), clock=clock)
    outcome(sink.committed(written()))
    assert [call[0] for call in sender.calls] == ["blob", "object"]
    assert sender.deadlines == [52.0, 52.0]


def test_a_request_is_not_started_once_the_deadline_passed() -> None:
    clock = Clock()
    clock.advance(10.0)
    http = HungHttp(clock)
    client = ClusterClient(cluster=cluster(), node_id="self", http=http, clock=clock)
    failure = outcome(Deferred.fromCoroutine(client.send_object("http://a:9000", ROW,
                                                                deadline=9.5)))
    assert isinstance(failure, SendFailure) and http.started == []
