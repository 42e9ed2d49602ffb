"""Decoding ``aws-chunked`` request bodies as they stream in (`AwsChunkedDecoder`), and
verifying their chunk-signature chain and signed trailer once the secret is known
(`verify_chunk_signatures`).

The decoder runs before authentication, so it only records what must be checked later and
bounds what it keeps. Pure; never I/O, Twisted or logging.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator, Mapping, Sequence

from objstore.http.sigv4.canonical import (
    EMPTY_SHA256,
    HEX64,
    STREAMING_PAYLOADS,
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    SigningContext,
    SigV4Error,
    hmac_sha256,
)

CHUNK_LINE_LIMIT = 4096
TRAILER_SECTION_LIMIT = 16384
MIN_SIGNED_CHUNK = 8192  # AWS: only the last data chunk of a signed body may be smaller

_HEADER, _DATA, _DATA_END, _TRAILER, _DONE = range(5)
_EMPTY_DIGEST = hashlib.sha256(b"").digest()


def _incomplete(message: str) -> SigV4Error:
    return SigV4Error("IncompleteBody", message)


class AwsChunkedDecoder:
    """Incremental decoder of an aws-chunked body.

    It is fed the raw body in arbitrary slices (1 byte to megabytes, chunk boundaries
    anywhere) as it arrives off the socket BEFORE the request is authenticated (the secret
    is not known yet), so it only records what must be verified later: for every chunk of a
    signed body its claimed signature and the SHA-256 of its data, computed incrementally,
    in 64 bytes per chunk. It never buffers a chunk. Nothing is recorded for
    STREAMING-UNSIGNED-PAYLOAD-TRAILER bodies (no chunk signatures to check).

    Limits: a chunk-size line (with its extensions) of at most 4 KiB, a trailer section of at
    most 16 KiB (else InvalidArgument); in signed bodies only the last data chunk may be
    smaller than 8 KiB (as AWS requires; it bounds the records kept before authentication);
    ``max_decoded_length`` (EntityTooLarge). Broken framing is IncompleteBody. After an error
    the decoder stays failed.

    Lenient where clients differ: a line may end in LF alone; a blank line between the final
    0-chunk and the trailers is skipped; the final CRLF of the body may be missing.
    """

    def __init__(self, content_sha256: str, max_decoded_length: int | None = None) -> None:
        if content_sha256 not in STREAMING_PAYLOADS:
            raise ValueError(f"not an aws-chunked payload: {content_sha256!r}")
        self.content_sha256 = content_sha256
        self._signed = content_sha256 != STREAMING_UNSIGNED_TRAILER
        self._expect_trailers = content_sha256 != STREAMING_SIGNED
        self._max = max_decoded_length
        self._state = _HEADER
        self._line = bytearray()
        self._remaining = 0
        self._crlf_seen = 0
        self._hash = hashlib.sha256()
        self._chunk_signature = b""
        self._last_size: int | None = None
        self._records = bytearray()  # 32-byte signature + 32-byte sha256, per chunk
        self._decoded = 0
        self._trailers: dict[str, str] = {}
        self._trailer_signature: str | None = None
        self._trailer_bytes = 0
        self._blank_trailer_line = False  # an empty trailer section ("0\r\n\r\n")
        self._error: SigV4Error | None = None

    # -- results ---------------------------------------------------------------------
    @property
    def decoded_length(self) -> int:
        return self._decoded

    @property
    def trailers(self) -> dict[str, str]:
        return dict(self._trailers)

    @property
    def trailer_signature(self) -> str | None:
        return self._trailer_signature

    @property
    def chunks(self) -> Sequence[tuple[str, str]]:
        """(claimed signature, sha256 hex of the data) per chunk, the final empty one
        included; empty for unsigned bodies."""
        return tuple((sig.hex(), digest.hex()) for sig, digest in self.iter_chunk_records())

    def iter_chunk_records(self) -> Iterator[tuple[bytes, bytes]]:
        """(claimed signature, sha256) per chunk as raw 32-byte values, without copies of
        the whole list (a 5 GiB body has up to 655360 chunks)."""
        records = memoryview(self._records)
        for start in range(0, len(records), 64):
            yield bytes(records[start : start + 32]), bytes(records[start + 32 : start + 64])

    @property
    def complete(self) -> bool:
        return self._state == _DONE and self._error is None

    # -- input -----------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        """Consume the next raw slice; return the payload bytes it contained."""
        if self._error is not None:
            raise self._error
        try:
            return self._feed(bytes(data))
        except SigV4Error as exc:
            self._error = exc
            raise

    def finish(self) -> None:
        """The body ended: raise IncompleteBody unless the final chunk (and the trailers,
        when expected) were seen."""
        if self._error is not None:
            raise self._error
        if self._state == _TRAILER and bytes(self._line) in (b"", b"\r") and self._may_end():
            self._state = _DONE
        if self._state != _DONE:
            self._error = _incomplete("The request body terminated unexpectedly")
            raise self._error

    def _may_end(self) -> bool:
        # The body stopped in the trailer section, between lines (only the final CRLF is
        # missing): enough was seen if nothing more was due.
        if self.content_sha256 == STREAMING_SIGNED or self._blank_trailer_line:
            return True  # a missing trailer signature fails verify_chunk_signatures
        if self.content_sha256 == STREAMING_SIGNED_TRAILER:
            return self._trailer_signature is not None
        return bool(self._trailers)

    def _feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            if self._state == _HEADER:
                pos, line = self._take_line(data, pos, CHUNK_LINE_LIMIT, "chunk-size line")
                if line is not None:
                    self._on_chunk_header(line)
            elif self._state == _DATA:
                pos = self._take_data(data, pos, out)
            elif self._state == _DATA_END:
                if data[pos] != b"\r\n"[self._crlf_seen]:
                    raise _incomplete("chunk data is not followed by CRLF")
                pos += 1
                self._crlf_seen += 1
                if self._crlf_seen == 2:
                    self._state = _HEADER
            elif self._state == _TRAILER:
                budget = TRAILER_SECTION_LIMIT - self._trailer_bytes
                pos, line = self._take_line(data, pos, budget, "trailer section")
                if line is not None:
                    self._on_trailer_line(line)
            else:  # _DONE: tolerate stray line ends, nothing else
                if data[pos:].strip(b"\r\n"):
                    raise SigV4Error("InvalidArgument", "data after the end of the aws-chunked "
                                                        "body")
                pos = end
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _take_line(
        self, data: bytes, pos: int, limit: int, what: str
    ) -> tuple[int, bytes | None]:
        newline = data.find(b"\n", pos)
        stop = len(data) if newline < 0 else newline
        # Check before copying: a peer must not make us buffer more than the limit.
        if len(self._line) + (stop - pos) > limit:
            raise SigV4Error("InvalidArgument", f"aws-chunked {what} too long")
        self._line += data[pos:stop]
        if newline < 0:
            return len(data), None
        line = bytes(self._line)
        self._line.clear()
        if self._state == _TRAILER:
            self._trailer_bytes += len(line) + 1
        return newline + 1, line.removesuffix(b"\r")

    def _take_data(self, data: bytes, pos: int, out: list[bytes]) -> int:
        take = min(self._remaining, len(data) - pos)
        piece = data if take == len(data) else data[pos : pos + take]
        if self._signed:
            self._hash.update(piece)
        out.append(piece)
        self._decoded += take
        self._remaining -= take
        if self._remaining == 0:
            self._record_chunk(self._hash.digest())
            self._state = _DATA_END
            self._crlf_seen = 0
        return pos + take

    def _record_chunk(self, digest: bytes) -> None:
        if self._signed:
            self._records += self._chunk_signature + digest

    def _on_chunk_header(self, line: bytes) -> None:
        size_text, _, extensions = line.partition(b";")
        size_text = size_text.strip()
        if not (1 <= len(size_text) <= 16) or not all(c in b"0123456789abcdefABCDEF"
                                                      for c in size_text):
            raise _incomplete("malformed aws-chunked chunk size")
        size = int(size_text, 16)
        if self._signed:
            self._chunk_signature = self._parse_chunk_signature(extensions)
            previous = self._last_size
            if size > 0 and previous is not None and 0 < previous < MIN_SIGNED_CHUNK:
                raise SigV4Error("InvalidArgument", "Only the last chunk is allowed to have a "
                                                    f"size less than {MIN_SIGNED_CHUNK} bytes")
        if self._max is not None and self._decoded + size > self._max:
            raise SigV4Error("EntityTooLarge", "Your proposed upload exceeds the maximum "
                                               "allowed size")
        self._last_size = size
        if size == 0:
            self._record_chunk(_EMPTY_DIGEST)
            self._state = _TRAILER
            return
        self._hash = hashlib.sha256()
        self._remaining = size
        self._state = _DATA

    @staticmethod
    def _parse_chunk_signature(extensions: bytes) -> bytes:
        found = [
            value.strip()
            for name, _, value in (item.partition(b"=") for item in extensions.split(b";"))
            if name.strip() == b"chunk-signature"
        ]
        if len(found) != 1 or HEX64.fullmatch(found[0].decode("latin-1")) is None:
            raise _incomplete("missing or malformed chunk-signature")
        return bytes.fromhex(found[0].decode("ascii"))

    def _on_trailer_line(self, line: bytes) -> None:
        if not line:
            # A blank line before any trailer is a separator some clients send; otherwise
            # it ends the body.
            nothing_yet = not self._trailers and self._trailer_signature is None
            if not (self._expect_trailers and nothing_yet):
                self._state = _DONE
            self._blank_trailer_line = True
            return
        if not self._expect_trailers:
            raise _incomplete("unexpected data after the final chunk")
        name_bytes, sep, value_bytes = line.partition(b":")
        name = name_bytes.strip().decode("latin-1").lower()
        value = value_bytes.strip().decode("latin-1")
        if not sep or not name or any(c.isspace() for c in name):
            raise _incomplete("malformed trailer line")
        if name == "x-amz-trailer-signature":
            if self._trailer_signature is not None or HEX64.fullmatch(value) is None:
                raise _incomplete("malformed x-amz-trailer-signature")
            self._trailer_signature = value.lower()
            return
        if name in self._trailers:
            raise SigV4Error("InvalidArgument", f"trailer {name} sent twice")
        self._trailers[name] = value


def canonical_trailers(trailers: Mapping[str, str]) -> bytes:
    """The bytes a trailer signature covers: "name:value\\n" per trailer, sorted by name."""
    return "".join(f"{name}:{trailers[name]}\n" for name in sorted(trailers)).encode("latin-1")


def chunk_signature(ctx: SigningContext, previous_signature: str, chunk_sha256_hex: str) -> str:
    message = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", ctx.amz_date_str, ctx.scope,
                         previous_signature, EMPTY_SHA256, chunk_sha256_hex))
    return hmac_sha256(ctx.signing_key, message).hex()


def trailer_signature(
    ctx: SigningContext, previous_signature: str, trailers: Mapping[str, str]
) -> str:
    digest = hashlib.sha256(canonical_trailers(trailers)).hexdigest()
    message = "\n".join(("AWS4-HMAC-SHA256-TRAILER", ctx.amz_date_str, ctx.scope,
                         previous_signature, digest))
    return hmac_sha256(ctx.signing_key, message).hex()


def verify_chunk_signatures(ctx: SigningContext, decoder: AwsChunkedDecoder) -> None:
    """Recompute the signature chain of a fully decoded body (seed -> every chunk -> the
    final empty chunk -> the trailer); any mismatch is SignatureDoesNotMatch."""
    if not decoder.complete:
        raise _incomplete("The request body terminated unexpectedly")
    if decoder.content_sha256 == STREAMING_UNSIGNED_TRAILER:
        return  # nothing is signed; the caller still checks the trailing checksum
    mismatch = SigV4Error("SignatureDoesNotMatch", "The chunk signature we calculated does not "
                                                   "match the signature you provided.")
    previous = ctx.seed_signature
    for claimed, digest in decoder.iter_chunk_records():
        expected = chunk_signature(ctx, previous, digest.hex())
        if not hmac.compare_digest(bytes.fromhex(expected), claimed):
            raise mismatch
        previous = expected
    if decoder.content_sha256 == STREAMING_SIGNED_TRAILER:
        claimed_trailer = decoder.trailer_signature
        expected = trailer_signature(ctx, previous, decoder.trailers)
        if claimed_trailer is None or not hmac.compare_digest(
            expected.encode("ascii"), claimed_trailer.encode("ascii")
        ):
            raise mismatch
