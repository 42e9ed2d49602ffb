"""aws-chunked bodies as they stream in before authentication: any bytes, in any slices,
decode or fail with a 4xx SigV4Error and stay failed; a well-formed body decodes to its
payload whatever the slicing, and its signature chain verifies."""

from __future__ import annotations

import base64
import zlib

from hypothesis import given
from hypothesis import strategies as st

from objstore.http import sigv4
from tests.fuzz.outcomes import Refused, check_code
from tests.sigv4_helpers import aws_chunked_body, make_signing_context

MODES = st.sampled_from(list(sigv4.STREAMING_PAYLOADS))
CTX = make_signing_context("fuzz-secret", "20240524T120000Z", "us-east-1", "1" * 64)


def feed_all(mode: str, body: bytes, cuts: list[int], limit: int | None = None
             ) -> bytes | Refused:
    decoder = sigv4.AwsChunkedDecoder(mode, max_decoded_length=limit)
    out = []
    points = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    try:
        for start, end in zip(points, points[1:], strict=False):
            out.append(decoder.feed(body[start:end]))
        decoder.finish()
    except sigv4.SigV4Error as error:
        with_code = Refused(error.code, check_code(error.code))
        try:  # a failed decoder stays failed
            decoder.feed(b"0\r\n\r\n")
        except sigv4.SigV4Error as again:
            assert again.code == error.code
        else:
            raise AssertionError("the decoder accepted more after failing") from None
        return with_code
    return b"".join(out)


framing = st.lists(st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"\r\n", b"\n", b"0\r\n", b"0;chunk-signature=" + b"a" * 64 + b"\r\n",
                     b"ffffffffffffffff\r\n", b"10000000000000000\r\n", b"-1\r\n", b"\xff\r\n",
                     b"x-amz-checksum-crc32:AAAAAA==\r\n", b"x-amz-trailer-signature:zz\r\n",
                     b"4;chunk-signature=\r\nabcd\r\n", b"\xb2\r\n"]),
), max_size=12).map(b"".join)


@given(MODES, framing, st.lists(st.integers(min_value=0), max_size=6))
def test_any_bytes_decode_or_fail_cleanly(mode: str, body: bytes, cuts: list[int]) -> None:
    feed_all(mode, body, cuts, limit=1 << 20)


payloads = st.lists(st.binary(min_size=1, max_size=9000), min_size=1, max_size=3)


@given(MODES, payloads, st.lists(st.integers(min_value=0), max_size=8))
def test_well_formed_bodies_decode_whatever_the_slicing(mode: str, pieces: list[bytes],
                                                        cuts: list[int]) -> None:
    signed = mode != sigv4.STREAMING_UNSIGNED_TRAILER
    if signed:  # AWS: only the last chunk of a signed body may be under 8 KiB
        pieces = [p.ljust(sigv4.MIN_SIGNED_CHUNK, b"x") for p in pieces[:-1]] + pieces[-1:]
    payload = b"".join(pieces)
    trailers = None
    if mode != sigv4.STREAMING_SIGNED:
        crc = base64.b64encode(zlib.crc32(payload).to_bytes(4, "big")).decode()
        trailers = {"x-amz-checksum-crc32": crc}
    body = aws_chunked_body(pieces, CTX if signed else None, trailers)
    decoder = sigv4.AwsChunkedDecoder(mode)
    points = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    out = b"".join(decoder.feed(body[a:b]) for a, b in zip(points, points[1:], strict=False))
    decoder.finish()
    assert out == payload and decoder.decoded_length == len(payload)
    sigv4.verify_chunk_signatures(CTX, decoder)
    if trailers:
        assert decoder.trailers == trailers
