"""The `postgresql` target kind: writes each event into a PostgreSQL table (psycopg2, on the
target's own thread); a delivery returns once the row's transaction committed.

Formats (the table is created if absent, in the shape of its format):
- `namespace` (default): one row per object, `key` = `<bucket>/<object key>` (primary key)
  and `value` = its latest event document (JSONB); updated by every event of the key and
  deleted by an ObjectRemoved event.
- `access`: one row appended per event, `event_time` (timestamptz) and `event_data` (JSONB).

Keys: dsn (a postgresql:// URL or a libpq `key=value` string), table (`name` or
`schema.name`), format, timeout_seconds (connect timeout and statement timeout).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from objstore.notify.targets.base import Event, Target
from objstore.notify.targets.table import TableReader, namespace_field
from objstore.notify.targets.threaded import BlockingTarget

FORMATS = ("namespace", "access")


@dataclass(frozen=True, slots=True)
class PostgresqlSettings:
    name: str
    dsn: str
    table: tuple[str, ...]
    format: str
    timeout_seconds: float
    password: str


class PostgresqlKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> PostgresqlSettings:
        from psycopg2.extensions import parse_dsn

        read = TableReader(name, table)
        dsn = read.string("dsn", secret=True)
        try:
            parsed = parse_dsn(dsn)
        except Exception:
            raise read.error("dsn", "not a PostgreSQL connection string (a postgresql:// URL "
                                    "or libpq key=value pairs)") from None
        settings = PostgresqlSettings(
            name=name, dsn=dsn, table=read.table_name(),
            format=read.choice("format", FORMATS, "namespace"),
            timeout_seconds=read.seconds(), password=parsed.get("password") or "")
        read.finish()
        return settings

    def build(self, settings: PostgresqlSettings) -> Target:
        return BlockingTarget(settings.name, "postgresql", lambda: PostgresqlSession(settings),
                              timeout_seconds=settings.timeout_seconds,
                              secrets=(settings.password,))


class PostgresqlSession:
    def __init__(self, settings: PostgresqlSettings) -> None:
        import psycopg2
        from psycopg2 import sql

        self._settings = settings
        timeout_ms = int(settings.timeout_seconds * 1000)
        self._conn = psycopg2.connect(
            settings.dsn, connect_timeout=max(2, math.ceil(settings.timeout_seconds)),
            options=f"-c statement_timeout={timeout_ms} -c lock_timeout={timeout_ms}",
            application_name=f"objstore-notify-{settings.name}"[:63])
        table = sql.SQL(".").join(sql.Identifier(part) for part in settings.table)
        if settings.format == "namespace":
            create = sql.SQL("CREATE TABLE IF NOT EXISTS {} "
                             "(key TEXT PRIMARY KEY, value JSONB NOT NULL)")
            self._upsert = sql.SQL(
                "INSERT INTO {} (key, value) VALUES (%s, %s::jsonb) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value").format(table)
            self._delete = sql.SQL("DELETE FROM {} WHERE key = %s").format(table)
        else:
            create = sql.SQL("CREATE TABLE IF NOT EXISTS {} "
                             "(event_time TIMESTAMPTZ NOT NULL, event_data JSONB NOT NULL)")
            self._append = sql.SQL(
                "INSERT INTO {} (event_time, event_data) VALUES (%s, %s::jsonb)").format(table)
        try:
            with self._conn, self._conn.cursor() as cursor:
                cursor.execute(create.format(table))
        except BaseException:
            self.close()
            raise

    def send(self, event: Event) -> None:
        body = event.body.decode("utf-8")
        with self._conn, self._conn.cursor() as cursor:  # commits, or rolls back and raises
            if self._settings.format == "access":
                cursor.execute(self._append, (event.event_time, body))
            elif event.deleted:
                cursor.execute(self._delete, (namespace_field(event),))
            else:
                cursor.execute(self._upsert, (namespace_field(event), body))

    def close(self) -> None:
        self._conn.close()


KIND = PostgresqlKind()

__all__ = ["KIND", "PostgresqlSettings"]
