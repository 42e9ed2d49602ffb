"""The site and its channel before a resource runs, in memory (a `StringTransport`, a
`Clock`, no reactor): a request with a body is admitted from its headers before the body is
read (refused: answered, never invited, nothing spooled; undecided: nothing read and no
`100 Continue` until it is decided), and a request head that is too large, too slow or
malformed is answered with S3 XML, never closed without a word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from objstore.config import ServerLimits
from objstore.errors import S3Error
from objstore.http.channel import Refusal, asks_keep_alive, s3_answer
from objstore.http.site import ObjstoreRequest, ObjstoreSite

HEADER_TIMEOUT = 20.0
IDLE_TIMEOUT = 60.0
GIB = 1024**3


class Admitted:
    hash_body = False


class Api(Resource):
    """The resource every request reaches, and its gatekeeper: `decisions` holds the
    admission the next request gets (None: admitted at once)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[bytes] = []
        self.rendered: list[bytes] = []
        self.decision: Deferred[Any] | None = None

    def admit(self, request: ObjstoreRequest) -> Deferred[Any]:
        self.asked.append(request.uri)
        return self.decision if self.decision is not None else succeed(Admitted())

    def render(self, request: Any) -> bytes:
        body = request.content.read()
        self.rendered.append(body)
        return b"got %d" % len(body)


class Connection:
    def __init__(self, tmp_path: Path, api: Api, clock: Clock) -> None:
        site = ObjstoreSite(api, tmp_dir=str(tmp_path), limits=ServerLimits(max_body_size=2 * GIB),
                            server_header="objstore", header_timeout_seconds=HEADER_TIMEOUT,
                            idle_timeout_seconds=IDLE_TIMEOUT, reactor=clock)
        self.transport = StringTransport()
        self.channel = site.buildProtocol(None)
        self.channel.makeConnection(self.transport)

    def send(self, data: bytes) -> None:
        self.channel.dataReceived(data)

    def sent(self) -> bytes:
        return bytes(self.transport.value())

    def close(self) -> None:
        self.channel.connectionLost(Failure(ConnectionDone()))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api() -> Api:
    return Api()


@pytest.fixture
def conn(tmp_path: Path, api: Api, clock: Clock) -> Any:
    connection = Connection(tmp_path, api, clock)
    yield connection
    connection.close()


def refusal(code: str) -> Deferred[Any]:
    return fail(Refusal(s3_answer(S3Error(code), "REQ", "HOST")))


def put_head(length: int, *, expect: bool = True) -> bytes:
    lines = [b"PUT /bucket/key HTTP/1.1", b"Host: s3.test", b"Content-Length: %d" % length]
    if expect:
        lines.append(b"Expect: 100-continue")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def spooled_files(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if p.is_file()]


# -- admission before the body ---------------------------------------------------------


def test_refused_request_is_answered_before_its_body_and_never_invited(
        conn: Connection, api: Api, tmp_path: Path) -> None:
    api.decision = refusal("AccessDenied")
    conn.send(put_head(GIB))
    answer = conn.sent()
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"100 Continue" not in answer
    assert b"Connection: close\r\n" in answer and b"<Code>AccessDenied</Code>" in answer
    assert conn.transport.disconnecting
    conn.send(b"x" * 65536)  # whatever the client still sends is never read
    assert api.rendered == [] and spooled_files(tmp_path) == []


def test_request_line_and_headers_are_known_to_the_admission(conn: Connection, api: Api
                                                             ) -> None:
    conn.send(put_head(3, expect=False) + b"abc")
    assert api.asked == [b"/bucket/key"]
    assert api.rendered == [b"abc"]


def test_undecided_admission_reads_nothing_and_invites_the_body_once_admitted(
        conn: Connection, api: Api, tmp_path: Path) -> None:
    decision: Deferred[Any] = Deferred()
    api.decision = decision
    conn.send(put_head(5))
    assert conn.sent() == b""  # no 100 Continue yet
    assert conn.transport.producerState == "paused"
    decision.callback(Admitted())
    assert conn.sent() == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert conn.transport.producerState == "producing"
    conn.send(b"hello")
    assert api.rendered == [b"hello"]
    assert b"got 5" in conn.sent()


def test_body_sent_with_the_headers_is_held_in_memory_until_admitted(
        conn: Connection, api: Api, tmp_path: Path) -> None:
    decision: Deferred[Any] = Deferred()
    api.decision = decision
    conn.send(put_head(5, expect=False) + b"hello")
    assert api.rendered == [] and spooled_files(tmp_path) == []
    decision.callback(Admitted())
    assert api.rendered == [b"hello"]
    assert b"100 Continue" not in conn.sent()


def test_undecided_then_refused_never_processes_the_request(
        conn: Connection, api: Api, tmp_path: Path) -> None:
    decision: Deferred[Any] = Deferred()
    api.decision = decision
    conn.send(put_head(5, expect=False) + b"hello")
    decision.errback(Refusal(s3_answer(S3Error("SignatureDoesNotMatch"), "REQ", "HOST")))
    assert conn.sent().startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"<Code>SignatureDoesNotMatch</Code>" in conn.sent()
    assert api.rendered == [] and spooled_files(tmp_path) == []


def test_a_failing_admission_is_an_internal_error_not_a_silent_close(
        conn: Connection, api: Api) -> None:
    api.decision = fail(RuntimeError("bug"))
    conn.send(put_head(5))
    assert conn.sent().startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert api.rendered == []


def test_a_request_without_body_is_admitted_by_its_api_not_by_the_site(
        conn: Connection, api: Api) -> None:
    conn.send(b"GET /bucket/key HTTP/1.1\r\nHost: s3.test\r\n\r\n")
    assert api.asked == [] and api.rendered == [b""]


def test_body_over_the_limit_is_refused_before_admission(conn: Connection, api: Api) -> None:
    conn.send(put_head(3 * GIB))
    assert conn.sent().startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"<Code>EntityTooLarge</Code>" in conn.sent()
    assert api.asked == []


# -- the request head --------------------------------------------------------------------


def assert_refused(conn: Connection, code: str) -> None:
    answer = conn.sent()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer[:200]
    assert f"<Code>{code}</Code>".encode() in answer
    assert b"Content-Type: application/xml\r\n" in answer
    assert conn.transport.disconnecting


def test_request_line_over_16_kib_is_answered(conn: Connection, api: Api) -> None:
    conn.send(b"GET /bucket/" + b"k" * 17000 + b" HTTP/1.1\r\n")
    assert_refused(conn, "RequestHeaderSectionTooLarge")


def test_request_line_over_16_kib_without_its_line_end_is_answered(conn: Connection) -> None:
    conn.send(b"GET /bucket/" + b"k" * 17000)
    assert_refused(conn, "RequestHeaderSectionTooLarge")


def test_header_block_over_16_kib_is_answered(conn: Connection, api: Api) -> None:
    conn.send(b"GET /bucket/key HTTP/1.1\r\n")
    for n in range(20):
        conn.send(b"x-amz-meta-h%d: %s\r\n" % (n, b"v" * 1000))
    assert_refused(conn, "RequestHeaderSectionTooLarge")
    assert api.rendered == []


def test_headers_trickled_past_the_header_timeout_are_answered(conn: Connection,
                                                               clock: Clock) -> None:
    conn.send(b"GET /bucket/key HTTP/1.1\r\n")
    for n in range(int(HEADER_TIMEOUT) - 1):
        clock.advance(1)
        conn.send(b"x-h%d: v\r\n" % n)  # every byte resets the idle timer, not this one
    assert conn.sent() == b""
    clock.advance(1)
    assert_refused(conn, "RequestTimeout")


def test_the_header_timeout_counts_from_the_first_byte_of_each_request(
        conn: Connection, api: Api, clock: Clock) -> None:
    conn.send(b"GET /a HTTP/1.1\r\nHost: s3.test\r\n\r\n")
    assert api.rendered == [b""]
    clock.advance(HEADER_TIMEOUT + 1)  # idle between requests: no header deadline
    assert not conn.transport.disconnecting
    conn.send(b"GET /b HTTP/1.1\r\n")
    clock.advance(HEADER_TIMEOUT - 1)
    conn.send(b"Host: s3.test\r\n\r\n")
    assert len(api.rendered) == 2
    clock.advance(HEADER_TIMEOUT + 1)
    assert not conn.transport.disconnecting


def test_idle_connection_is_closed(conn: Connection, api: Api, clock: Clock) -> None:
    conn.send(b"GET /a HTTP/1.1\r\nHost: s3.test\r\n\r\n")
    answered = conn.sent()
    clock.advance(IDLE_TIMEOUT + 1)
    assert conn.transport.disconnecting
    assert conn.sent() == answered  # between requests: closed without a word


def test_a_body_stalled_past_the_idle_timeout_is_answered(conn: Connection, api: Api,
                                                          clock: Clock) -> None:
    conn.send(put_head(10, expect=False) + b"12345")
    clock.advance(IDLE_TIMEOUT + 1)
    assert_refused(conn, "RequestTimeout")
    assert api.rendered == []


def test_malformed_head_is_answered_with_s3_xml(conn: Connection) -> None:
    conn.send(b"GET /a HTTP/1.1\r\nno colon here\r\n\r\n")
    assert_refused(conn, "InvalidRequest")


def test_an_early_answer_is_written_once_and_the_connection_aborted_if_never_read(
        conn: Connection, clock: Clock) -> None:
    conn.send(b"GET /a HTTP/1.1\r\nno colon here\r\n\r\n")
    conn.channel.answer_early(s3_answer(S3Error("RequestTimeout"), "R", "H"))
    assert conn.sent().count(b"HTTP/1.1 ") == 1
    clock.advance(conn.channel.abortTimeout + 1)
    assert conn.transport.disconnected or conn.transport.disconnecting


@pytest.mark.parametrize("declared", ["²", "1" * 5000, "0" * 30 + "5", "-1", "x"])
def test_odd_decoded_lengths_never_break_the_head(conn: Connection, api: Api,
                                                  declared: str) -> None:
    conn.send(b"PUT /bucket/key HTTP/1.1\r\nHost: s3.test\r\nContent-Length: 3\r\n"
              b"x-amz-decoded-content-length: " + declared.encode() + b"\r\n\r\nabc")
    answer = conn.sent()
    # One rule for numbers (http/client_bytes.py): 1-20 ASCII digits, else refused before
    # the body is read, as S3 XML naming the header; the request is never processed.
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"<Code>InvalidArgument</Code>" in answer
    assert b"<ArgumentName>x-amz-decoded-content-length</ArgumentName>" in answer
    assert api.rendered == []


# -- shutdown ------------------------------------------------------------------------


def test_open_connections_are_closed_after_the_drain(tmp_path: Path) -> None:
    """A keep-alive connection (a peer's, a client's) is closed by `close_connections`,
    which the listener calls after the drain: requests on it would otherwise arrive while
    the node's services and database pools stop under them."""
    clock = Clock()
    site = ObjstoreSite(Api(), tmp_dir=str(tmp_path), limits=ServerLimits(),
                        server_header="objstore", reactor=clock)
    idle, gone = StringTransport(), StringTransport()
    site.buildProtocol(None).makeConnection(idle)
    closed = site.buildProtocol(None)
    closed.makeConnection(gone)
    closed.connectionLost(Failure(ConnectionDone()))
    closed.transport = None  # what a lost connection leaves
    assert site.close_connections() == 1
    assert idle.disconnecting


# -- HTTP/1.0 keep-alive -----------------------------------------------------------------


class StreamingApi(Api):
    """Answers GET /stream by writes without a Content-Length (its end is the close)."""

    def render(self, request: Any) -> Any:
        if request.uri == b"/stream":
            request.write(b"part one ")
            request.write(b"part two")
            request.finish()
            return NOT_DONE_YET
        return super().render(request)


def get_1_0(path: bytes, *connection: bytes, method: bytes = b"GET") -> bytes:
    lines = [method + b" " + path + b" HTTP/1.0", b"Host: s3.test"]
    lines += [b"Connection: " + value for value in connection]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def test_http_1_0_keep_alive_keeps_a_connection_whose_answer_has_a_length(
        tmp_path: Path, clock: Clock) -> None:
    conn = Connection(tmp_path, Api(), clock)
    conn.send(get_1_0(b"/a", b"Keep-Alive"))
    first = conn.sent()
    assert first.startswith(b"HTTP/1.0 200 OK\r\n")
    assert b"Connection: Keep-Alive\r\n" in first and b"Content-Length: 5\r\n" in first
    assert first.endswith(b"got 0") and not conn.transport.disconnecting
    conn.transport.clear()
    conn.send(get_1_0(b"/b", b"TE, keep-alive", method=b"HEAD"))  # a HEAD: no body
    second = conn.sent()
    assert second.startswith(b"HTTP/1.0 200 OK\r\n") and b"Connection: Keep-Alive" in second
    assert not conn.transport.disconnecting
    conn.close()


def test_http_1_0_without_keep_alive_or_without_a_length_ends_with_a_close(
        tmp_path: Path, clock: Clock) -> None:
    plain = Connection(tmp_path, Api(), clock)
    plain.send(get_1_0(b"/a"))
    assert plain.sent().endswith(b"got 0") and b"Keep-Alive" not in plain.sent()
    assert plain.transport.disconnecting
    plain.close()
    streamed = Connection(tmp_path, StreamingApi(), clock)
    streamed.send(get_1_0(b"/stream", b"keep-alive"))
    answer = streamed.sent()
    assert answer.startswith(b"HTTP/1.0 200 OK\r\n") and b"Keep-Alive" not in answer
    assert b"Transfer-Encoding" not in answer and answer.endswith(b"part one part two")
    assert streamed.transport.disconnecting  # the close is what ends the body
    streamed.close()


def test_http_1_1_persistence_is_unchanged(conn: Connection) -> None:
    conn.send(b"GET /a HTTP/1.1\r\nHost: s3.test\r\n\r\n")
    assert b"Connection" not in conn.sent() and not conn.transport.disconnecting
    conn.transport.clear()
    conn.send(b"GET /a HTTP/1.1\r\nHost: s3.test\r\nConnection: close\r\n\r\n")
    assert b"Connection: close" in conn.sent() and conn.transport.disconnecting


@pytest.mark.parametrize(("values", "asks"), [
    (None, False), ([b"close"], False), ([b"Keep-Alive"], True), ([b"TE,keep-alive"], True),
    ([b"upgrade", b" KEEP-ALIVE "], True), ([b"keep-alive-not"], False)])
def test_keep_alive_tokens(values: list[bytes] | None, asks: bool) -> None:
    assert asks_keep_alive(values) is asks
