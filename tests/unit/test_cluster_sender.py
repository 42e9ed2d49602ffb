"""ClientSender: the fan-out's PeerSender over the cluster client (a fake client, the
inline runner, no reactor)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred

from objstore.cluster import sender as sender_module
from objstore.cluster.client import SendFailure
from objstore.cluster.fanout import BlobPayload, ClusterOp
from objstore.cluster.sender import ClientSender
from objstore.cluster.wire import ReplicatedDelete
from objstore.convergence.ack import FULL_ACK, Ack
from objstore.http.slice_producer import SliceProducer
from objstore.meta.records import ObjectRecord
from objstore.threads import InlinePool

ROW = ObjectRecord("b", "k", "null", None, 0, "etag", 100.0)
PEER = "http://peer:9000"


class FakeClient:
    def __init__(self, answer: Ack | SendFailure) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []
        self.deadlines: list[float | None] = []

    async def send_object(self, base_url: str, record: ObjectRecord, *,
                          deadline: float | None = None, blob: bytes | None = None
                          ) -> Ack | SendFailure:
        self.calls.append(("object", base_url, record) if blob is None
                          else ("object+blob", base_url, record, blob))
        self.deadlines.append(deadline)
        return self.answer

    async def send_delete(self, base_url: str, delete: ReplicatedDelete, *,
                          deadline: float | None = None) -> Ack | SendFailure:
        self.calls.append(("delete", base_url, delete))
        self.deadlines.append(deadline)
        return self.answer

    async def put_blob(self, base_url: str, blob_id: str, body: Any, sha256: str, *,
                       deadline: float | None = None) -> Ack | SendFailure:
        self.calls.append(("blob", base_url, blob_id, body, sha256))
        self.deadlines.append(deadline)
        return self.answer

    async def send_op(self, base_url: str, op: ClusterOp) -> bool | SendFailure:
        self.calls.append(("op", base_url, op))
        return self.answer if isinstance(self.answer, SendFailure) else True


def result(coroutine: Any) -> Any:
    done = Deferred.fromCoroutine(coroutine)
    outcome: list[Any] = []
    done.addBoth(outcome.append)
    assert outcome, "the fake client never waits"
    return outcome[0]


def test_an_ack_passes_and_a_failure_is_no_ack() -> None:
    assert result(ClientSender(FakeClient(FULL_ACK), InlinePool()).send_object(PEER, ROW)) \
        == FULL_ACK
    refused = FakeClient(SendFailure("refused", 503))
    assert result(ClientSender(refused, InlinePool()).send_object(PEER, ROW)) is None


def test_a_deletion_goes_as_the_wire_deletion() -> None:
    client = FakeClient(FULL_ACK)
    assert result(ClientSender(client, InlinePool()).send_delete(PEER, "b", "k", "v1", 7.5)) \
        == FULL_ACK
    assert client.calls == [("delete", PEER, ReplicatedDelete("b", "k", "v1", 7.5))]


def test_a_small_blob_is_sent_as_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"stored bytes")
    client = FakeClient(Ack(applied=True, has_blob=True))
    payload = BlobPayload(str(path), 12, "ab" * 32)
    assert result(ClientSender(client, InlinePool()).put_blob(PEER, "id-1", payload)) is True
    assert client.calls == [("blob", PEER, "id-1", b"stored bytes", "ab" * 32)]
    failing = FakeClient(SendFailure("no answer"))
    assert result(ClientSender(failing, InlinePool()).put_blob(PEER, "id-1", payload)) is False


def test_a_large_blob_is_streamed_with_its_length(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(sender_module, "INLINE_BLOB_BYTES", 4)
    path = tmp_path / "blob"
    path.write_bytes(b"larger than four")
    client = FakeClient(FULL_ACK)
    payload = BlobPayload(str(path), 16, "cd" * 32)
    assert result(ClientSender(client, InlinePool()).put_blob(PEER, "id-2", payload)) is True
    body = client.calls[0][3]
    assert isinstance(body, SliceProducer) and body.length == 16


class StreamingClient(FakeClient):
    """Takes the body as a connection would: starts the producer, keeps what it writes."""

    def __init__(self) -> None:
        super().__init__(FULL_ACK)
        self.received: list[bytes] = []

    async def put_blob(self, base_url: str, blob_id: str, body: Any, sha256: str, *,
                       deadline: float | None = None) -> Ack | SendFailure:
        await body.startProducing(self)
        return self.answer

    def write(self, data: bytes) -> None:
        self.received.append(data)


class CountingPool(InlinePool):
    """The inline runner, naming every function it ran (the reactor ran none of them)."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[str] = []

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.ran.append(fn.__name__)
        return super().run(fn, *args, **kwargs)


def test_a_large_blob_is_read_on_the_io_pool_and_closed_after(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    monkeypatch.setattr(sender_module, "INLINE_BLOB_BYTES", 4)
    data = b"0123456789abcdefXYZ"
    path = tmp_path / "blob"
    path.write_bytes(data)
    client, pool = StreamingClient(), CountingPool()
    payload = BlobPayload(str(path), len(data), "cd" * 32)
    assert result(ClientSender(client, pool).put_blob(PEER, "id-2", payload)) is True
    assert b"".join(client.received) == data
    assert pool.ran[0] == "open" and pool.ran[-1] == "close"
    assert set(pool.ran[1:-1]) == {"pread"}


def test_an_op_is_posted_and_a_failure_is_false() -> None:
    client = FakeClient(FULL_ACK)
    op = ClusterOp("iam_changed", subject="user/u1")
    assert result(ClientSender(client, InlinePool()).send_op(PEER, op)) is True
    assert client.calls == [("op", PEER, op)]
    refused = FakeClient(SendFailure("refused", 503))
    assert result(ClientSender(refused, InlinePool()).send_op(PEER, op)) is False


def test_the_fanouts_deadline_reaches_every_request(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"abc")
    client = FakeClient(FULL_ACK)
    sender = ClientSender(client, InlinePool())
    result(sender.put_blob(PEER, "id-1", BlobPayload(str(path), 3, "ab" * 32),
                           deadline=12.5))
    result(sender.send_object(PEER, ROW, deadline=12.5))
    result(sender.send_delete(PEER, "b", "k", "v1", 7.5, deadline=12.5))
    result(sender.send_object(PEER, ROW))
    assert client.deadlines == [12.5, 12.5, 12.5, None]
