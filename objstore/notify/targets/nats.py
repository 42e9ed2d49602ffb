"""The `nats` target kind: publishes each event on one NATS subject (nats-py).

With `jetstream = true` a delivery returns only once a JetStream stream stored the message
(its PubAck); a subject no stream captures is a failed delivery. Core NATS has no
acknowledgement: the target publishes, then round-trips a PING so that a delivery returns
only once the server has processed the message (subscribers connected at that moment get
it; nobody stores it).

nats-py is asyncio: each session runs its own event loop on a thread of its own (which also
answers the server's pings between deliveries); the target's thread (`threaded.
BlockingTarget`) hands it each publish and waits, bounded by timeout_seconds. The client's
own reconnection is off: a lost connection fails the delivery and the next one reconnects.

Keys: url (nats:// or tls://, user:password@ or token@ inside), subject, jetstream,
timeout_seconds.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

from objstore.notify.targets.base import DeliveryError, Event, Target
from objstore.notify.targets.table import TableReader
from objstore.notify.targets.threaded import BlockingTarget

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NatsSettings:
    name: str
    url: str
    subject: str
    jetstream: bool
    timeout_seconds: float
    secrets: tuple[str, ...]


class NatsKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> NatsSettings:
        read = TableReader(name, table)
        url = read.url("url", ("nats", "tls"), default_port=4222)
        subject = read.string("subject")
        if any(c in subject for c in " \t\r\n*>") or "" in subject.split("."):
            raise read.error("subject", "must be dot-separated tokens without spaces or the "
                                        f"wildcards * and >, got {subject!r}")
        # nats://user:password@host, or nats://token@host
        secret = url.password if url.password is not None else url.username
        secrets = (unquote(secret),) if secret else ()
        settings = NatsSettings(
            name=name, url=url.geturl(), subject=subject,
            jetstream=read.boolean("jetstream", False), timeout_seconds=read.seconds(),
            secrets=secrets)
        read.finish()
        return settings

    def build(self, settings: NatsSettings) -> Target:
        return BlockingTarget(settings.name, "nats", lambda: NatsSession(settings),
                              timeout_seconds=settings.timeout_seconds,
                              secrets=settings.secrets)


class NatsSession:
    def __init__(self, settings: NatsSettings) -> None:
        self._settings = settings
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"notify-nats-loop-{settings.name}")
        self._thread.start()
        self._client: Any = None
        try:
            self._client = self._run(self._connect())
        except BaseException:
            self.close()
            raise

    async def _connect(self) -> Any:
        import nats
        from nats.errors import NoServersError

        errors: list[Exception] = []

        async def remember(exc: Exception) -> None:
            # Instead of the client's default handler, which logs a traceback per attempt.
            errors.append(exc)

        try:
            # max_reconnect_attempts bounds the first connection's attempts too (0 would
            # retry forever); allow_reconnect=False keeps a lost connection lost.
            return await nats.connect(
                self._settings.url, connect_timeout=self._settings.timeout_seconds,
                allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.1,
                error_cb=remember, flush_timeout=self._settings.timeout_seconds)
        except NoServersError:
            cause = f"{type(errors[-1]).__name__}: {errors[-1]}" if errors else "no server"
            raise DeliveryError(f"cannot connect to the NATS server: {cause}") from None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, self._settings.timeout_seconds), self._loop)
        try:
            return future.result(self._settings.timeout_seconds + 1)
        except TimeoutError:
            future.cancel()
            raise DeliveryError(f"no answer from the NATS server within "
                                f"{self._settings.timeout_seconds:g} seconds") from None

    def send(self, event: Event) -> None:
        client = self._client
        if not client.is_connected:
            raise ConnectionError("the connection to the NATS server was lost")
        self._run(self._publish(client, event.body))

    async def _publish(self, client: Any, body: bytes) -> None:
        from nats.errors import NoRespondersError

        if self._settings.jetstream:
            try:
                await client.jetstream().publish(self._settings.subject, body,
                                                  timeout=self._settings.timeout_seconds)
            except NoRespondersError:
                raise DeliveryError(f"no JetStream stream captures subject "
                                    f"{self._settings.subject!r}") from None
        else:
            await client.publish(self._settings.subject, body)
            await client.flush(timeout=self._settings.timeout_seconds)

    def close(self) -> None:
        try:
            if self._client is not None and not self._client.is_closed:
                self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self._settings.timeout_seconds)
            if not self._thread.is_alive():
                self._loop.close()


KIND = NatsKind()

__all__ = ["KIND", "NatsSettings"]
