"""Reading one `[notifications.targets.<name>]` table: typed key readers that name the table
and the key in every error, the check that no unknown key is left, and hiding secrets
(passwords inside URLs and DSNs) from anything shown to an operator. Pure: no I/O.

Also the one rule the namespace formats share (`namespace_field`).

Every kind's `validate` builds a `TableReader`, reads each of its keys once, then calls
`finish()`, which refuses the keys nobody read (a typo is an error, not a silent default).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit

from objstore.notify.targets.base import Event, TargetConfigError

DEFAULT_TIMEOUT_SECONDS = 10.0
MAX_TIMEOUT_SECONDS = 300.0


class TableReader:
    """Reads the keys of one target table; every error names `[notifications.targets.<name>]
    <key>` and never shows the value of a key marked secret."""

    def __init__(self, name: str, table: Mapping[str, Any]) -> None:
        self.name = name
        self._table = table
        self._read: set[str] = {"kind"}

    def error(self, key: str, message: str) -> TargetConfigError:
        return TargetConfigError(f"[notifications.targets.{self.name}] {key}: {message}")

    def _get(self, key: str) -> Any:
        self._read.add(key)
        return self._table.get(key)

    def string(self, key: str, default: str | None = None, *, secret: bool = False,
               allow_empty: bool = False) -> str:
        value = self._get(key)
        if value is None:
            if default is None:
                raise self.error(key, "required")
            return default
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {_show(value, secret)}")
        if not value and not allow_empty:
            raise self.error(key, "must not be empty")
        if "\x00" in value:
            raise self.error(key, "must not contain NUL characters")
        return value

    def optional_string(self, key: str, *, secret: bool = False) -> str | None:
        if self._table.get(key) is None:
            self._read.add(key)
            return None
        return self.string(key, secret=secret)

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {_show(value, False)}")
        return value

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer, got {_show(value, False)}")
        if not low <= value <= high:
            raise self.error(key, f"must be between {low} and {high}, got {value}")
        return value

    def seconds(self, key: str = "timeout_seconds",
                default: float = DEFAULT_TIMEOUT_SECONDS) -> float:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"must be a number of seconds, got {_show(value, False)}")
        if not 0 < value <= MAX_TIMEOUT_SECONDS:
            raise self.error(key, f"must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g}, "
                                  f"got {value}")
        return float(value)

    def choice(self, key: str, choices: Iterable[str], default: str) -> str:
        options = tuple(choices)
        value = self.string(key, default)
        if value not in options:
            raise self.error(key, f"must be one of {', '.join(options)}, got {value!r}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        """A non-empty list of strings (a single string is a list of one)."""
        value = self._get(key)
        if value is None:
            raise self.error(key, "required")
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(
                isinstance(item, str) and item for item in items):
            raise self.error(key, "must be a non-empty string or a list of non-empty strings")
        return tuple(items)

    def url(self, key: str, schemes: Iterable[str], default: str | None = None,
            *, default_port: int | None = None) -> SplitResult:
        """A URL whose scheme is one of `schemes` and which names a host; errors show it
        with its password masked."""
        options = tuple(schemes)
        text = self.string(key, default)
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError:
            raise self.error(key, f"not a valid URL: {_without_userinfo(text)!r}") from None
        if parts.scheme not in options:
            raise self.error(key, f"scheme must be one of {', '.join(s + '://' for s in options)}"
                                  f", got {_without_userinfo(text)!r}")
        if not parts.hostname:
            raise self.error(key, f"names no host: {_without_userinfo(text)!r}")
        if port is None and default_port is None:
            raise self.error(key, f"names no port: {_without_userinfo(text)!r}")
        return parts

    def table_name(self, key: str = "table") -> tuple[str, ...]:
        """An SQL table name, `table` or `schema.table`, each part a plain identifier
        (letters, digits, underscore; not starting with a digit; at most 63 characters):
        the parts, to be quoted by the driver."""
        value = self.string(key)
        parts = tuple(value.split("."))
        if len(parts) > 2 or not all(_IDENTIFIER.fullmatch(part) for part in parts):
            raise self.error(key, "must be a table name (letters, digits and _, not starting "
                                  f"with a digit, at most 63 each), or schema.table; got "
                                  f"{_show(value, False)}")
        return parts

    def finish(self) -> None:
        unknown = sorted(set(self._table) - self._read)
        if unknown:
            known = ", ".join(sorted(self._read))
            raise self.error(unknown[0], f"unknown key (this kind takes: {known})")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PASSWORD_IN_NETLOC = re.compile(r"(?P<user>//[^/@:]*):[^/@]*@")
_PASSWORD_IN_DSN = re.compile(r"(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def redact_url(text: str) -> str:
    """`text` with the password of a URL (`scheme://user:password@host`) and of a libpq
    key/value DSN (`password=...`) replaced by `***`."""
    text = _PASSWORD_IN_NETLOC.sub(r"\g<user>:***@", text)
    return _PASSWORD_IN_DSN.sub(r"\1***", text)


def _without_userinfo(text: str) -> str:
    """A URL for an error message about its form: whatever stands before `@` (a password,
    or a token in the user name's place) is hidden."""
    return re.sub(r"//[^/]*@", "//***@", text)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret in it (and URL passwords) replaced by `***`: for error
    messages that a client library built from its arguments."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return redact_url(text)


def namespace_field(event: Event) -> str:
    """The entry of one object in the `namespace` formats (Redis hash field, SQL row key):
    `<bucket>/<object key>`."""
    return f"{event.bucket}/{event.key}"


def _show(value: Any, secret: bool) -> str:
    if secret:
        return f"a value of type {type(value).__name__}"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


__all__ = ["DEFAULT_TIMEOUT_SECONDS", "TableReader", "namespace_field", "redact_url", "scrub"]
