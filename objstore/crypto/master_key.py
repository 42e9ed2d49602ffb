"""The node's master keys: versions of an AES-256 key in a file of the node's private
tree, created 0600 at first start, that wrap every object's data key.

The file holds one line per key version, the last one active (it wraps new data keys, the
others only unwrap what they wrapped until a `rotate-key` job has re-wrapped it):

* `[encryption] kms_provider = "local"`: `objstore-master-key-v1 <64 hex digits>`, the key
  itself;
* `"vault"`: `objstore-vault-key-v1 <ciphertext>`, the key sealed by the Vault (or OpenBao)
  transit engine (crypto/vault.py), opened once per start; the key is never on disk.

A file that cannot be read or holds anything else refuses the start (`MasterKeyError`),
never silently replaced: the objects it wraps would be lost. `add_version` (the `objstore
key rotate` command) appends a new version by an atomic replace. A version's key id
(`local:<16 hex>` or `vault:<16 hex>`, a hash of the key, never the key) is what records
name, so a node holding another key can tell, and what the cluster fingerprint carries.

A data key is wrapped with AES-256-GCM (random nonce) with the object's bucket, key and
version id bound in as associated data: a wrapped key copied onto another object's record
does not unwrap. Plain file I/O (and, for Vault, HTTP) at start-up and in the CLI; pure
otherwise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Sequence
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from objstore.errors import ServerCondition
from objstore.private_files import OWNER_ONLY_FILE, make_private_dir

_HEADER = "objstore-master-key-v1"
_WRAP_AAD = b"objstore/wrap-v1\0"
_NONCE_BYTES = 12
MAX_VERSIONS = 64
_MAX_FILE = 64 * 1024


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


class KeySealer(Protocol):
    """How a key version is written in the file: `local` writes it as hex, `vault` seals
    it with the transit engine. `prefix`: the key ids' provider part."""

    prefix: str
    header: str

    def seal(self, key: bytes) -> str: ...

    def open(self, sealed: str) -> bytes: ...


class LocalSealer:
    prefix = "local"
    header = _HEADER

    def seal(self, key: bytes) -> str:
        return key.hex()

    def open(self, sealed: str) -> bytes:
        if not re.fullmatch(r"[0-9a-f]{64}", sealed):
            raise ValueError("not 64 hex digits")
        return bytes.fromhex(sealed)


LOCAL = LocalSealer()


def key_id_of(key: bytes, prefix: str = "local") -> str:
    return f"{prefix}:" + hashlib.sha256(b"objstore key id\0" + key).hexdigest()[:16]


class LocalMasterKey:
    """Wraps and unwraps data keys under one master key version."""

    def __init__(self, key: bytes, prefix: str = "local") -> None:
        if len(key) != 32:
            raise ValueError("a master key is 32 bytes")
        self._cipher = AESGCM(key)
        self.key_id = key_id_of(key, prefix)

    def __repr__(self) -> str:
        return f"LocalMasterKey({self.key_id})"

    @property
    def key_ids(self) -> tuple[str, ...]:
        return (self.key_id,)

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


class Keyring:
    """Every version of the node's master key: the last one (`key_id`) wraps, each one
    unwraps what it wrapped. `key_ids` in file order (the cluster fingerprint's)."""

    def __init__(self, versions: Sequence[LocalMasterKey]) -> None:
        if not versions:
            raise ValueError("a keyring holds at least one key")
        self._versions = {version.key_id: version for version in versions}
        self._active = versions[-1]
        self.key_ids = tuple(version.key_id for version in versions)

    def __repr__(self) -> str:
        return f"Keyring({', '.join(self.key_ids)})"

    @property
    def key_id(self) -> str:
        return self._active.key_id

    def wrap(self, data_key: bytes, context: bytes) -> str:
        return self._active.wrap(data_key, context)

    def unwrap(self, key_id: str | None, wrapped: str, context: bytes) -> bytes:
        version = self._versions.get(key_id or "")
        if version is None:
            raise UnwrapError(f"the data key is wrapped by master key {key_id}, which this "
                              f"node does not hold ({', '.join(self.key_ids)})")
        return version.unwrap(key_id, wrapped, context)

    def needs_rewrap(self, key_id: str | None) -> bool:
        """Whether a record wrapped by `key_id` is not under the active version."""
        return key_id != self.key_id


def load_or_create(path: str, sealer: KeySealer = LOCAL) -> Keyring:
    """The keyring in `path`, created (0600, its directory 0700) when absent."""
    lines = _read(path)
    if lines is None:
        return _create(path, sealer)
    return _parse(path, lines, sealer)


def load(path: str, sealer: KeySealer = LOCAL) -> Keyring:
    """The keyring in `path` (MasterKeyError when absent)."""
    lines = _read(path)
    if lines is None:
        raise MasterKeyError(f"[encryption] master_key_file {path}: does not exist")
    return _parse(path, lines, sealer)


def add_version(path: str, sealer: KeySealer = LOCAL) -> Keyring:
    """Append a new random key version to the keyring in `path` (it becomes the active
    one); the file is replaced atomically, 0600. Returns the new keyring."""
    lines = _read(path)
    if lines is None:
        raise MasterKeyError(f"[encryption] master_key_file {path}: does not exist "
                             "(start the node once to create it)")
    _parse(path, lines, sealer)  # refuses a malformed file before touching it
    if len(lines) >= MAX_VERSIONS:
        raise MasterKeyError(f"{path}: already {len(lines)} key versions (at most "
                             f"{MAX_VERSIONS}); remove versions no record uses")
    lines = [*lines, f"{sealer.header} {sealer.seal(os.urandom(32))}"]
    _write(path, lines, replace=True)
    return _parse(path, lines, sealer)


def _read(path: str) -> list[str] | None:
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read(_MAX_FILE + 1)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise MasterKeyError(f"[encryption] master_key_file {path}: can not be read "
                             f"({exc})") from None
    return [line for line in text.split("\n") if line] if len(text) <= _MAX_FILE else ["?"]


def _parse(path: str, lines: list[str], sealer: KeySealer) -> Keyring:
    versions = []
    for line in lines:
        header, _, sealed = line.partition(" ")
        try:
            if header != sealer.header:
                raise ValueError(header)
            key = sealer.open(sealed)
        except MasterKeyError:
            raise
        except ValueError:
            raise MasterKeyError(
                f"[encryption] master_key_file {path}: not an objstore master key (expected "
                f"lines '{sealer.header} <key>', one per key version)") from None
        versions.append(LocalMasterKey(key, sealer.prefix))
    if not versions:
        raise MasterKeyError(f"[encryption] master_key_file {path}: not an objstore master "
                             f"key (expected one line '{sealer.header} <key>')")
    return Keyring(versions)


def _create(path: str, sealer: KeySealer) -> Keyring:
    lines = [f"{sealer.header} {sealer.seal(os.urandom(32))}"]
    if not _write(path, lines, replace=False):
        return load_or_create(path, sealer)  # another process made it meanwhile
    return _parse(path, lines, sealer)


def _write(path: str, lines: list[str], *, replace: bool) -> bool:
    make_private_dir(os.path.dirname(os.path.abspath(path)))
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY_FILE)
    try:
        os.fchmod(fd, OWNER_ONLY_FILE)
        os.write(fd, "".join(line + "\n" for line in lines).encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if replace:
        os.replace(tmp, path)
        return True
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        os.unlink(tmp)
        return False
    os.unlink(tmp)
    return True
