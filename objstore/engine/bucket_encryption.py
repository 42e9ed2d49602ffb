"""A bucket's default encryption (PutBucketEncryption): the stored document and its rules.

Stored as the bucket configuration document "encryption" (engine/bucket_config.py), so it
is kept in the control record for `recover`, replicated to cluster peers and carried by
the admin transfer like every bucket configuration. Rules: `AES256` (SSE-S3) or `aws:kms`
(SSE-KMS mapped to the node's master key, crypto/kms_key.py) can be a default, and only on
a server with [encryption] enabled (else every PUT into the bucket would be refused); an
`aws:kms` default's KMSMasterKeyID must name the node's key (KMS.NotFoundException
otherwise, as AWS) and is stored as given, so GetBucketEncryption answers it back; a
KMSMasterKeyID with AES256 is InvalidArgument, as AWS answers. `aws:kms:dsse` is
NotImplemented, as a PUT with that header is; anything else is MalformedXML. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass

from objstore.blobs.plan import SSE_S3
from objstore.crypto.kms_key import SSE_KMS, SSE_KMS_DSSE, checked_kms_key
from objstore.errors import S3Error

ENCRYPTION_CONFIG_KEY = "encryption"
ALGORITHMS = (SSE_S3, SSE_KMS)  # what a default may be (and an imported document hold)


@dataclass(frozen=True, slots=True)
class BucketEncryption:
    algorithm: str = SSE_S3
    bucket_key_enabled: bool = False
    kms_key_id: str | None = None  # KMSMasterKeyID as given (aws:kms only)

    def to_json(self) -> str:
        document: dict[str, object] = {"algorithm": self.algorithm,
                                       "bucket_key_enabled": self.bucket_key_enabled}
        if self.kms_key_id is not None:
            document["kms_key_id"] = self.kms_key_id
        return json.dumps(document)

    @classmethod
    def from_json(cls, text: str) -> BucketEncryption:
        data = json.loads(text)
        kms_key_id = data.get("kms_key_id")
        return cls(str(data["algorithm"]), bool(data.get("bucket_key_enabled", False)),
                   None if kms_key_id is None else str(kms_key_id))


def checked_default(algorithm: str, bucket_key_enabled: bool, *,
                    key_id: str | None, kms_key_id: str | None = None,
                    key_ids: Collection[str] = ()) -> BucketEncryption:
    """The configuration to store, or the S3 error that refuses it (`key_ids`: every
    master key version, crypto/kms_key.py)."""
    if algorithm == SSE_KMS_DSSE:
        raise S3Error("NotImplemented", "Dual-layer server-side encryption (aws:kms:dsse) "
                      "is not available: objstore encrypts once (use aws:kms).")
    if algorithm not in ALGORITHMS:
        raise S3Error("MalformedXML", f"The SSEAlgorithm {algorithm!r} is not supported.")
    if kms_key_id is not None and algorithm != SSE_KMS:
        raise S3Error("InvalidArgument", "a KMSMasterKeyID is not applicable if the default "
                      "sse algorithm is not aws:kms or aws:kms:dsse",
                      ArgumentName="ApplyServerSideEncryptionByDefault")
    if key_id is None:
        raise S3Error("NotImplemented", "Server-side encryption is not enabled on this "
                      "server ([encryption] enabled = true).")
    if algorithm == SSE_KMS:
        checked_kms_key(kms_key_id, key_id, key_ids)
    return BucketEncryption(algorithm, bucket_key_enabled, kms_key_id)


__all__ = ["ALGORITHMS", "ENCRYPTION_CONFIG_KEY", "BucketEncryption", "checked_default"]
