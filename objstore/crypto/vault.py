"""The Vault provider (`[encryption] kms_provider = "vault"`): the HashiCorp Vault (or
OpenBao) transit engine seals the node's master key versions (crypto/master_key.py), so
the key file holds only transit ciphertexts and the keys themselves are never on disk.

The master key versions then wrap each object's data key locally (AES-256-GCM, the
object bound in): Vault is asked once per version at start (and by `objstore key rotate`),
never per request, so a GET or PUT neither waits for Vault nor fails while it is briefly
away, and the reactor never blocks on it. Calls (transit API v1, JSON):

    POST {vault_url}/v1/{mount}/encrypt/{key_name}  {"plaintext": base64} -> data.ciphertext
    POST {vault_url}/v1/{mount}/decrypt/{key_name}  {"ciphertext": ...}   -> data.plaintext

with `X-Vault-Token` read from `[encryption] vault_token_file` (re-read at each start, so
a renewed token is picked up) and TLS verified against the system roots or
`[encryption] vault_ca_file`. Any failure is a `MasterKeyError` naming the call and
Vault's error text (never the token). Blocking stdlib HTTP: start-up and CLI only.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
import urllib.error
import urllib.request
from urllib.parse import quote

from objstore.crypto.master_key import MasterKeyError

HEADER = "objstore-vault-key-v1"
TIMEOUT_SECONDS = 10.0
_MAX_ANSWER = 1024 * 1024


class VaultSealer:
    """Seals and opens master key versions with one transit key."""

    prefix = "vault"
    header = HEADER

    def __init__(self, url: str, token: str, key_name: str, *, mount: str = "transit",
                 ca_file: str | None = None, timeout: float = TIMEOUT_SECONDS) -> None:
        self._base = url.rstrip("/")
        self._token = token
        self._key = quote(key_name, safe="")
        self._mount = mount.strip("/")
        self._timeout = timeout
        self._context = (ssl.create_default_context(cafile=ca_file)
                         if self._base.startswith("https:") else None)

    def __repr__(self) -> str:
        return f"VaultSealer({self._base}, {self._key})"

    def seal(self, key: bytes) -> str:
        answer = self._call("encrypt", {"plaintext": base64.b64encode(key).decode("ascii")})
        ciphertext = answer.get("ciphertext")
        if not isinstance(ciphertext, str) or not ciphertext.startswith("vault:") \
                or any(c.isspace() for c in ciphertext):
            raise MasterKeyError(f"Vault {self._base}: the encrypt answer holds no transit "
                                 "ciphertext")
        return ciphertext

    def open(self, sealed: str) -> bytes:
        if not sealed.startswith("vault:"):
            raise ValueError("not a transit ciphertext")
        answer = self._call("decrypt", {"ciphertext": sealed})
        try:
            key = base64.b64decode(str(answer.get("plaintext")), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise MasterKeyError(f"Vault {self._base}: the decrypt answer is not a 32-byte "
                                 "key")
        return key

    def _call(self, operation: str, body: dict[str, str]) -> dict[str, object]:
        url = f"{self._base}/v1/{self._mount}/{operation}/{self._key}"
        request = urllib.request.Request(
            url, data=json.dumps(body).encode("utf-8"), method="POST",
            headers={"X-Vault-Token": self._token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self._timeout,
                                        context=self._context) as response:
                raw = response.read(_MAX_ANSWER)
        except urllib.error.HTTPError as exc:
            raise MasterKeyError(f"Vault {operation} at {self._base} (key "
                                 f"{self._key}): HTTP {exc.code} {_errors(exc)}") from None
        except (OSError, ValueError) as exc:
            raise MasterKeyError(f"Vault {operation} at {self._base}: {exc}") from None
        try:
            document = json.loads(raw)
            data = document["data"]
            if not isinstance(data, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise MasterKeyError(f"Vault {operation} at {self._base}: not a transit "
                                 "answer") from None
        return data


def _errors(exc: urllib.error.HTTPError) -> str:
    try:
        errors = json.loads(exc.read(_MAX_ANSWER)).get("errors")
    except (OSError, ValueError, AttributeError):
        return ""
    if isinstance(errors, list):
        return "; ".join(str(e)[:200] for e in errors[:3])
    return ""


def read_token(path: str) -> str:
    """The token in `path` (surrounding whitespace dropped); MasterKeyError if unusable."""
    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.read(8192).strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise MasterKeyError(f"[encryption] vault_token_file {path}: can not be read "
                             f"({exc.__class__.__name__})") from None
    if not token or any(c.isspace() or ord(c) < 32 for c in token):
        raise MasterKeyError(f"[encryption] vault_token_file {path}: holds no token")
    return token
