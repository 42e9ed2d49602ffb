"""Replication credentials: the access keys the replication worker signs its requests to a
destination with, named by a rule's <CredentialRef>.

They are stored as one runtime setting (`replication_credentials`, a JSON object of
name -> {"access_key_id", "secret_access_key"}): settings are durable, travel to cluster
peers (every node's worker needs them) and are exported; the setting's rendering and an
export without secrets show each secret as "****", and an import never stores a masked
one. The admin routes (POST/DELETE /admin/replication/credentials/{name}) change one
entry and never answer a secret. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

CREDENTIALS_SETTING = "replication_credentials"
MASK = "****"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_FIELD = 1024


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
    checked = {check_name(str(name)): check_credential(entry) for name, entry in value.items()}
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


__all__ = ["CREDENTIALS_SETTING", "MASK", "InvalidCredential", "check_credential",
           "check_name", "holds_mask", "load", "masked", "masked_text", "parse_setting"]
