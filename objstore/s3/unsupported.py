"""Request headers that this version cannot honour, refused instead of ignored.

A client that asks for server-side encryption (SSE-S3, SSE-KMS, SSE-C, on a write, a copy,
a multipart upload or a read) must never get a 2xx for bytes stored in plaintext, nor read
an object without the customer key it believes protects it. Every such request this
version can not honour answers 501 NotImplemented and changes nothing. Pure: no Twisted.

Lifted so far, only where it works end to end: `x-amz-server-side-encryption` on PutObject,
CopyObject and CreateMultipartUpload (SSE-S3; the value itself is judged by
engine/stage_plan.py; parts follow their upload); the SSE-C headers on PutObject, GetObject,
HeadObject, CopyObject (and its source's), CreateMultipartUpload, UploadPart and
UploadPartCopy (and its source's); the SSE-KMS key id, context and bucket-key headers on
PutObject, CopyObject and CreateMultipartUpload (crypto/kms_key.py).

`x-amz-server-side-encryption` on an operation that has no such parameter on AWS (UploadPart
and UploadPartCopy, whose parts follow their upload's setting; GetObject and HeadObject,
which decrypt whatever the object holds) is answered as AWS answers it: 400
InvalidArgument "x-amz-server-side-encryption header is not supported for this operation."
"""

from __future__ import annotations

from collections.abc import Iterable

from objstore.errors import S3Error

# Header-name prefixes (lower case) and the feature each one asks for.
REFUSED_HEADER_PREFIXES: tuple[tuple[str, str], ...] = (
    ("x-amz-server-side-encryption", "Server-side encryption"),
    ("x-amz-copy-source-server-side-encryption", "Server-side encryption"),
)


_CUSTOMER_HEADERS = ("algorithm", "key", "key-md5")
# SSE-C (crypto/customer_key.py): the object's key, and a copy's source key.
_CUSTOMER_OPERATIONS = ("PutObject", "GetObject", "HeadObject", "CopyObject",
                        "CreateMultipartUpload", "UploadPart", "UploadPartCopy",
                        "CompleteMultipartUpload", "GetObjectAttributes")
_COPY_OPERATIONS = ("CopyObject", "UploadPartCopy")

# (header name, operation) pairs that are honoured although a prefix above matches.
HONOURED: frozenset[tuple[str, str]] = frozenset({
    ("x-amz-server-side-encryption", "PutObject"),
    ("x-amz-server-side-encryption", "CopyObject"),
    ("x-amz-server-side-encryption", "CreateMultipartUpload"),
    *((f"x-amz-server-side-encryption-{name}", operation)
      for name in ("aws-kms-key-id", "context", "bucket-key-enabled")
      for operation in ("PutObject", "CopyObject", "CreateMultipartUpload")),
    *((f"x-amz-server-side-encryption-customer-{name}", operation)
      for name in _CUSTOMER_HEADERS for operation in _CUSTOMER_OPERATIONS),
    *((f"x-amz-copy-source-server-side-encryption-customer-{name}", operation)
      for name in _CUSTOMER_HEADERS for operation in _COPY_OPERATIONS),
})


# (header name, operation) pairs that AWS answers with InvalidArgument (the operation has
# no such parameter): the header is a client's mistake, not a feature to be built.
NOT_FOR_OPERATION: frozenset[tuple[str, str]] = frozenset(
    ("x-amz-server-side-encryption", operation)
    for operation in ("UploadPart", "UploadPartCopy", "GetObject", "HeadObject"))


def refuse_unsupported_headers(headers: Iterable[tuple[str, str]],
                               operation: str | None = None) -> None:
    """Raise NotImplemented (501) when any header (name, value) asks for a feature not
    built yet for `operation` (the S3 operation's name), InvalidArgument (400) when AWS
    does not take it on that operation."""
    for name, value in headers:
        lowered = name.lower()
        if (lowered, operation) in HONOURED:
            continue
        if (lowered, operation) in NOT_FOR_OPERATION:
            raise S3Error("InvalidArgument",
                          f"{lowered} header is not supported for this operation.",
                          ArgumentName=lowered, ArgumentValue=value)
        for prefix, feature in REFUSED_HEADER_PREFIXES:
            if lowered.startswith(prefix):
                raise S3Error(
                    "NotImplemented",
                    f"{feature} is not available in this version of objstore; the request "
                    f"was refused and nothing was stored (header {lowered}).",
                    Header=lowered,
                )
