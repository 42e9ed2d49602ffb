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
  NotImplemented (nothing is stored in plaintext). `aws:kms` is SSE-KMS mapped to that
  same master key (crypto/kms_key.py: the key ids it accepts, KMS.NotFoundException for
  others); the plan's encryption is `aws:kms`, encrypted exactly as SSE-S3.
  `aws:kms:dsse` is NotImplemented; any other value is InvalidArgument, as AWS answers.
* The SSE-KMS headers (key id, context) without `aws:kms` are InvalidArgument, as AWS
  answers; the bucket-key header must be true or false (it changes nothing).
* SSE-C (`x-amz-server-side-encryption-customer-*`, judged by crypto/customer_key.py)
  makes the plan SSE-C whatever the bucket's default (it does not need [encryption]); with
  `x-amz-server-side-encryption` too it is InvalidArgument.
* Without either, the bucket's default encryption applies.
* The bucket's compression (engine/compression.py) applies to every staged body, except
  one whose Content-Type is already compressed (`ALREADY_COMPRESSED`: images, audio,
  video, archives); compression comes before encryption on write.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from objstore.blobs.plan import IDENTITY, SSE_S3, StagePlan
from objstore.crypto.customer_key import SSE_C
from objstore.crypto.kms_key import (
    BUCKET_KEY_HEADER,
    CONTEXT_HEADER,
    KEY_ID_HEADER,
    SSE_KMS,
    SSE_KMS_DSSE,
    checked_bucket_key_enabled,
    checked_context,
    checked_kms_key,
)
from objstore.errors import S3Error

SSE_HEADER = "x-amz-server-side-encryption"
STAGED_OPERATIONS = frozenset({"PutObject", "CopyObject", "CreateMultipartUpload"})
BODY_OPERATIONS = frozenset({"PutObject"})  # whose request body is the blob (the spool)
# The request headers the decision reads (admission passes only these).
PLAN_HEADERS = (SSE_HEADER, KEY_ID_HEADER, CONTEXT_HEADER, BUCKET_KEY_HEADER, "content-type")


@dataclass(frozen=True, slots=True)
class BucketStageSettings:
    """A bucket's settings that choose stages (bucket default encryption, compression)."""

    default_encryption: str | None = None
    compression: str | None = None
    compression_level: int | None = None


NO_BUCKET_STAGES = BucketStageSettings()


def decide_stage_plan(operation: str | None, headers: Mapping[str, str],
                      bucket: BucketStageSettings = NO_BUCKET_STAGES, *,
                      key_id: str | None, customer: bool = False,
                      key_ids: Collection[str] = ()) -> StagePlan:
    """The stages of the body of `operation`; `headers` by lower-case name; `key_id`: the
    configured master key (None: no encryption available); `customer`: the request gives
    an SSE-C key (checked by crypto/customer_key.py); `key_ids`: every version of the
    master key (each names the node's SSE-KMS key too). Raises S3Error."""
    if operation not in STAGED_OPERATIONS:
        return IDENTITY
    requested = headers.get(SSE_HEADER)
    if customer and requested is not None:
        raise S3Error("InvalidArgument", "Server Side Encryption with Customer provided key "
                      "is incompatible with the encryption method specified",
                      ArgumentName=SSE_HEADER, ArgumentValue=requested)
    encryption = bucket.default_encryption if requested is None else requested
    if requested is not None or KEY_ID_HEADER in headers or CONTEXT_HEADER in headers:
        _check_kms_headers(requested, headers, key_id, key_ids)
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


def _check_kms_headers(requested: str | None, headers: Mapping[str, str],
                       key_id: str | None, key_ids: Collection[str]) -> None:
    """The SSE-KMS headers of a request that names its own encryption."""
    checked_bucket_key_enabled(headers.get(BUCKET_KEY_HEADER))
    if requested != SSE_KMS:
        for name in (KEY_ID_HEADER, CONTEXT_HEADER):
            if headers.get(name) is not None:  # AWS's answer to a key id with AES256
                raise S3Error("InvalidArgument", "Server Side Encryption with AWS KMS "
                              "managed key requires HTTP header x-amz-server-side-encryption "
                              ": aws:kms", ArgumentName=name, ArgumentValue=headers[name])
        return
    checked_context(headers.get(CONTEXT_HEADER))
    if key_id is not None:
        checked_kms_key(headers.get(KEY_ID_HEADER), key_id, key_ids)


def _sse_algorithm(value: str, key_id: str | None) -> str:
    if value in (SSE_S3, SSE_KMS):
        if key_id is None:
            raise S3Error("NotImplemented", "Server-side encryption is not enabled on this "
                          "server ([encryption] enabled = true); nothing was stored.",
                          Header=SSE_HEADER)
        return value
    if value == SSE_KMS_DSSE:
        raise S3Error("NotImplemented", "Dual-layer server-side encryption (aws:kms:dsse) "
                      "is not available: objstore encrypts once (use aws:kms); nothing was "
                      "stored.", Header=SSE_HEADER)
    raise S3Error("InvalidArgument", "The encryption method specified is not supported",
                  ArgumentName=SSE_HEADER, ArgumentValue=value)
