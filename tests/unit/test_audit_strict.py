"""[audit] strict in memory (the real Site, root resource, request and recorder; no reactor,
no socket): an audited answer's first byte waits for its record's write, which carries the
answer's status, error code and declared size; a failed write turns the answer into a
503 (S3 XML, admin JSON) whose own record is queued; streamed answers pause their producer
meanwhile; unaudited requests and recording turned off do not wait."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyChannel
from zope.interface import implementer

from objstore.admin.api import json_body
from objstore.audit.strict import StrictAudit, refusal_for
from objstore.http.held_answer import HeldAnswerRequest, bytes_out
from objstore.meta.audit_queries import AuditRecord
from tests.unit.test_audit_requests import Node


class HeldStore:
    """An audit store whose writes wait until the test settles them."""

    def __init__(self) -> None:
        self.writes: list[tuple[list[AuditRecord], defer.Deferred[int]]] = []

    def insert_audit_records(self, records: Any) -> defer.Deferred[int]:
        written: defer.Deferred[int] = defer.Deferred()
        self.writes.append((list(records), written))
        return written

    def purge_audit(self, before_ts: float, batch_size: int = 0) -> Any:
        raise AssertionError("nothing is purged in these tests")


class StrictNode(Node):
    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.store = HeldStore()
        self.audit._store = self.store  # the recorder's log writes through it
        self.site.requestFactory = HeldAnswerRequest
        self.site.answer_gate = StrictAudit(self.site.observer)  # type: ignore[arg-type]
        self.transports: dict[int, Any] = {}  # request's id -> its connection

    def request(self, method: bytes, uri: bytes, body: bytes = b"",
                headers: dict[bytes, bytes] | None = None) -> HeldAnswerRequest:
        channel = DummyChannel()
        channel.site = self.site
        request = HeldAnswerRequest(channel)
        self.transports[id(request)] = channel.transport
        for name, value in (headers or {}).items():
            request.requestHeaders.setRawHeaders(name, [value])
        request.gotLength(len(body))
        request.handleContentChunk(body)
        self.clock.advance(0.25)
        request.requestReceived(method, uri, b"HTTP/1.1")
        return request

    def sent(self, request: HeldAnswerRequest) -> bytes:
        """What reached `request`'s connection (the request lets go of it once finished)."""
        return self.transports[id(request)].written.getvalue()  # type: ignore[no-any-return]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[StrictNode]:
    yield StrictNode(tmp_path)


# -- pure rules ----------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "status", "declared", "written", "expected"), [
    (b"GET", 200, [b"1234"], 0, 1234),
    (b"GET", 206, [b" 77 "], 5, 77),
    (b"PUT", 200, None, 5, 5),
    (b"GET", 200, [b"-1"], 5, 5),  # not a size: what was written
    (b"GET", 200, [b"12abc"], 3, 3),
    (b"GET", 200, [], 0, 0),
    (b"HEAD", 200, [b"1234"], 0, 0),  # the size of a body never sent
    (b"GET", 304, [b"1234"], 0, 0),
    (b"DELETE", 204, [b"0"], 0, 0),
])
def test_bytes_out_is_the_declared_length_else_what_was_written(
        method: bytes, status: int, declared: list[bytes] | None, written: int,
        expected: int) -> None:
    assert bytes_out(method, status, declared, written) == expected


def test_refusal_is_s3_xml_or_admin_json() -> None:
    s3 = refusal_for("s3", "REQ1", "HOST1")
    assert (s3.status, s3.code, s3.content_type) == (503, "ServiceUnavailable",
                                                     b"application/xml")
    assert b"<Code>ServiceUnavailable</Code>" in s3.body and b"REQ1" in s3.body
    assert (b"Retry-After", b"5") in s3.headers
    admin = refusal_for("admin", "REQ1", "HOST1")
    assert (admin.status, admin.content_type) == (503, b"application/json")
    assert (b"Retry-After", b"5") in admin.headers
    assert json.loads(admin.body)["error"] == "ServiceUnavailable"


# -- the hold ------------------------------------------------------------------------------

def test_answer_waits_for_its_record(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: b"hello"
    request = node.request(b"GET", b"/photos/a.jpg", headers={b"user-agent": b"boto3"})
    assert node.sent(request) == b""  # nothing left before the record is written
    assert not request.finished
    ((record,), written) = node.store.writes[0]
    assert (record.operation, record.bucket, record.key) == ("GetObject", "photos", "a.jpg")
    assert (record.status, record.error_code, record.bytes_out) == (200, "", 5)
    assert record.request_id == request.request_id and record.duration_ms == 250.0
    written.callback(1)
    assert node.sent(request).startswith(b"HTTP/1.1 200 ")
    assert node.sent(request).endswith(b"hello")
    assert request.finished
    assert node.records() == []  # recorded once, before the answer: not queued again
    assert node.sample("objstore_requests_total", operation="GetObject", status="200") == 1


def test_error_answer_is_recorded_with_its_code(node: StrictNode) -> None:
    node.admin.behaviour = lambda request: json_body(
        request, 404, {"error": "NotFound", "message": "No user."})
    request = node.request(b"DELETE", b"/admin/users/u-9")
    ((record,), written) = node.store.writes[0]
    assert (record.operation, record.status, record.error_code) == ("admin:DeleteUser", 404,
                                                                   "NotFound")
    written.callback(1)
    assert node.sent(request).startswith(b"HTTP/1.1 404 ")


def test_failed_record_answers_503_instead(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: b"secret answer"
    request = node.request(b"GET", b"/b/k")
    node.store.writes[0][1].errback(Failure(RuntimeError("database down")))
    answer = node.sent(request)
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert b"secret answer" not in answer
    assert b"<Code>ServiceUnavailable</Code>" in answer and b"\r\nRetry-After: 5\r\n" in answer
    assert request.request_id.encode() in answer  # its headers kept the request id
    assert request.finished
    (queued,) = node.records()  # the 503 itself, queued as records are without strict
    assert (queued.status, queued.error_code) == (503, "ServiceUnavailable")
    assert queued.details["withheld_status"] == 200
    assert node.audit.failed_writes == 1


def test_failed_record_of_an_admin_call_answers_json(node: StrictNode) -> None:
    node.admin.behaviour = lambda request: json_body(request, 200, {"users": []})
    request = node.request(b"GET", b"/admin/users")
    node.store.writes[0][1].errback(Failure(RuntimeError("database down")))
    head, _, body = node.sent(request).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"application/json" in head
    assert json.loads(body)["error"] == "ServiceUnavailable"


def test_what_the_handler_does_after_a_refusal_is_ignored(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: NOT_DONE_YET
    request = node.request(b"GET", b"/b/k")
    request.setHeader(b"Content-Length", b"6")
    request.write(b"abc")
    node.store.writes[0][1].errback(Failure(RuntimeError("database down")))
    request.write(b"def")
    request.finish()
    assert b"abc" not in node.sent(request) and b"def" not in node.sent(request)


@implementer(IPushProducer)
class Producer:
    def __init__(self) -> None:
        self.events: list[str] = []

    def pauseProducing(self) -> None:  # noqa: N802
        self.events.append("pause")

    def resumeProducing(self) -> None:  # noqa: N802
        self.events.append("resume")

    def stopProducing(self) -> None:  # noqa: N802
        self.events.append("stop")


def test_streamed_answer_pauses_its_producer_until_the_record(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: NOT_DONE_YET
    request = node.request(b"GET", b"/b/big")
    producer = Producer()
    request.setHeader(b"Content-Length", b"1000000")
    request.registerProducer(producer, True)
    request.write(b"first")
    request.write(b"second")  # written before the pause took: kept, in order
    assert producer.events == ["pause"] and node.sent(request) == b""
    (record,), written = node.store.writes[0]
    assert record.bytes_out == 1_000_000  # as declared
    written.callback(1)
    assert producer.events == ["pause", "resume"]
    assert node.sent(request).endswith(b"firstsecond")
    request.write(b"third")
    assert node.sent(request).endswith(b"third")


def test_refused_stream_stops_its_producer(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: NOT_DONE_YET
    request = node.request(b"GET", b"/b/big")
    producer = Producer()
    request.registerProducer(producer, True)
    request.write(b"first")
    node.store.writes[0][1].errback(Failure(RuntimeError("database down")))
    assert producer.events == ["pause", "stop"]
    assert request.producer is None and request.finished


def test_client_gone_during_the_hold_gets_nothing(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: b"late"
    request = node.request(b"GET", b"/b/k")
    request.connectionLost(Failure(ConnectionDone()))
    node.store.writes[0][1].callback(1)
    assert node.sent(request) == b""
    assert node.records() == []  # its record was written already (status of the answer)


def test_head_answer_records_no_bytes_out(node: StrictNode) -> None:
    def head(request: Any) -> bytes:
        request.setHeader(b"Content-Length", b"4096")
        return b""

    node.s3.behaviour = head
    request = node.request(b"HEAD", b"/b/k")
    ((record,), written) = node.store.writes[0]
    assert (record.operation, record.status, record.bytes_out) == ("HeadObject", 200, 0)
    written.callback(1)
    assert node.sent(request).startswith(b"HTTP/1.1 200 ") and request.finished


def test_unaudited_requests_do_not_wait(node: StrictNode) -> None:
    node.admin.behaviour = lambda request: b"{}"
    request = node.request(b"GET", b"/admin/health")
    assert node.sent(request).startswith(b"HTTP/1.1 200 ")
    assert node.store.writes == []


def test_recording_off_does_not_wait(node: StrictNode) -> None:
    node.audit.enabled = False
    node.s3.behaviour = lambda request: b"hello"
    request = node.request(b"GET", b"/b/k")
    assert node.sent(request).endswith(b"hello") and node.store.writes == []


def test_early_answer_waits_for_its_record(node: StrictNode) -> None:
    channel = node.site.buildProtocol(None)
    transport = StringTransport()
    channel.makeConnection(transport)
    request = HeldAnswerRequest(channel)
    request.gotLength(1000)  # over max_body_size: refused before the body
    assert transport.value() == b""
    ((record,), written) = node.store.writes[0]
    assert (record.status, record.error_code) == (400, "EntityTooLarge")
    written.callback(1)
    assert transport.value().startswith(b"HTTP/1.1 400 ")
    assert transport.disconnecting


def test_early_answer_whose_record_fails_is_503(node: StrictNode) -> None:
    channel = node.site.buildProtocol(None)
    transport = StringTransport()
    channel.makeConnection(transport)
    request = HeldAnswerRequest(channel)
    request.gotLength(1000)
    node.store.writes[0][1].errback(Failure(RuntimeError("database down")))
    assert transport.value().startswith(b"HTTP/1.1 503 ")
    assert b"ServiceUnavailable" in transport.value()
    request.connectionLost(Failure(ConnectionDone()))
    channel.connectionLost(Failure(ConnectionDone()))
    (queued,) = node.records()
    assert (queued.status, queued.error_code) == (503, "ServiceUnavailable")
    assert queued.details["withheld_status"] == 400


def test_records_arriving_during_a_write_go_together_in_the_next(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: b"hello"
    first = node.request(b"GET", b"/b/one")
    others = [node.request(b"GET", f"/b/k{i}".encode()) for i in range(3)]
    assert len(node.store.writes) == 1  # one write in flight; the others wait for it
    node.store.writes[0][1].callback(1)
    assert node.sent(first).endswith(b"hello")
    assert all(node.sent(r) == b"" for r in others)
    records, written = node.store.writes[1]
    assert [r.key for r in records] == ["k0", "k1", "k2"]  # one INSERT for the three
    written.callback(3)
    assert all(node.sent(r).endswith(b"hello") for r in others)
    assert len(node.store.writes) == 2


def test_a_failed_batch_refuses_each_of_its_answers(node: StrictNode) -> None:
    node.s3.behaviour = lambda request: b"hello"
    first = node.request(b"GET", b"/b/one")
    others = [node.request(b"GET", f"/b/k{i}".encode()) for i in range(2)]
    node.store.writes[0][1].callback(1)
    node.store.writes[1][1].errback(Failure(RuntimeError("database down")))
    assert node.sent(first).startswith(b"HTTP/1.1 200 ")
    assert all(node.sent(r).startswith(b"HTTP/1.1 503 ") for r in others)
    assert node.audit.failed_writes == 1
    assert sorted(r.status for r in node.records()) == [503, 503]


def test_a_record_written_at_once_lets_the_answer_go_at_once(node: StrictNode) -> None:
    node.store.insert_audit_records = lambda records: defer.succeed(len(records))  # type: ignore[method-assign]
    node.s3.behaviour = lambda request: b"hello"
    request = node.request(b"GET", b"/b/k")
    assert node.sent(request).endswith(b"hello") and request.finished
