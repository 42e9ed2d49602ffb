"""The webhook client's request bytes and answer parser, without a socket: framings
(Content-Length, chunked with extensions and trailers, up to the close, none for 204),
answers fed a byte at a time, 1xx skipped, what makes a connection reusable, the body kept
capped, and hostile answers (huge heads, garbage, no line end, bad lengths, bad chunks)."""

from __future__ import annotations

import time

import pytest

from objstore.notify.targets.http1_answer import (
    MAX_CHUNK_LINE,
    MAX_HEAD,
    Answer,
    AnswerError,
    AnswerParser,
    request,
    request_head,
)


def parse(data: bytes, keep: int = 200, *, bytewise: bool = False) -> Answer | None:
    parser = AnswerParser(keep)
    if not bytewise:
        return parser.feed(data)
    answers = [parser.feed(data[i:i + 1]) for i in range(len(data))]
    assert all(a is None for a in answers[:-1]), "complete before its last byte"
    return answers[-1]


def test_the_request_is_one_buffer_with_its_length() -> None:
    head = request_head("POST", "/a%20b?x=1", "h.example:8080",
                        [("Content-Type", "application/json"), ("Authorization", "Bearer é")])
    assert request(head, b'{"R":1}') == (
        b"POST /a%20b?x=1 HTTP/1.1\r\nHost: h.example:8080\r\n"
        b"Content-Type: application/json\r\nAuthorization: Bearer \xc3\xa9\r\n"
        b"Content-Length: 7\r\n\r\n{\"R\":1}")


ANSWERS = [  # (answer, code, kept body, reusable)
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, b"ok", True),
    (b"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", 204, b"", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 200, b"", False),
    (b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n", 200,
     b"", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, b"x", False),
    (b"HTTP/1.1 200\r\ncontent-length: 3\r\n\r\nabc", 200, b"abc", True),  # no reason
    (b"HTTP/1.1 201 Created\nContent-Length: 1\n\nx", 201, b"x", True),  # bare LF
    (b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"5;name=v\r\nhello\r\n1\r\n!\r\n0\r\nX-Trailer: t\r\n\r\n", 500, b"hello!", True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 200, b"", True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n"
     b"0\r\n\r\n", 200, b"", False),  # both framings: the chunks, then no reuse
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX: y\r\n\r\n"
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, b"ok", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok", 200, b"ok",
     True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", 200, b"ok", False),
]


@pytest.mark.parametrize("data, code, body, reusable", ANSWERS)
@pytest.mark.parametrize("bytewise", [False, True])
def test_complete_answers(data: bytes, code: int, body: bytes, reusable: bool,
                          bytewise: bool) -> None:
    if bytewise and data.endswith(b"EXTRA"):  # complete before the extra bytes arrive
        parser = AnswerParser(200)
        assert parser.feed(data[:-5]) == Answer(code, body, True)
        assert parser.feed(b"EXTRA") is None
        return
    assert parse(data, bytewise=bytewise) == Answer(code, body, reusable)


def test_the_kept_body_is_capped_and_the_rest_read() -> None:
    parser = AnswerParser(5)
    assert parser.feed(b"HTTP/1.1 502 Bad\r\nContent-Length: 10000\r\n\r\nabc") is None
    assert parser.feed(b"defgh" + b"x" * 4000) is None
    assert parser.feed(b"y" * 5992) == Answer(502, b"abcde", True)


def test_chunked_kept_body_is_capped_across_chunks() -> None:
    data = (b"HTTP/1.1 500 E\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4\r\ndefg\r\nA\r\n0123456789\r\n0\r\n\r\n")
    assert parse(data, keep=5) == Answer(500, b"abcde", True)


def test_a_body_up_to_the_close() -> None:
    parser = AnswerParser(200)
    assert parser.feed(b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nsome") is None
    assert parser.feed(b" more") is None
    assert parser.closed() == Answer(200, b"some more", False)


@pytest.mark.parametrize("data", [
    b"",
    b"HTTP/1.1 200 OK\r\nContent-Len",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",  # no end of trailers
])
def test_a_close_before_the_answer_is_complete_is_an_error(data: bytes) -> None:
    parser = AnswerParser(200)
    assert parser.feed(data) is None
    assert parser.started == bool(data)
    with pytest.raises(AnswerError, match="closed"):
        parser.closed()


@pytest.mark.parametrize("data, why", [
    (b"garbage\r\n\r\n", "status line"),
    (b"HTTP/2 200\r\n\r\n", "status line"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 20 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 099 Low\r\n\r\n", "status 99"),
    (b"ICY 200 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\n", "upgrade"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "not a length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", "not a length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n", "not a length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n", "not a length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", "not a length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", "two different"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", "line end"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot a trailer\r\n\r\n",
     "trailer"),
])
def test_garbage_is_an_error(data: bytes, why: str) -> None:
    with pytest.raises(AnswerError, match=why):
        parse(data)


def test_a_huge_head_without_an_end_is_an_error_once_over_the_limit() -> None:
    parser = AnswerParser(200, max_head=1000)
    assert parser.feed(b"HTTP/1.1 200 OK\r\n") is None
    for _ in range(24):  # 24 lines of 40 bytes: under the limit, no end yet
        assert parser.feed(b"X-Filler: " + b"a" * 28 + b"\r\n") is None
    with pytest.raises(AnswerError, match="over 1000 bytes"):
        parser.feed(b"X-Filler: " + b"a" * 28 + b"\r\n")


def test_a_stream_without_any_line_end_is_an_error_once_over_the_limit() -> None:
    parser = AnswerParser(200, max_head=100)
    assert parser.feed(b"x" * 100) is None
    with pytest.raises(AnswerError, match="over 100 bytes"):
        parser.feed(b"x")


def test_a_complete_head_over_the_limit_is_an_error() -> None:
    with pytest.raises(AnswerError, match="over 100 bytes"):
        AnswerParser(200, max_head=100).feed(
            b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200 + b"\r\n\r\n")


def test_too_many_fields_is_an_error() -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 11 + b"\r\n"
    with pytest.raises(AnswerError, match="over 10 fields"):
        AnswerParser(200, max_fields=10).feed(head)
    parser = AnswerParser(200, max_fields=11)
    assert parser.feed(head) is None  # no length: the body runs up to the close
    assert parser.closed() == Answer(200, b"", False)


def test_endless_interim_answers_share_the_head_limit() -> None:
    parser = AnswerParser(200, max_head=1000)
    with pytest.raises(AnswerError, match="over"):
        for _ in range(100):
            parser.feed(b"HTTP/1.1 100 Continue\r\n\r\n")


def test_a_chunk_size_line_without_an_end_is_an_error_once_over_its_limit() -> None:
    parser = AnswerParser(200)
    assert parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") is None
    assert parser.feed(b"1" + b" " * (MAX_CHUNK_LINE - 1)) is None
    with pytest.raises(AnswerError, match="chunk-size line"):
        parser.feed(b"  ")


def test_endless_trailers_are_an_error() -> None:
    parser = AnswerParser(200, max_head=1000)
    assert parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n") is None
    with pytest.raises(AnswerError, match="trailers"):
        for _ in range(100):
            parser.feed(b"X-T: " + b"v" * 20 + b"\r\n")


def test_bytes_after_a_complete_answer_only_spoil_the_connection() -> None:
    parser = AnswerParser(200)
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") == \
        Answer(200, b"", True)
    assert parser.feed(b"HTTP/1.1 200 OK\r\n") is None  # nobody asked: no second answer


@pytest.mark.parametrize("prefix", [
    b"HTTP/1.1 200 OK\r\n",  # a head
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: ",  # a trailer line
])
def test_an_answer_sent_a_byte_at_a_time_costs_linear_time(prefix: bytes) -> None:
    """Each byte is not a search of all the bytes before it (64 KiB a byte at a time took
    13 s of CPU when it was: a receiver could burn the reactor's time)."""
    parser = AnswerParser(200)
    assert parser.feed(prefix) is None
    started = time.process_time()
    for _ in range(MAX_HEAD - 200):
        assert parser.feed(b"a") is None
    assert time.process_time() - started < 2.0
