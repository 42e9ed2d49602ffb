"""Streamed, signed uploads for the memory and multipart benchmarks.

This module owns the client side of large uploads: a body that is generated as it is sent
(a short random pattern repeated, so a GiB never sits in the harness's memory and the bytes
at any offset are known without storing them), header-signed requests with
UNSIGNED-PAYLOAD over http.client (the kernel copies each 1 MiB chunk; Python only loops),
and the multipart calls (initiate, part, complete) with their XML. The body helpers are pure
and unit-tested. It talks only to the loopback daemon.
"""

from __future__ import annotations

import hashlib
import http.client
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlsplit
from xml.sax.saxutils import escape

from lxml import etree

from bench.s3 import S3Target

MIB = 1024**2
CHUNK_BYTES = MIB
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


# -- the body (pure) ----------------------------------------------------------------------


class Pattern:
    """A virtual body: byte i is `data[i % len(data)]`. A period prime to the part sizes
    makes every part's bytes different, so a misplaced part shows up in a ranged GET."""

    def __init__(self, data: bytes) -> None:
        if not data:
            raise ValueError("an empty pattern")
        self.data = data
        self._doubled = memoryview(data + data)

    @property
    def period(self) -> int:
        return len(self.data)

    def chunks(self, start: int, length: int, chunk_bytes: int = CHUNK_BYTES
               ) -> Iterator[memoryview]:
        """The bytes [start, start + length) as views of at most `chunk_bytes` (and of at
        most one period: each is a slice of the pattern written twice)."""
        step = min(chunk_bytes, self.period)
        position, remaining = start % self.period, length
        while remaining > 0:
            take = min(step, remaining)
            yield self._doubled[position:position + take]
            position = (position + take) % self.period
            remaining -= take

    def read(self, start: int, length: int) -> bytes:
        return b"".join(self.chunks(start, length))

    def md5(self, start: int, length: int) -> bytes:
        digest = hashlib.md5()
        for chunk in self.chunks(start, length):
            digest.update(chunk)
        return digest.digest()


@dataclass(frozen=True)
class PartPlan:
    number: int  # 1-based
    offset: int
    size_bytes: int


def plan_parts(total_bytes: int, count: int) -> list[PartPlan]:
    """`count` parts of ceil(total / count) bytes, the last one shorter or equal: S3 wants
    every part but the last to be at least 5 MiB, and a fixed size keeps ranges simple."""
    if count < 1 or total_bytes < count:
        raise ValueError(f"cannot cut {total_bytes} bytes into {count} parts")
    size = math.ceil(total_bytes / count)
    parts = []
    for index in range(count):
        offset = index * size
        length = min(size, total_bytes - offset)
        if length <= 0:
            raise ValueError(f"{count} parts of {size} bytes overshoot {total_bytes} bytes")
        parts.append(PartPlan(index + 1, offset, length))
    return parts


def multipart_etag(part_md5s: list[bytes]) -> str:
    """S3's ETag of a completed multipart upload: MD5 of the parts' MD5s, dash, count."""
    return f'"{hashlib.md5(b"".join(part_md5s)).hexdigest()}-{len(part_md5s)}"'


def complete_body(etags: list[tuple[int, str]]) -> bytes:
    parts = "".join(f"<Part><PartNumber>{number}</PartNumber><ETag>{escape(etag)}</ETag></Part>"
                    for number, etag in etags)
    return (f'<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"{parts}</CompleteMultipartUpload>").encode()


def boundary_range(parts: list[PartPlan], after_part: int, span_bytes: int
                   ) -> tuple[int, int]:
    """An inclusive byte range of `span_bytes` centred on the end of part `after_part`."""
    boundary = parts[after_part - 1].offset + parts[after_part - 1].size_bytes
    first = max(0, boundary - span_bytes // 2)
    last = min(parts[-1].offset + parts[-1].size_bytes, first + span_bytes) - 1
    return first, last


# -- requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    seconds: float  # from sending the request line to the last byte of the answer


class Connection:
    """One keep-alive HTTP/1.1 connection sending header-signed requests."""

    def __init__(self, target: S3Target, timeout_seconds: float) -> None:
        self.target = target
        parts = urlsplit(target.base_url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port
        self._timeout = timeout_seconds
        self._conn = self._open()

    def _open(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        conn.connect()
        return conn

    def close(self) -> None:
        self._conn.close()

    def request(self, method: str, path: str, body: bytes | Iterator[memoryview] | None = None,
                length: int | None = None, headers: dict[str, str] | None = None,
                payload_sha256: str | None = None) -> Answer:
        """Send one request; an iterator body needs its `length` (no chunked encoding).
        The answer is read whole: only small XML or ranges are read through here."""
        extra = dict(headers or {})
        if payload_sha256 is None and isinstance(body, bytes):
            payload_sha256 = hashlib.sha256(body).hexdigest()
        signed = (self.target.signed_headers(method, path, payload_sha256, headers)
                  if payload_sha256 else
                  self.target.signed_headers(method, path, headers=headers))
        size = len(body) if isinstance(body, bytes) else (length or 0)
        if body is not None or method in ("PUT", "POST"):
            extra["Content-Length"] = str(size)
        started = time.perf_counter()
        try:
            self._conn.request(method, path, body=body, headers={**extra, **signed})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early (an error): read what it said
        response = self._conn.getresponse()
        data = response.read()
        seconds = time.perf_counter() - started
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()},
                        data, seconds)
        if response.will_close:
            self._conn.close()
            self._conn = self._open()
        return answer


def object_path(bucket: str, key: str, query: str = "") -> str:
    return f"/{bucket}/{quote(key)}" + (f"?{query}" if query else "")


def xml_text(body: bytes, name: str) -> str | None:
    try:
        return etree.fromstring(body).findtext(f"{_S3_NS}{name}")
    except etree.XMLSyntaxError:
        return None


def initiate(conn: Connection, bucket: str, key: str) -> str:
    answer = conn.request("POST", object_path(bucket, key, "uploads="), b"")
    upload_id = xml_text(answer.body, "UploadId")
    if answer.status != 200 or not upload_id:
        raise RuntimeError(f"CreateMultipartUpload {key}: {answer.status} {answer.body[:300]!r}")
    return upload_id


def upload_part(conn: Connection, bucket: str, key: str, upload_id: str, part: PartPlan,
                pattern: Pattern) -> str:
    """Send one part (its bytes straight from the pattern); its ETag as answered."""
    path = object_path(bucket, key, f"partNumber={part.number}&uploadId={quote(upload_id)}")
    answer = conn.request("PUT", path, pattern.chunks(part.offset, part.size_bytes),
                          part.size_bytes)
    etag = answer.headers.get("etag", "")
    if answer.status != 200 or not etag:
        raise RuntimeError(f"UploadPart {part.number} of {key}: {answer.status} "
                           f"{answer.body[:300]!r}")
    return etag


def part_md5s(pattern: Pattern, parts: list[PartPlan]) -> list[bytes]:
    """The MD5 of each part's bytes, hashing each distinct (phase, size) once: with a
    period dividing the part size, 32 GiB of parts cost one part's hashing."""
    cache: dict[tuple[int, int], bytes] = {}
    digests = []
    for part in parts:
        shape = (part.offset % pattern.period, part.size_bytes)
        if shape not in cache:
            cache[shape] = pattern.md5(part.offset, part.size_bytes)
        digests.append(cache[shape])
    return digests


def complete(conn: Connection, bucket: str, key: str, upload_id: str,
             etags: list[tuple[int, str]]) -> Answer:
    """CompleteMultipartUpload; raises unless the answer is a CompleteMultipartUploadResult
    (S3 may answer 200 with an Error document once it has started answering)."""
    answer = conn.request("POST", object_path(bucket, key, f"uploadId={quote(upload_id)}"),
                          complete_body(etags))
    if answer.status != 200 or b"CompleteMultipartUploadResult" not in answer.body:
        raise RuntimeError(f"CompleteMultipartUpload {key}: {answer.status} "
                           f"{answer.body[:300]!r}")
    return answer
