"""SSE-C: the customer-provided key of a request, and how an object's data key is sealed
under it, without the key itself ever being kept.

A request names its key with three headers (`x-amz-server-side-encryption-customer-
algorithm`, `-key`, `-key-MD5`; for a copy's source the same with `x-amz-copy-source-`);
`customer_key` reads and checks them (AES256, 32 bytes of base64, the MD5 matching) as AWS
does: InvalidEncryptionAlgorithmError or InvalidArgument (400).

An SSE-C object has a random data key like any encrypted object (crypto/packages.py).
`seal` draws a random salt and records, in the object's `encryption_params`:
* `ssec_hmac`: HMAC-SHA256(customer key, "verify" + salt): a later request's key is
  checked against it (`matches`), in constant time; a wrong key is AccessDenied (403);
* `wrapped_key`: the data key under AES-256-GCM with a key-encryption key derived from the
  customer key and the salt (HMAC-SHA256(customer key, "wrap" + salt)), the object (or
  part) it belongs to bound in as associated data.
Neither lets the customer key be recovered; the key lives only in the request's memory
(`CustomerKey` never prints it). An SSE-C object's ETag is not the MD5 of its bytes
(`etag_of`), as on AWS. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from objstore.errors import S3Error

SSE_C = "SSE-C"  # the record's encryption_algorithm for a customer-provided key
HEADER_PREFIX = "x-amz-server-side-encryption-customer-"
COPY_SOURCE_PREFIX = "x-amz-copy-source-server-side-encryption-customer-"
ALGORITHM = "AES256"
_SALT_BYTES = 16
_NONCE_BYTES = 12
_WRAP_AAD = b"objstore/ssec-wrap-v1\0"


class CustomerKey:
    """A customer's 32-byte key and the MD5 the client sent for it (echoed in answers)."""

    __slots__ = ("_key", "md5_b64")

    def __init__(self, key: bytes, md5_b64: str) -> None:
        self._key = key
        self.md5_b64 = md5_b64

    def __repr__(self) -> str:
        return "CustomerKey(<hidden>)"

    def _derive(self, purpose: bytes, salt: bytes) -> bytes:
        return hmac.new(self._key, b"objstore/ssec-" + purpose + b"\0" + salt,
                        hashlib.sha256).digest()

    def seal(self, data_key: bytes, context: bytes) -> dict[str, Any]:
        """The `encryption_params` of a data key sealed under this key for `context`."""
        salt = os.urandom(_SALT_BYTES)
        nonce = os.urandom(_NONCE_BYTES)
        wrapped = AESGCM(self._derive(b"wrap", salt)).encrypt(nonce, data_key,
                                                             _WRAP_AAD + context)
        return {"ssec_salt": _b64(salt), "ssec_hmac": _b64(self._derive(b"verify", salt)),
                "wrapped_key": _b64(nonce + wrapped)}

    def verifier(self) -> dict[str, str]:
        """A salt and HMAC that `matches` this key (an upload's, checked on every part)."""
        salt = os.urandom(_SALT_BYTES)
        return {"ssec_salt": _b64(salt), "ssec_hmac": _b64(self._derive(b"verify", salt))}

    def matches(self, params: Mapping[str, Any]) -> bool:
        """Whether this is the key `params` (from `seal` or `verifier`) was made with."""
        try:
            salt = base64.b64decode(str(params["ssec_salt"]), validate=True)
            expected = base64.b64decode(str(params["ssec_hmac"]), validate=True)
        except (KeyError, binascii.Error, ValueError):
            return False
        return hmac.compare_digest(self._derive(b"verify", salt), expected)

    def unseal(self, params: Mapping[str, Any], context: bytes) -> bytes:
        """The data key `seal` sealed (ValueError when it does not open)."""
        try:
            salt = base64.b64decode(str(params["ssec_salt"]), validate=True)
            raw = base64.b64decode(str(params["wrapped_key"]), validate=True)
            return AESGCM(self._derive(b"wrap", salt)).decrypt(
                raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _WRAP_AAD + context)
        except (KeyError, binascii.Error, InvalidTag) as exc:
            raise ValueError("the data key does not open under this customer key") from exc


@dataclass(frozen=True, slots=True)
class CopyKeys:
    """The customer keys of a copy: its source's (to read an SSE-C source) and its
    destination's (to write an SSE-C destination)."""

    source: CustomerKey | None = None
    destination: CustomerKey | None = None


NO_COPY_KEYS = CopyKeys()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def etag_of(md5_hex: str, params: Mapping[str, Any]) -> str:
    """The ETag of an SSE-C object or part: opaque, stable, not the MD5 of its bytes (AWS
    does not reveal it either), derived from the MD5 and the object's random salt."""
    salt = str(params.get("ssec_salt", ""))
    return hashlib.md5(f"objstore/ssec-etag\0{salt}\0{md5_hex}".encode()).hexdigest()


def has_customer_headers(headers: Mapping[str, str], prefix: str = HEADER_PREFIX) -> bool:
    return any(f"{prefix}{name}" in headers for name in ("algorithm", "key", "key-md5"))


def customer_key(headers: Mapping[str, str], prefix: str = HEADER_PREFIX
                 ) -> CustomerKey | None:
    """The key the request's headers (lower-case names) give under `prefix`; None when it
    names none. Raises S3Error (400) for an incomplete or inconsistent set."""
    algorithm = headers.get(prefix + "algorithm")
    encoded = headers.get(prefix + "key")
    md5 = headers.get(prefix + "key-md5")
    if algorithm is None and encoded is None and md5 is None:
        return None
    if algorithm is None:
        raise _argument("Requests specifying Server Side Encryption with Customer provided "
                        "keys must provide a valid encryption algorithm.", prefix + "algorithm")
    if algorithm != ALGORITHM:
        raise S3Error("InvalidEncryptionAlgorithmError", "The encryption request you "
                      "specified is not valid. The valid value is AES256.",
                      ArgumentName=prefix + "algorithm", ArgumentValue=algorithm)
    if not encoded:
        raise _argument("Requests specifying Server Side Encryption with Customer provided "
                        "keys must provide an appropriate secret key.", prefix + "key")
    if not md5:
        raise _argument("Requests specifying Server Side Encryption with Customer provided "
                        "keys must provide the client calculated MD5 of the secret key.",
                        prefix + "key-MD5")
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise _argument("The secret key was invalid for the specified algorithm.",
                        prefix + "key")
    if not hmac.compare_digest(_b64(hashlib.md5(key).digest()), md5.strip()):
        raise _argument("The calculated MD5 hash of the key did not match the hash that was "
                        "provided.", prefix + "key-MD5")
    return CustomerKey(key, md5.strip())


def _argument(message: str, name: str) -> S3Error:
    return S3Error("InvalidArgument", message, ArgumentName=name)


def response_headers(key: CustomerKey | None) -> dict[str, str]:
    """What AWS answers about an SSE-C object or request: the algorithm and the key's MD5."""
    if key is None:
        return {}
    return {HEADER_PREFIX + "algorithm": ALGORITHM, HEADER_PREFIX + "key-MD5": key.md5_b64}


def require_key(params: Mapping[str, Any], key: CustomerKey | None) -> CustomerKey:
    """The request's key for an SSE-C object (or upload) whose `encryption_params` are
    `params`: InvalidRequest (400) without one, AccessDenied (403) for another one."""
    if key is None:
        raise S3Error("InvalidRequest", "The object was stored using a form of Server Side "
                      "Encryption. The correct parameters must be provided to retrieve the "
                      "object.")
    if not key.matches(params):
        raise S3Error("AccessDenied", "The provided customer key does not match the key the "
                      "object was stored with.")
    return key


def refuse_key_for_other(key: CustomerKey | None) -> None:
    """A customer key named for an object that is not SSE-C: InvalidRequest (400)."""
    if key is not None:
        raise S3Error("InvalidRequest", "The encryption parameters are not applicable to "
                      "this object.")


def key_for_object(algorithm: str | None, params: Mapping[str, Any],
                   key: CustomerKey | None) -> CustomerKey | None:
    """The key to read an object whose record says `algorithm` and `params` with: the
    request's, checked (`require_key`), for SSE-C; None for any other object (a key given
    for one is InvalidRequest)."""
    if algorithm == SSE_C:
        return require_key(params, key)
    refuse_key_for_other(key)
    return None
