"""The bytes of the webhook client's HTTP/1.1 exchange, without a socket or a reactor: the
request as one buffer (`request_head`, `request`), and `AnswerParser`, which reads an answer fed in
pieces as they arrive and tells when it is complete, its status, the start of its body and
whether the connection may carry the next request.

What the parser accepts (a client that only POSTs and only needs the status):
- a status line `HTTP/1.0` or `HTTP/1.1`, three digits, an optional reason; header lines
  `name: value` (a folded line, a line without a colon or a bad name is an error); CRLF
  or a bare LF as the line end;
- interim 1xx answers are skipped (101, an upgrade never asked for, is an error);
- the body: none for 204 and 304; chunked when the last transfer coding is `chunked`
  (extensions and trailers read and dropped); otherwise up to the close when another
  coding is named or no Content-Length is given; else exactly Content-Length bytes (one
  or more equal decimal values; a sign, a non-digit or two different values is an error);
- every head (interim ones and the trailers included) within `max_head` bytes and
  `max_fields` lines, a chunk-size line within MAX_CHUNK_LINE bytes; bytes already
  searched for a line's end are not searched again (an answer sent a byte at a time
  costs time linear in its size).
Of the body only the first `keep` bytes are kept (for the error message), the rest is
counted and dropped. The connection is reusable after an HTTP/1.1 answer framed by its
length or chunks, without `Connection: close`, and with nothing sent after it (bytes
after a complete answer leave the answer as it was and the connection unused).

Anything else raises `AnswerError`: the exchange failed and the connection is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD = 65536  # bytes of the status line and headers (each head, trailers included)
MAX_FIELDS = 100  # header lines per head
MAX_CHUNK_LINE = 1024

_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_STATUS = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: [^\r\n]*)?")
_FIELD = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?")
_DIGITS = re.compile(rb"[0-9]{1,18}")

# Body framings.
_NONE, _LENGTH, _CHUNKED, _UNTIL_CLOSE = range(4)
# Where the parser is.
_HEAD, _BODY, _CHUNK_LINE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _DONE = range(7)


class AnswerError(Exception):
    """An answer the client cannot read (the message says why, for the events view)."""


@dataclass(frozen=True, slots=True)
class Answer:
    code: int
    body: bytes  # at most the parser's `keep` first bytes of the body
    reusable: bool  # the connection may carry the next request


def request_head(method: str, target: str, host: str, fields: list[tuple[str, str]]) -> bytes:
    """The request line and headers (Content-Length aside), each line ending in CRLF:
    made once per target. `target` is the origin form (path and query), `host` the Host
    header's value; names and values hold no CR, LF or NUL (checked by their makers).
    UTF-8 (as Twisted's Headers encoded a str value)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{name}: {value}" for name, value in fields)
    return "".join(line + "\r\n" for line in lines).encode("utf-8")


def request(head: bytes, body: bytes) -> bytes:
    """The whole request, one buffer: `head`, the body's length and the body."""
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)


def _tokens(values: list[bytes]) -> list[bytes]:
    return [t.strip().lower() for v in values for t in v.split(b",") if t.strip()]


class AnswerParser:
    """One answer, fed as it arrives: `feed` returns the Answer once complete (None until
    then), `closed` says what the connection's end means. Raises AnswerError."""

    def __init__(self, keep: int, *, max_head: int = MAX_HEAD,
                 max_fields: int = MAX_FIELDS) -> None:
        self._keep = keep
        self._max_head = max_head
        self._max_fields = max_fields
        self._buffer = bytearray()
        self._state = _HEAD
        self._code = 0
        self._reusable = True
        self._framing = _NONE
        self._left = 0  # body (or chunk) bytes still to come
        self._kept: list[bytes] = []
        self._kept_size = 0
        self._trailer_bytes = 0
        self._scanned = 0  # buffer bytes already searched for the end of a head or line
        self.started = False  # some byte of an answer arrived

    def feed(self, data: bytes) -> Answer | None:
        if data:
            self.started = True
        if self._state == _DONE:  # bytes nobody asked for: the connection is not reused
            self._reusable = self._reusable and not data
            return None
        self._buffer += data
        while True:
            state = self._state
            if state == _HEAD:
                if not self._head():
                    return None
            elif state == _BODY:
                self._take(len(self._buffer))
                if self._framing == _LENGTH and self._left == 0:
                    return self._done()
                return None
            elif state == _CHUNK_LINE:
                if not self._chunk_line():
                    return None
            elif state == _CHUNK_DATA:
                if not self._buffer:
                    return None
                self._take(len(self._buffer))
                if self._left == 0:
                    self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if not self._chunk_end():
                    return None
            elif state == _TRAILERS:
                if not self._trailers():
                    return None
                return self._done()
            else:
                return self._done()

    def closed(self) -> Answer:
        """The server closed the connection: the answer if that completed it (a body read
        up to the close), else AnswerError."""
        if self._state == _BODY and self._framing == _UNTIL_CLOSE:
            self._reusable = False
            return self._done()
        if self._state == _HEAD and not self.started:
            raise AnswerError("the connection was closed before an answer")
        raise AnswerError("the connection was closed in the middle of the answer")

    # -- the parts -------------------------------------------------------------------

    def _head(self) -> bool:
        """Parse one head if the buffer holds it (True: go on)."""
        found = _END_OF_HEAD.search(self._buffer, max(0, self._scanned - 3))
        if found is None:
            if len(self._buffer) > self._max_head:
                raise AnswerError(f"an answer head over {self._max_head} bytes")
            self._scanned = len(self._buffer)  # a head sent a byte at a time: linear
            return False
        self._scanned = 0
        end = found.end()
        if end > self._max_head + 4:
            raise AnswerError(f"an answer head over {self._max_head} bytes")
        lines = bytes(self._buffer[:found.start()]).split(b"\n")
        del self._buffer[:end]
        if len(lines) > self._max_fields + 1:
            raise AnswerError(f"an answer head of over {self._max_fields} fields")
        status = _STATUS.fullmatch(lines[0].rstrip(b"\r"))
        if status is None:
            raise AnswerError(f"not an HTTP/1 status line: {lines[0][:60]!r}")
        code = int(status.group(2))
        fields: dict[bytes, list[bytes]] = {}
        for line in lines[1:]:
            field = _FIELD.fullmatch(line.rstrip(b"\r"))
            if field is None:
                raise AnswerError(f"not a header field: {line[:60]!r}")
            fields.setdefault(field.group(1).lower(), []).append(field.group(2))
        if 100 <= code < 200:
            if code == 101:
                raise AnswerError("an upgrade (101) that was not asked for")
            self._max_head -= end  # the interim heads share the limit
            return True
        if code < 100:
            raise AnswerError(f"status {code}")
        self._code = code
        self._frame(status.group(1) == b"1", fields)
        return True

    def _frame(self, http11: bool, fields: dict[bytes, list[bytes]]) -> None:
        connection = _tokens(fields.get(b"connection", []))
        self._reusable = http11 and b"close" not in connection
        codings = _tokens(fields.get(b"transfer-encoding", []))
        lengths = _tokens(fields.get(b"content-length", []))
        for value in lengths:
            if _DIGITS.fullmatch(value) is None:
                raise AnswerError(f"a Content-Length that is not a length: {value[:30]!r}")
        if len(set(lengths)) > 1:
            raise AnswerError("two different Content-Lengths")
        if self._code in (204, 304):
            self._framing, self._state = _NONE, _DONE
        elif codings:
            if lengths:  # both: the coding wins, the connection is not trusted after it
                self._reusable = False
            if codings[-1] == b"chunked":
                self._framing, self._state = _CHUNKED, _CHUNK_LINE
            else:
                self._framing, self._state, self._reusable = _UNTIL_CLOSE, _BODY, False
        elif lengths:
            self._left = int(lengths[0])
            self._framing = _LENGTH
            self._state = _BODY if self._left else _DONE
        else:
            self._framing, self._state, self._reusable = _UNTIL_CLOSE, _BODY, False

    def _take(self, available: int) -> None:
        """Body bytes from the buffer: all of them (up to the length or chunk's end)."""
        size = available if self._framing == _UNTIL_CLOSE else min(available, self._left)
        if self._kept_size < self._keep:
            piece = bytes(self._buffer[:min(size, self._keep - self._kept_size)])
            self._kept.append(piece)
            self._kept_size += len(piece)
        del self._buffer[:size]
        if self._framing != _UNTIL_CLOSE:
            self._left -= size

    def _line(self, limit: int, what: str) -> bytes | None:
        end = self._buffer.find(b"\n", self._scanned)
        if end < 0:
            if len(self._buffer) > limit:
                raise AnswerError(f"{what} over {limit} bytes")
            self._scanned = len(self._buffer)
            return None
        self._scanned = 0
        if end > limit:
            raise AnswerError(f"{what} over {limit} bytes")
        line = bytes(self._buffer[:end]).rstrip(b"\r")
        del self._buffer[:end + 1]
        return line

    def _chunk_line(self) -> bool:
        line = self._line(MAX_CHUNK_LINE, "a chunk-size line")
        if line is None:
            return False
        size = _CHUNK_SIZE.fullmatch(line)
        if size is None:
            raise AnswerError(f"not a chunk size: {line[:30]!r}")
        self._left = int(size.group(1), 16)
        self._state = _CHUNK_DATA if self._left else _TRAILERS
        return True

    def _chunk_end(self) -> bool:
        if self._buffer[:2] == b"\r\n":
            del self._buffer[:2]
        elif self._buffer[:1] == b"\n":
            del self._buffer[:1]
        elif self._buffer in (b"", b"\r"):
            return False
        else:
            raise AnswerError("a chunk not followed by its line end")
        self._state = _CHUNK_LINE
        return True

    def _trailers(self) -> bool:
        """Trailer lines up to the blank one, dropped (True once it is read)."""
        while True:
            before = len(self._buffer)
            line = self._line(self._max_head, "the trailers")
            if line is None:
                return False
            self._trailer_bytes += before - len(self._buffer)
            if self._trailer_bytes > self._max_head:
                raise AnswerError(f"trailers over {self._max_head} bytes")
            if not line:
                return True
            if _FIELD.fullmatch(line) is None:
                raise AnswerError(f"not a trailer field: {line[:60]!r}")

    def _done(self) -> Answer:
        self._state = _DONE
        if self._buffer:  # sent after the answer: the answer stands, the connection goes
            self._reusable = False
            self._buffer.clear()
        return Answer(self._code, b"".join(self._kept), self._reusable)


__all__ = ["MAX_CHUNK_LINE", "MAX_FIELDS", "MAX_HEAD", "Answer", "AnswerError",
           "AnswerParser", "request", "request_head"]
