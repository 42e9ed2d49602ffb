"""The `mysql` target kind: writes each event into a MySQL or MariaDB table (PyMySQL, on the
target's own thread); a delivery returns once the row's transaction committed.

Formats (the table is created if absent, in the shape of its format):
- `namespace` (default): one row per object: `key_hash` (SHA-256 of the entry, the primary
  key, since an object key is longer than an index allows), `key_name` =
  `<bucket>/<object key>` and `value` = its latest event document (JSON); updated by every
  event of the key and deleted by an ObjectRemoved event.
- `access`: one row appended per event, `event_time` (DATETIME(6), UTC) and `event_data`.

Keys: dsn (`mysql://user:password@host:port/database`; `?unix_socket=/path` for a local
socket), table (`name` or `database.name`), format, timeout_seconds (connect, read and write
timeouts).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote

from objstore.notify.targets.base import Event, Target
from objstore.notify.targets.table import TableReader, namespace_field
from objstore.notify.targets.threaded import BlockingTarget

FORMATS = ("namespace", "access")


@dataclass(frozen=True, slots=True)
class MysqlSettings:
    name: str
    host: str
    port: int
    user: str
    password: str
    database: str
    unix_socket: str | None
    table: tuple[str, ...]
    format: str
    timeout_seconds: float


class MysqlKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> MysqlSettings:
        read = TableReader(name, table)
        url = read.url("dsn", ("mysql", "mariadb"), default_port=3306)
        database = unquote(url.path.lstrip("/"))
        if not database or "/" in database:
            raise read.error("dsn", "must name the database: mysql://user:password@host:port"
                                    "/database")
        query = parse_qs(url.query)
        unknown = sorted(set(query) - {"unix_socket"})
        if unknown:
            raise read.error("dsn", f"unknown parameter {unknown[0]!r} (only unix_socket)")
        settings = MysqlSettings(
            name=name, host=url.hostname or "", port=url.port or 3306,
            user=unquote(url.username or ""), password=unquote(url.password or ""),
            database=database, unix_socket=query.get("unix_socket", [None])[0],
            table=read.table_name(), format=read.choice("format", FORMATS, "namespace"),
            timeout_seconds=read.seconds())
        read.finish()
        return settings

    def build(self, settings: MysqlSettings) -> Target:
        return BlockingTarget(settings.name, "mysql", lambda: MysqlSession(settings),
                              timeout_seconds=settings.timeout_seconds,
                              secrets=(settings.password,))


def _quoted(parts: tuple[str, ...]) -> str:
    return ".".join(f"`{part}`" for part in parts)  # parts are plain identifiers


def _datetime(event_time: str) -> datetime:
    """An event's ISO 8601 time as a naive UTC datetime (what DATETIME stores)."""
    stamp = datetime.fromisoformat(event_time.replace("Z", "+00:00"))
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(UTC).replace(tzinfo=None)
    return stamp


class MysqlSession:
    def __init__(self, settings: MysqlSettings) -> None:
        import pymysql

        self._settings = settings
        timeout = max(1, math.ceil(settings.timeout_seconds))
        self._conn = pymysql.connect(
            host=settings.host, port=settings.port, user=settings.user,
            password=settings.password, database=settings.database,
            unix_socket=settings.unix_socket, charset="utf8mb4", autocommit=False,
            connect_timeout=timeout, read_timeout=timeout, write_timeout=timeout)
        table = _quoted(settings.table)
        if settings.format == "namespace":
            create = (f"CREATE TABLE IF NOT EXISTS {table} (key_hash BINARY(32) NOT NULL "
                      "PRIMARY KEY, key_name TEXT NOT NULL, value JSON NOT NULL) "
                      "DEFAULT CHARSET=utf8mb4")
            self._upsert = (f"INSERT INTO {table} (key_hash, key_name, value) "
                            "VALUES (%s, %s, %s) ON DUPLICATE KEY UPDATE value = VALUES(value)")
            self._delete = f"DELETE FROM {table} WHERE key_hash = %s"
        else:
            create = (f"CREATE TABLE IF NOT EXISTS {table} (event_time DATETIME(6) NOT NULL, "
                      "event_data JSON NOT NULL) DEFAULT CHARSET=utf8mb4")
            self._append = f"INSERT INTO {table} (event_time, event_data) VALUES (%s, %s)"
        try:
            with self._conn.cursor() as cursor:
                cursor.execute(create)
            self._conn.commit()
        except BaseException:
            self.close()
            raise

    def send(self, event: Event) -> None:
        body = event.body.decode("utf-8")
        try:
            with self._conn.cursor() as cursor:
                if self._settings.format == "access":
                    cursor.execute(self._append, (_datetime(event.event_time), body))
                else:
                    field = namespace_field(event)
                    digest = hashlib.sha256(field.encode("utf-8")).digest()
                    if event.deleted:
                        cursor.execute(self._delete, (digest,))
                    else:
                        cursor.execute(self._upsert, (digest, field, body))
            self._conn.commit()
        except BaseException:
            try:
                self._conn.rollback()
            except Exception:
                pass
            raise

    def close(self) -> None:
        self._conn.close()


KIND = MysqlKind()

__all__ = ["KIND", "MysqlSettings"]
