"""SSE-KMS mapped to the node's master key: which KMS key ids a request (or a bucket default)
may name, and how a key id is shown back to clients. Pure: no I/O.

objstore has one "KMS key", the configured [encryption] keyring (crypto/master_key.py,
local or Vault): an `aws:kms` object is encrypted exactly as an SSE-S3 one, its data key
wrapped by the active master key version, and records `aws:kms` and that version's id.

Accepted as `x-amz-server-side-encryption-aws-kms-key-id` (and as a bucket default's
KMSMasterKeyID), all naming that one key:
* nothing (AWS would use its `aws/s3` managed key);
* a master key id as `objstore key list` shows it (`local:<16 hex>`, `vault:...`): the
  active version's or an older one's (a rotated AWS KMS key keeps its id too);
* that id in ARN form: `arn:aws:kms:<key id>` (what responses show, so a client may echo
  it back), or `arn:aws:kms:<region>:<account>:key/<key id>` (any region and account);
* the alias `alias/objstore` (or `alias/aws/s3`, AWS's default S3 key), also as
  `arn:aws:kms:<region>:<account>:alias/...`: a name that survives key rotation, the one to
  put in a bucket default.
Anything else is 400 KMS.NotFoundException "Invalid keyId ...", as AWS answers a key id it
does not know (aws/aws-cli#4507: "An error occurred (KMS.NotFoundException) when calling the
PutObject operation: Invalid keyId aws/s3"; minio/minio#6582 shows AWS's 400 for a mistyped
key id).

Responses show `x-amz-server-side-encryption-aws-kms-key-id: arn:aws:kms:<key id>` with the
id of the version that wraps the object's data key (after a `rotate-key` job, the new
version's); the prefix without region and account is MinIO's (cmd/crypto ARNPrefix), which
AWS SDKs and tools take as given.

`aws:kms:dsse` (dual-layer) is refused with NotImplemented: objstore encrypts once, and
claiming two layers would be false.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Collection

from objstore.blobs.plan import SSE_S3
from objstore.errors import S3Error

SSE_KMS = "aws:kms"
SSE_KMS_DSSE = "aws:kms:dsse"
KEY_ID_HEADER = "x-amz-server-side-encryption-aws-kms-key-id"
CONTEXT_HEADER = "x-amz-server-side-encryption-context"
BUCKET_KEY_HEADER = "x-amz-server-side-encryption-bucket-key-enabled"
ARN_PREFIX = "arn:aws:kms:"
ALIASES = frozenset({"alias/objstore", "alias/aws/s3"})
_FULL_ARN = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]*:[0-9]*:(key|alias)/(.+)")


def kms_key_arn(key_id: str) -> str:
    """How a key id is shown to clients (x-amz-server-side-encryption-aws-kms-key-id)."""
    return ARN_PREFIX + key_id


def response_headers(algorithm: str | None, key_id: str | None) -> dict[str, str]:
    """What a response shows of an object (or upload) encrypted with the master key:
    x-amz-server-side-encryption, and for SSE-KMS the key id (as AWS answers them on PUT,
    GET, HEAD, copies and multipart uploads); nothing for a plain or SSE-C one."""
    if algorithm == SSE_S3:
        return {"x-amz-server-side-encryption": SSE_S3}
    if algorithm != SSE_KMS:
        return {}
    headers = {"x-amz-server-side-encryption": SSE_KMS}
    if key_id:
        headers[KEY_ID_HEADER] = kms_key_arn(key_id)
    return headers


def checked_kms_key(requested: str | None, key_id: str, key_ids: Collection[str] = ()
                    ) -> None:
    """Raise KMS.NotFoundException unless `requested` names the node's key (`key_id`: its
    active version; `key_ids`: every version, older ones naming the same key, as a rotated
    AWS KMS key keeps its id)."""
    known = {key_id, *key_ids}
    if requested is None or requested in ALIASES:
        return
    name = requested.removeprefix(ARN_PREFIX)
    full = _FULL_ARN.fullmatch(requested)
    if full is not None:
        kind, name = full.groups()
        if kind == "alias":
            name = f"alias/{name}"
    if name in known or name in ALIASES:
        return
    raise S3Error("KMS.NotFoundException", f"Invalid keyId {requested}")


def checked_context(value: str | None) -> None:
    """x-amz-server-side-encryption-context is base64 of a JSON object of strings, as AWS
    requires (it is checked, not stored: the data key is bound to the object anyway)."""
    if value is None:
        return
    try:
        document = json.loads(base64.b64decode(value, validate=True).decode("utf-8"))
    except (binascii.Error, ValueError):
        document = None
    if not isinstance(document, dict) or not all(
            isinstance(item, str) for pair in document.items() for item in pair):
        raise S3Error("InvalidArgument", f"The header '{CONTEXT_HEADER}' shall be "
                      "Base64-encoded UTF-8 string holding JSON which represents a "
                      "string-string map", ArgumentName=CONTEXT_HEADER, ArgumentValue=value)


def checked_bucket_key_enabled(value: str | None) -> None:
    """x-amz-server-side-encryption-bucket-key-enabled is true or false (objstore has no
    per-bucket data key: either way each object has its own)."""
    if value is not None and value.strip().lower() not in ("true", "false"):
        raise S3Error("InvalidArgument", "Bucket key enabled must be true or false",
                      ArgumentName=BUCKET_KEY_HEADER, ArgumentValue=value)


__all__ = ["ALIASES", "BUCKET_KEY_HEADER", "CONTEXT_HEADER", "KEY_ID_HEADER", "SSE_KMS",
           "SSE_KMS_DSSE", "checked_bucket_key_enabled", "checked_context",
           "checked_kms_key", "kms_key_arn", "response_headers"]
