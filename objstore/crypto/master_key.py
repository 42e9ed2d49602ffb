"""The local master key (`[encryption] kms_provider = "local"`): one AES-256 key in a file
of the node's private tree, created 0600 at first start, that wraps every object's data key.

The file holds one line, `objstore-master-key-v1 <64 hex digits>`; a file that cannot be
read or does not hold exactly that refuses the start (`MasterKeyError`), never silently
replaced: the objects it wraps would be lost. Its key id (`local:<16 hex>`, a hash of the
key, never the key) is what records name, so a node holding another key can tell.

A data key is wrapped with AES-256-GCM (random nonce) with the object's bucket, key and
version id bound in as associated data: a wrapped key copied onto another object's record
does not unwrap. Plain file I/O at start-up, pure otherwise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from objstore.errors import ServerCondition
from objstore.private_files import OWNER_ONLY_FILE, make_private_dir

_HEADER = "objstore-master-key-v1"
_LINE = re.compile(_HEADER + r" ([0-9a-f]{64})\n?")
_WRAP_AAD = b"objstore/wrap-v1\0"
_NONCE_BYTES = 12


class MasterKeyError(Exception):
    """The master key file can not be used (a start-up error, one line)."""


class UnwrapError(OSError, ServerCondition):
    """A wrapped data key does not open under this master key and object (another node's
    key, a record moved to another object): InternalError, logged in one line."""

    def __init__(self, message: str) -> None:
        OSError.__init__(self, message)  # the log line's detail
        self.code = "InternalError"
        self.message = "The object's stored bytes can not be decrypted on this server."


def key_context(bucket: str, key: str, version_id: str) -> bytes:
    """What a data key is bound to: the object it encrypts."""
    return b"\0".join(part.encode("utf-8", "surrogateescape")
                      for part in (bucket, key, version_id))


def part_context(bucket: str, key: str, holder: str, blob_id: str) -> bytes:
    """What the data key of one part of a composite object is bound to: the upload
    (`holder` its upload id) while the upload is open, the object version (`holder` its
    version id) once completed, and the part's own blob in both."""
    return key_context(bucket, key, holder) + b"\0part\0" + blob_id.encode("ascii")


class LocalMasterKey:
    """Wraps and unwraps data keys under one master key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a master key is 32 bytes")
        self._cipher = AESGCM(key)
        self.key_id = "local:" + hashlib.sha256(b"objstore key id\0" + key).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"LocalMasterKey({self.key_id})"

    def wrap(self, data_key: bytes, context: bytes) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._cipher.encrypt(nonce, data_key, _WRAP_AAD + context)
        return base64.b64encode(nonce + sealed).decode("ascii")

    def unwrap(self, key_id: str | None, wrapped: str, context: bytes) -> bytes:
        if key_id != self.key_id:
            raise UnwrapError(f"the data key is wrapped by master key {key_id}, not by "
                              f"this node's {self.key_id}")
        try:
            raw = base64.b64decode(wrapped, validate=True)
            return self._cipher.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:],
                                        _WRAP_AAD + context)
        except (InvalidTag, binascii.Error, ValueError):
            raise UnwrapError("the wrapped data key does not open for this object") from None


def load_or_create(path: str) -> LocalMasterKey:
    """The master key in `path`, created (0600, its directory 0700) when absent."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read(200)
    except FileNotFoundError:
        return _create(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise MasterKeyError(f"[encryption] master_key_file {path}: can not be read "
                             f"({exc})") from None
    found = _LINE.fullmatch(text)
    if found is None:
        raise MasterKeyError(f"[encryption] master_key_file {path}: not an objstore master "
                             f"key (expected one line '{_HEADER} <64 hex digits>')")
    return LocalMasterKey(bytes.fromhex(found.group(1)))


def _create(path: str) -> LocalMasterKey:
    make_private_dir(os.path.dirname(os.path.abspath(path)))
    key = os.urandom(32)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY_FILE)
    try:
        os.fchmod(fd, OWNER_ONLY_FILE)
        os.write(fd, f"{_HEADER} {key.hex()}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        os.unlink(tmp)
        return load_or_create(path)
    os.unlink(tmp)
    return LocalMasterKey(key)
