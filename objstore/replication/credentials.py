"""Replication credentials: the access keys the replication worker signs its requests to a
destination with, named by a rule's <CredentialRef>.

They are stored as one runtime setting (`replication_credentials`, a JSON object of
name -> {"access_key_id", "secret_access_key"}): settings are durable, travel to cluster
peers (every node's worker needs them) and are exported; the setting's rendering and an
export without secrets show each secret as "****", and an import never stores a masked
one. The admin routes (POST/DELETE /admin/replication/credentials/{name}) change one
entry and never answer a secret.

With a master key (`[encryption] enabled`), a secret is stored sealed: the entry holds
`sealed_secret_access_key` (AES-256-GCM under the node's active master key version, the
credential's name bound in as associated data, crypto/master_key.py's `wrap`) and
`master_key_id` instead of `secret_access_key` (`seal`); `opened` gives it back with any
version of the keyring. Entries stored before the key was configured stay readable and
are sealed at the next change of the credentials. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

CREDENTIALS_SETTING = "replication_credentials"
MASK = "****"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_FIELD = 1024
SEALED = "sealed_secret_access_key"
SEALED_BY = "master_key_id"
_CONTEXT = b"objstore/replication-credential-v1\0"


class SecretKeeper(Protocol):
    """The node's master keys (crypto/master_key.py `Keyring`)."""

    @property
    def key_id(self) -> str: ...

    def wrap(self, data_key: bytes, context: bytes) -> str: ...

    def unwrap(self, key_id: str | None, wrapped: str, context: bytes) -> bytes: ...


class InvalidCredential(ValueError):
    """A credential (or the stored setting) that is not acceptable; the message says why."""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidCredential("a replication credential name is 1-128 letters, digits, "
                                "'.', '_' or '-', starting with a letter or digit")
    return name


def check_credential(value: Any) -> dict[str, str]:
    """{"access_key_id", "secret_access_key"} (non-empty strings, nothing else)."""
    if not isinstance(value, dict) or set(value) != {"access_key_id", "secret_access_key"}:
        raise InvalidCredential('a replication credential is {"access_key_id": ..., '
                                '"secret_access_key": ...}')
    for field in ("access_key_id", "secret_access_key"):
        text = value[field]
        if not isinstance(text, str) or not text or len(text) > MAX_FIELD \
                or not text.isprintable():
            raise InvalidCredential(f"{field} must be a non-empty printable string of at "
                                    f"most {MAX_FIELD} characters")
    return {"access_key_id": value["access_key_id"],
            "secret_access_key": value["secret_access_key"]}


def check_stored(value: Any) -> dict[str, str]:
    """A stored entry: a credential as `check_credential`, or its sealed form."""
    if isinstance(value, dict) and set(value) == {"access_key_id", SEALED, SEALED_BY}:
        for field in value:
            text = value[field]
            if not isinstance(text, str) or not text or len(text) > 4 * MAX_FIELD \
                    or not text.isprintable():
                raise InvalidCredential(f"{field} must be a non-empty printable string")
        return {field: value[field] for field in ("access_key_id", SEALED, SEALED_BY)}
    return check_credential(value)


def seal(name: str, entry: dict[str, str], keeper: SecretKeeper | None) -> dict[str, str]:
    """The entry as stored: its secret sealed under `keeper`'s active version (as it is
    without a keeper, or when already sealed)."""
    if keeper is None or SEALED in entry:
        return entry
    wrapped = keeper.wrap(entry["secret_access_key"].encode(), _CONTEXT + name.encode())
    return {"access_key_id": entry["access_key_id"], SEALED: wrapped,
            SEALED_BY: keeper.key_id}


def opened(name: str, entry: dict[str, str], keeper: SecretKeeper | None) -> dict[str, str]:
    """The entry with its secret in clear; raises InvalidCredential when it is sealed and
    `keeper` is missing or cannot open it."""
    if SEALED not in entry:
        return entry
    if keeper is None:
        raise InvalidCredential(f"the replication credential {name!r} is sealed with a "
                                "master key and [encryption] is not enabled on this node")
    try:
        secret = keeper.unwrap(entry[SEALED_BY], entry[SEALED], _CONTEXT + name.encode())
    except OSError as error:  # UnwrapError: another key, or altered
        raise InvalidCredential(f"the replication credential {name!r} does not open: "
                                f"{error}") from None
    return {"access_key_id": entry["access_key_id"], "secret_access_key": secret.decode()}


def parse_setting(value: Any) -> str:
    """The stored text of the setting (a JSON object, or its text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidCredential(f"{CREDENTIALS_SETTING} must be a JSON object") from None
    if not isinstance(value, dict):
        raise InvalidCredential(f"{CREDENTIALS_SETTING} must be an object of name -> "
                                "credential")
    checked = {check_name(str(name)): check_stored(entry) for name, entry in value.items()}
    return json.dumps(checked, sort_keys=True)


def load(text: str | None) -> dict[str, dict[str, str]]:
    """The stored credentials ({} when unset or unreadable)."""
    if not text:
        return {}
    try:
        return json.loads(parse_setting(text))  # type: ignore[no-any-return]
    except InvalidCredential:
        return {}


def masked(text: str) -> dict[str, dict[str, str]]:
    """The stored credentials with every secret shown as "****"."""
    return {name: {"access_key_id": entry["access_key_id"], "secret_access_key": MASK}
            for name, entry in load(text).items()}


def masked_text(text: str) -> str:
    return json.dumps(masked(text), sort_keys=True)


def holds_mask(text: str) -> bool:
    """Whether a value (from an export without secrets) carries a masked secret."""
    return any(entry.get("secret_access_key") == MASK for entry in load(text).values())


__all__ = ["CREDENTIALS_SETTING", "MASK", "SEALED", "SEALED_BY", "InvalidCredential",
           "SecretKeeper", "check_credential", "check_name", "check_stored", "holds_mask",
           "load", "masked", "masked_text", "opened", "parse_setting", "seal"]
