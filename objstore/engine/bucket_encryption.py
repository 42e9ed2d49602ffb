"""A bucket's default encryption (PutBucketEncryption): the stored document and its rules.

Stored as the bucket configuration document "encryption" (engine/bucket_config.py), so it
is kept in the control record for `recover`, replicated to cluster peers and carried by
the admin transfer like every bucket configuration. Rules: only `AES256` (SSE-S3) can be a
default, and only on a server with [encryption] enabled (else every PUT into the bucket
would be refused); `aws:kms` and `aws:kms:dsse` are NotImplemented (no KMS provider yet),
as a PUT with that header is; anything else is MalformedXML, as AWS answers. Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from objstore.blobs.plan import SSE_S3
from objstore.errors import S3Error

ENCRYPTION_CONFIG_KEY = "encryption"
_KMS_VALUES = ("aws:kms", "aws:kms:dsse")


@dataclass(frozen=True, slots=True)
class BucketEncryption:
    algorithm: str = SSE_S3
    bucket_key_enabled: bool = False

    def to_json(self) -> str:
        return json.dumps({"algorithm": self.algorithm,
                           "bucket_key_enabled": self.bucket_key_enabled})

    @classmethod
    def from_json(cls, text: str) -> BucketEncryption:
        data = json.loads(text)
        return cls(str(data["algorithm"]), bool(data.get("bucket_key_enabled", False)))


def checked_default(algorithm: str, bucket_key_enabled: bool, *,
                    key_id: str | None) -> BucketEncryption:
    """The configuration to store, or the S3 error that refuses it."""
    if algorithm in _KMS_VALUES:
        raise S3Error("NotImplemented", f"Server-side encryption with {algorithm} is not "
                      "available in this version of objstore.")
    if algorithm != SSE_S3:
        raise S3Error("MalformedXML", f"The SSEAlgorithm {algorithm!r} is not supported.")
    if key_id is None:
        raise S3Error("NotImplemented", "Server-side encryption is not enabled on this "
                      "server ([encryption] enabled = true).")
    return BucketEncryption(SSE_S3, bucket_key_enabled)


__all__ = ["ENCRYPTION_CONFIG_KEY", "BucketEncryption", "checked_default"]
