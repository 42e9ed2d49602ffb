"""AWS Signature Version 4 for the S3 and admin APIs, in three parts over one vocabulary:

* `verify`: what a request claims (`parse_auth`, without any secret) and whether it holds
  against the secret key (`verify`);
* `chunked`: ``aws-chunked`` bodies decoded as they stream in (`AwsChunkedDecoder`) and
  their chunk-signature chain checked once the secret is known (`verify_chunk_signatures`);
* `signing`: requests signed and URLs presigned for our own tools (`sign_headers`,
  `presign_url`);
* `canonical`: what they share (constants, `SigV4Error`, `RequestView`, the signing key,
  the canonical request's encodings).

What the package must never do: any I/O, import Twisted, log, or put a secret key or a
signing key in an exception message or a repr. Every function is a pure function of its
arguments, which is why it is tested without a reactor. This module only names the public
API: `from objstore.http import sigv4` then `sigv4.verify(...)`.
"""

from objstore.http.sigv4.canonical import (
    ALGORITHM,
    EMPTY_SHA256,
    MAX_CLOCK_SKEW,
    MAX_PRESIGN_EXPIRES,
    SERVICE,
    STREAMING_PAYLOADS,
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    TERMINATOR,
    UNSIGNED_PAYLOAD,
    RequestView,
    SigningContext,
    SigV4Error,
    aws_uri_path,
    canonical_query_string,
    credential_scope,
    derive_signing_key,
    payload_hash_is_hex,
    string_to_sign,
    uri_encode,
)
from objstore.http.sigv4.chunked import (
    CHUNK_LINE_LIMIT,
    MIN_SIGNED_CHUNK,
    TRAILER_SECTION_LIMIT,
    AwsChunkedDecoder,
    canonical_trailers,
    chunk_signature,
    trailer_signature,
    verify_chunk_signatures,
)
from objstore.http.sigv4.signing import presign_url, sign_headers
from objstore.http.sigv4.verify import (
    PAYLOAD_FROM_BODY,
    AuthRequest,
    check_claims,
    parse_auth,
    verify,
    verify_signature,
)

__all__ = [
    "ALGORITHM",
    "CHUNK_LINE_LIMIT",
    "EMPTY_SHA256",
    "MAX_CLOCK_SKEW",
    "MAX_PRESIGN_EXPIRES",
    "MIN_SIGNED_CHUNK",
    "PAYLOAD_FROM_BODY",
    "SERVICE",
    "STREAMING_PAYLOADS",
    "STREAMING_SIGNED",
    "STREAMING_SIGNED_TRAILER",
    "STREAMING_UNSIGNED_TRAILER",
    "TERMINATOR",
    "TRAILER_SECTION_LIMIT",
    "UNSIGNED_PAYLOAD",
    "AuthRequest",
    "AwsChunkedDecoder",
    "RequestView",
    "SigV4Error",
    "SigningContext",
    "aws_uri_path",
    "canonical_query_string",
    "canonical_trailers",
    "check_claims",
    "chunk_signature",
    "credential_scope",
    "derive_signing_key",
    "parse_auth",
    "payload_hash_is_hex",
    "presign_url",
    "sign_headers",
    "string_to_sign",
    "trailer_signature",
    "uri_encode",
    "verify",
    "verify_chunk_signatures",
    "verify_signature",
]
