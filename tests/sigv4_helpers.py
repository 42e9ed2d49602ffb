"""SigV4 helpers only tests need: the canonical request as a string (to compare with AWS's
published examples), a chunk-signing context, and aws-chunked bodies to feed the decoder.
The server never encodes aws-chunked bodies and our tools never send them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from objstore.http.sigv4 import (
    SERVICE,
    AuthRequest,
    RequestView,
    SigningContext,
    canonical_trailers,
    chunk_signature,
    credential_scope,
    derive_signing_key,
    trailer_signature,
)
from objstore.http.sigv4.verify import canonical_requests


def canonical_request(auth: AuthRequest, req: RequestView) -> str:
    """The canonical request as most clients compute it (for debugging a mismatch)."""
    return next(canonical_requests(auth, req)).decode("utf-8", "surrogateescape")


def make_signing_context(
    secret_key: str, amz_date_str: str, region: str, seed_signature: str, service: str = SERVICE
) -> SigningContext:
    """The context a client would need to sign the chunks of a body it sends."""
    scope_date = amz_date_str[:8]
    return SigningContext(
        derive_signing_key(secret_key, scope_date, region, service),
        seed_signature,
        amz_date_str,
        credential_scope(scope_date, region, service),
    )


def aws_chunked_body(
    chunks: Iterable[bytes],
    ctx: SigningContext | None = None,
    trailers: Mapping[str, str] | None = None,
) -> bytes:
    """Encode a body as aws-chunked: signed when ``ctx`` is
    given (with a signed trailer when ``trailers`` is given), else the unsigned-trailer
    form botocore sends."""
    out = bytearray()
    previous = ctx.seed_signature if ctx is not None else ""
    for chunk in [*(c for c in chunks if c), b""]:
        if ctx is None:
            out += f"{len(chunk):x}\r\n".encode("ascii")
        else:
            previous = chunk_signature(ctx, previous, hashlib.sha256(chunk).hexdigest())
            out += f"{len(chunk):x};chunk-signature={previous}\r\n".encode("ascii")
        if chunk:
            out += chunk + b"\r\n"
    if trailers is not None:
        out += canonical_trailers(trailers).replace(b"\n", b"\r\n")
        if ctx is not None:
            signature = trailer_signature(ctx, previous, trailers)
            out += f"x-amz-trailer-signature:{signature}\r\n".encode("ascii")
    out += b"\r\n"
    return bytes(out)
