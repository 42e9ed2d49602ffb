"""The `redis` target kind: writes each event to Redis (redis-py, on the target's own thread).

Formats:
- `list` (default): RPUSH the event document onto the list `key` (a durable queue as far as
  the server's persistence goes; consumers BLPOP it).
- `pubsub`: PUBLISH it on the channel `key`. Redis keeps nothing: only subscribers
  connected at that moment receive it.
- `namespace`: one hash field per object, `<bucket>/<object key>` -> its latest event
  document (HSET), removed on an ObjectRemoved event (HDEL), as MinIO's namespace format.

A delivery returns once the server answered the command. redis-py's own retries are off: a
failure is the caller's to retry, in order.

Keys: url (redis://, rediss://, unix://; password and database inside), key, format,
timeout_seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from objstore.notify.targets.base import Event, Target
from objstore.notify.targets.table import TableReader, namespace_field
from objstore.notify.targets.threaded import BlockingTarget

FORMATS = ("list", "pubsub", "namespace")


@dataclass(frozen=True, slots=True)
class RedisSettings:
    name: str
    url: str
    key: str
    format: str
    timeout_seconds: float
    password: str


class RedisKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> RedisSettings:
        read = TableReader(name, table)
        raw = read.string("url")
        if raw.startswith("unix://"):  # unix://[:password@]/path/to/socket?db=N
            password = unquote(urlsplit(raw).password or "")
        else:
            url = read.url("url", ("redis", "rediss"), default_port=6379)
            password = unquote(url.password or "")
        settings = RedisSettings(
            name=name, url=raw, key=read.string("key"),
            format=read.choice("format", FORMATS, "list"), timeout_seconds=read.seconds(),
            password=password)
        read.finish()
        return settings

    def build(self, settings: RedisSettings) -> Target:
        return BlockingTarget(settings.name, "redis", lambda: RedisSession(settings),
                              timeout_seconds=settings.timeout_seconds,
                              secrets=(settings.password,))


class RedisSession:
    def __init__(self, settings: RedisSettings) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._settings = settings
        self._client = redis.Redis.from_url(
            settings.url, socket_timeout=settings.timeout_seconds,
            socket_connect_timeout=settings.timeout_seconds, retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False, single_connection_client=True)
        self._client.ping()

    def send(self, event: Event) -> None:
        settings, client = self._settings, self._client
        if settings.format == "list":
            client.rpush(settings.key, event.body)
        elif settings.format == "pubsub":
            client.publish(settings.key, event.body)
        elif event.deleted:
            client.hdel(settings.key, namespace_field(event))
        else:
            client.hset(settings.key, namespace_field(event), event.body)

    def close(self) -> None:
        self._client.close()


KIND = RedisKind()

__all__ = ["KIND", "RedisSettings"]
