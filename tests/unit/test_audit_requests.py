"""Requests through the real Site, Request and root resource, in memory (no reactor, no
socket): the recorder names each finished request, feeds the metrics and queues an audit
record with the right fields, and never records a signature."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyChannel

from objstore.admin.api import json_body
from objstore.audit import requests as requests_module
from objstore.audit.log import AuditLog
from objstore.audit.requests import RequestRecorder
from objstore.config import ServerLimits
from objstore.errors import S3Error
from objstore.http.root import RootResource
from objstore.http.site import ObjstoreRequest, ObjstoreSite
from objstore.meta.audit_queries import AuditRecord
from objstore.metrics.registry import NodeMetrics
from objstore.s3.api import render_error
from objstore.s3.routes import parse_request_line

Render = Callable[[ObjstoreRequest], bytes]


class Leaf(Resource):
    """Stands for an API: `render` is what the API would do with the request."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.behaviour: Render = lambda request: b"ok"

    def render(self, request: Any) -> bytes:
        return self.behaviour(request)


class S3Leaf(Leaf):
    """Stands for the S3 API, which reads (and notes) the request line first of all."""

    def render(self, request: Any) -> bytes:
        parse_request_line(request)
        return self.behaviour(request)


class Node:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000.0)
        self.s3, self.admin = S3Leaf(), Leaf()
        root = RootResource(s3=self.s3, admin=self.admin, limits=ServerLimits(), domains=())
        self.site = ObjstoreSite(root, tmp_dir=str(tmp_path),
                                 limits=ServerLimits(max_body_size=100), server_header="objstore")
        self.audit = AuditLog(FakeNoStore(), node_id="node-a", clock=self.clock)
        self.metrics = NodeMetrics(node_id="node-a", version="0.test")
        self.site.observer = RequestRecorder(audit=self.audit, metrics=self.metrics.requests,
                                             clock=self.clock.seconds)

    def request(self, method: bytes, uri: bytes, body: bytes = b"",
                headers: dict[bytes, bytes] | None = None) -> ObjstoreRequest:
        channel = DummyChannel()
        channel.site = self.site
        request = ObjstoreRequest(channel)
        for name, value in (headers or {}).items():
            request.requestHeaders.setRawHeaders(name, [value])
        request.gotLength(len(body))
        request.handleContentChunk(body)
        self.clock.advance(0.25)
        request.requestReceived(method, uri, b"HTTP/1.1")
        return request

    def records(self) -> list[AuditRecord]:
        return self.audit.queue.take(1000)

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


class FakeNoStore:
    def insert_audit_records(self, records: Any) -> Any:
        raise AssertionError("nothing is written in these tests")

    def purge_audit(self, before_ts: float, batch_size: int = 0) -> Any:
        raise AssertionError("nothing is purged in these tests")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    yield Node(tmp_path)


def authenticated(render: Render) -> Render:
    def wrapper(request: ObjstoreRequest) -> bytes:
        request.audit.access_key = "AKIAEXAMPLE"
        request.audit.user_id, request.audit.username = "u-1", "alice"
        return render(request)

    return wrapper


def test_s3_request_is_recorded_with_every_field(node: Node) -> None:
    node.s3.behaviour = authenticated(lambda request: b"hello")
    node.request(b"GET", b"/photos/a%20b.jpg?versionId=v1", headers={b"user-agent": b"boto3/1.34"})
    (record,) = node.records()
    assert record.operation == "GetObject"
    assert (record.bucket, record.key) == ("photos", "a b.jpg")
    assert (record.user_id, record.username, record.access_key) == ("u-1", "alice", "AKIAEXAMPLE")
    assert (record.status, record.error_code, record.bytes_out) == (200, "", 5)
    assert record.source_ip == "192.168.1.1"
    assert record.user_agent == "boto3/1.34"
    assert record.node_id == "node-a"
    assert record.request_id and record.duration_ms == 250.0
    assert record.ts == 1_700_000_000.0
    assert record.details == {"version_id": "v1"}
    assert node.sample("objstore_requests_total", operation="GetObject", status="200") == 1
    assert node.sample("objstore_sent_bytes_total", operation="GetObject") == 5
    assert node.sample("objstore_request_duration_seconds_count", operation="GetObject") == 1
    assert node.sample("objstore_requests_in_flight") == 0


def test_refused_request_has_no_user_and_keeps_the_error_code(node: Node) -> None:
    def refuse(request: ObjstoreRequest) -> bytes:
        request.audit.access_key = "AKIAUNKNOWN"
        return render_error(request, S3Error("InvalidAccessKeyId"))

    node.s3.behaviour = refuse
    node.request(b"PUT", b"/b/k", body=b"data")
    (record,) = node.records()
    assert (record.operation, record.status, record.error_code) == ("PutObject", 403,
                                                                   "InvalidAccessKeyId")
    assert (record.user_id, record.username, record.access_key) == ("", "", "AKIAUNKNOWN")
    assert record.bytes_in == 4
    assert node.sample("objstore_errors_total", code="InvalidAccessKeyId") == 1
    assert node.sample("objstore_received_bytes_total", operation="PutObject") == 4


def test_presigned_signature_is_never_recorded(node: Node) -> None:
    node.s3.behaviour = authenticated(lambda request: b"")
    node.request(b"GET", b"/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=deadbeef1234"
                         b"&X-Amz-Credential=AKIA%2F20240101",
                 headers={b"user-agent": b"curl X-Amz-Signature=cafe0123"})
    (record,) = node.records()
    assert "deadbeef1234" not in repr(record) and "cafe0123" not in repr(record)
    assert record.key == "k"


def test_admin_requests_are_named_and_errors_coded(node: Node) -> None:
    node.admin.behaviour = authenticated(
        lambda request: json_body(request, 404, {"error": "NotFound", "message": "No user."}))
    node.request(b"DELETE", b"/admin/users/u-9")
    (record,) = node.records()
    assert (record.operation, record.status, record.error_code) == ("admin:DeleteUser", 404,
                                                                   "NotFound")
    assert (record.bucket, record.key, record.username) == ("", "", "alice")


def test_health_and_metrics_are_counted_not_audited(node: Node) -> None:
    node.admin.behaviour = lambda request: b"{}"
    node.request(b"GET", b"/admin/health")
    node.request(b"GET", b"/admin/metrics")
    assert node.records() == []
    assert node.sample("objstore_requests_total", operation="admin:Health", status="200") == 1
    assert node.sample("objstore_requests_total", operation="admin:GetMetrics", status="200") == 1


def test_client_gone_before_the_answer_is_499(node: Node) -> None:
    node.s3.behaviour = lambda request: NOT_DONE_YET  # the answer never comes
    request = node.request(b"GET", b"/b/k")
    assert node.records() == []
    assert node.sample("objstore_requests_in_flight") == 1
    request.connectionLost(Failure(ConnectionDone()))
    (record,) = node.records()
    assert (record.status, record.error_code) == (499, "ClientDisconnected")
    assert node.sample("objstore_requests_in_flight") == 0


def test_body_refused_before_it_arrives_is_recorded(node: Node) -> None:
    channel = node.site.buildProtocol(None)  # the answer is written by the channel itself
    transport = StringTransport()
    channel.makeConnection(transport)
    request = ObjstoreRequest(channel)
    request.gotLength(1000)  # over max_body_size: answered at once, connection closed
    assert transport.value().startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert transport.disconnecting
    request.connectionLost(Failure(ConnectionDone()))
    channel.connectionLost(Failure(ConnectionDone()))
    (record,) = node.records()
    assert (record.operation, record.status, record.error_code) == ("Unknown", 400,
                                                                   "EntityTooLarge")


def test_cluster_requests_are_ignored(node: Node) -> None:
    node.request(b"GET", b"/cluster/v1/health")
    assert node.records() == []
    assert node.metrics.requests.totals.requests == 0


def test_a_broken_recorder_never_breaks_the_site(node: Node,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bug")

    failures: list[dict[str, Any]] = []
    monkeypatch.setattr(requests_module, "log", Logger(observer=failures.append))
    monkeypatch.setattr(node.audit, "add", broken)
    node.request(b"GET", b"/b/k")
    assert node.site.in_flight == 0
    assert len(failures) == 1


def test_a_user_agent_that_is_not_utf8_is_recorded_escaped(node: Node) -> None:
    node.s3.behaviour = authenticated(lambda request: b"hello")
    node.request(b"GET", b"/b/k", headers={b"user-agent": b"bad\xff\xfeagent"})
    (record,) = node.records()
    assert (record.operation, record.status) == ("GetObject", 200)
    assert record.user_agent == "bad\\xff\\xfeagent"


def test_a_copy_source_that_is_not_utf8_is_named_and_recorded(node: Node) -> None:
    node.s3.behaviour = lambda request: render_error(request, S3Error("InvalidArgument"))
    node.request(b"PUT", b"/b/k", headers={b"x-amz-copy-source": b"/b/\xffk"})
    (record,) = node.records()
    assert (record.operation, record.status, record.error_code) == ("CopyObject", 400,
                                                                   "InvalidArgument")


@pytest.mark.parametrize("name", [b"x-amz-content-sha256", b"x-amz-trailer",
                                  b"x-amz-decoded-content-length"])
@pytest.mark.parametrize("body", [b"", b"data"])
def test_body_headers_that_can_not_be_read_are_refused_before_the_body(
        node: Node, name: bytes, body: bytes) -> None:
    channel = node.site.buildProtocol(None)  # the answer is written by the channel itself
    transport = StringTransport()
    channel.makeConnection(transport)
    request = ObjstoreRequest(channel)
    request.requestHeaders.setRawHeaders(name, [b"\xff"])
    request.gotLength(len(body))  # raised UnicodeDecodeError in the reactor: a dropped socket
    request.handleContentChunk(body)
    request.requestReceived(b"PUT", b"/b/k", b"HTTP/1.1")  # a short body came in with it
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"<Code>InvalidArgument</Code>" in answer
    assert b"<ArgumentName>" + name + b"</ArgumentName>" in answer
    assert answer.count(b"HTTP/1.1") == 1  # never processed after the refusal
    request.connectionLost(Failure(ConnectionDone()))
    (record,) = node.records()
    assert (record.status, record.error_code) == (400, "InvalidArgument")


def test_a_declared_length_that_is_not_a_number_is_refused(node: Node) -> None:
    for value in (b"\xc2\xb2", b"9" * 5000, b"-1"):
        channel = node.site.buildProtocol(None)
        transport = StringTransport()
        channel.makeConnection(transport)
        request = ObjstoreRequest(channel)
        request.requestHeaders.setRawHeaders(b"x-amz-decoded-content-length", [value])
        request.gotLength(0)
        assert b"<Code>InvalidArgument</Code>" in transport.value()
        channel.connectionLost(Failure(ConnectionDone()))


def test_text_the_database_would_refuse_is_escaped_in_every_field(node: Node) -> None:
    record = AuditRecord(ts=1.0, operation="GetObject", bucket="b\x00", key="k\udcff",
                         access_key="AK\ud800", user_agent="ua", details={"upload_id": "u\x00"})
    node.audit.add(record)
    (queued,) = node.records()
    assert (queued.bucket, queued.key, queued.access_key) == ("b\\x00", "k\\xff", "AK\\ud800")
    assert queued.details == {"upload_id": "u\\x00"}
    assert queued.user_agent == "ua"
    for value in (queued.bucket, queued.key, queued.access_key):
        value.encode("utf-8")  # storable


def test_a_clean_record_is_queued_as_it_is(node: Node) -> None:
    record = AuditRecord(ts=1.0, operation="GetObject", bucket="b", key="ké",
                         details={"version_id": "v1"})
    node.audit.add(record)
    (queued,) = node.records()
    assert queued is record
