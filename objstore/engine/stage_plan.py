"""The one decision of a body's stage plan (blobs/plan.py): from the S3 operation, the
request's headers and the bucket's settings, which stages its bytes pass through.

It runs at admission, before any byte of the body is read (s3/api.py asks it, the site
opens the body's spool with the answer), so a body to encrypt never touches the disk as
sent. Pure: no I/O, no Twisted; the bucket's settings come from the bucket cache.

Rules, in order:
* Only bytes that become an object's blob have stages: PutObject's body (decided at
  admission, for the spool: `BODY_OPERATIONS`), CopyObject's destination (decided by
  the copy, which passes the source through a reader and the destination's writer) and a
  multipart upload's parts (decided once by CreateMultipartUpload, kept on the upload:
  UploadPart and UploadPartCopy follow it, engine/multipart.py `upload_plan`). Every
  other operation stores bytes as sent.
* `x-amz-server-side-encryption: AES256` asks for SSE-S3: the data key is wrapped by the
  configured master key (`key_id`); without [encryption] configured it is refused with
  NotImplemented (nothing is stored in plaintext). `aws:kms` / `aws:kms:dsse` are not
  available yet (NotImplemented); any other value is InvalidArgument, as AWS answers.
* SSE-C (`x-amz-server-side-encryption-customer-*`, judged by crypto/customer_key.py)
  makes the plan SSE-C whatever the bucket's default (it does not need [encryption]); with
  `x-amz-server-side-encryption` too it is InvalidArgument.
* Without either, the bucket's default encryption applies.
* The bucket's compression (engine/compression.py) applies to every staged body, except
  one whose Content-Type is already compressed (`ALREADY_COMPRESSED`: images, audio,
  video, archives); compression comes before encryption on write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from objstore.blobs.plan import IDENTITY, SSE_S3, StagePlan
from objstore.crypto.customer_key import SSE_C
from objstore.errors import S3Error

SSE_HEADER = "x-amz-server-side-encryption"
STAGED_OPERATIONS = frozenset({"PutObject", "CopyObject", "CreateMultipartUpload"})
BODY_OPERATIONS = frozenset({"PutObject"})  # whose request body is the blob (the spool)
_KMS_VALUES = ("aws:kms", "aws:kms:dsse")


@dataclass(frozen=True, slots=True)
class BucketStageSettings:
    """A bucket's settings that choose stages (bucket default encryption, compression)."""

    default_encryption: str | None = None
    compression: str | None = None
    compression_level: int | None = None


NO_BUCKET_STAGES = BucketStageSettings()


def decide_stage_plan(operation: str | None, headers: Mapping[str, str],
                      bucket: BucketStageSettings = NO_BUCKET_STAGES, *,
                      key_id: str | None, customer: bool = False) -> StagePlan:
    """The stages of the body of `operation`; `headers` by lower-case name; `key_id`: the
    configured master key (None: no encryption available); `customer`: the request gives
    an SSE-C key (checked by crypto/customer_key.py). Raises S3Error."""
    if operation not in STAGED_OPERATIONS:
        return IDENTITY
    requested = headers.get(SSE_HEADER)
    if customer and requested is not None:
        raise S3Error("InvalidArgument", "Server Side Encryption with Customer provided key "
                      "is incompatible with the encryption method specified",
                      ArgumentName=SSE_HEADER, ArgumentValue=requested)
    encryption = bucket.default_encryption if requested is None else requested
    if customer:  # the customer's key, whatever the bucket's default
        encryption = SSE_C
    compression = bucket.compression
    if compression is not None and already_compressed(headers.get("content-type")):
        compression = None
    if encryption is None and compression is None:
        return IDENTITY
    if encryption is not None and encryption != SSE_C:
        encryption = _sse_algorithm(encryption, key_id)
    return StagePlan(compression=compression, encryption=encryption,
                     key_id=key_id if encryption not in (None, SSE_C) else None,
                     compression_level=bucket.compression_level if compression else None)


ALREADY_COMPRESSED_PREFIXES = ("image/", "video/", "audio/")
ALREADY_COMPRESSED = frozenset({
    "application/zip", "application/gzip", "application/x-gzip", "application/x-7z-compressed",
    "application/zstd", "application/x-zstd", "application/x-bzip2", "application/x-xz",
    "application/x-rar-compressed", "application/vnd.rar", "application/x-brotli",
    "application/x-lz4", "application/x-compress", "application/x-tar+gzip",
})


def already_compressed(content_type: str | None) -> bool:
    """Whether a body of `content_type` is compressed already (not worth compressing)."""
    if not content_type:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind.startswith(ALREADY_COMPRESSED_PREFIXES) or kind in ALREADY_COMPRESSED


def _sse_algorithm(value: str, key_id: str | None) -> str:
    if value == SSE_S3:
        if key_id is None:
            raise S3Error("NotImplemented", "Server-side encryption is not enabled on this "
                          "server ([encryption] enabled = true); nothing was stored.",
                          Header=SSE_HEADER)
        return SSE_S3
    if value in _KMS_VALUES:
        raise S3Error("NotImplemented", f"Server-side encryption with {value} is not "
                      "available in this version of objstore; nothing was stored.",
                      Header=SSE_HEADER)
    raise S3Error("InvalidArgument", "The encryption method specified is not supported",
                  ArgumentName=SSE_HEADER, ArgumentValue=value)
