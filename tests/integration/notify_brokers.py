"""Test-side helpers for the notification connector suite: events to deliver, the caller's
retry loop, and readers that take back from each real server what a target delivered
(RabbitMQ queue, MQTT and NATS subscriptions, JetStream stream, Redis, PostgreSQL and
MariaDB tables, an aiosmtpd sink, syslog sockets). Readers block: call them between
deliveries, or through `in_thread`."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from objstore.notify.targets import kind_of
from objstore.notify.targets.base import DeliveryError, Event, Target

T = TypeVar("T")

CLOSED_PORT_HOST = "127.0.0.1"


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def make_event(n: int, *, key: str | None = None, deleted: bool = False,
               bucket: str = "photos") -> Event:
    key = key if key is not None else f"dir/object {n}.jpg"
    name = "s3:ObjectRemoved:Delete" if deleted else "s3:ObjectCreated:Put"
    record = {"eventVersion": "2.1", "eventSource": "objstore:s3", "eventName": name[3:],
              "eventTime": f"2026-11-28T03:00:{n % 60:02d}.000Z",
              "s3": {"bucket": {"name": bucket}, "object": {"key": key, "sequencer": n}}}
    body = json.dumps({"Records": [record]}, separators=(",", ":")).encode()
    return Event(body=body, event_name=name, bucket=bucket, key=key,
                 event_time=record["eventTime"], deleted=deleted)


def build(name: str, table: dict[str, Any]) -> Target:
    kind = kind_of(table["kind"])
    return kind.build(kind.validate(name, table))


def closed_port() -> int:
    """A TCP port nothing listens on (bound, read back, closed)."""
    with socket.socket() as sock:
        sock.bind((CLOSED_PORT_HOST, 0))
        return int(sock.getsockname()[1])


async def sleep(seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    result: T = await deferToThread(fn, *args)
    return result


async def deliver_retrying(target: Target, events: list[Event], *,
                           deadline_seconds: float = 30.0, pause_seconds: float = 0.1,
                           between: Callable[[int], Any] | None = None,
                           failed: Callable[[str], Any] | None = None) -> list[str]:
    """Deliver `events` in order as the notification queue does: a DeliveryError is retried
    (after a pause) until it succeeds or the deadline passes. `between(i)` runs before
    event i (a test stops a broker there), `failed(error)` after each DeliveryError.
    Returns the errors seen."""
    errors: list[str] = []
    deadline = time.monotonic() + deadline_seconds
    for i, event in enumerate(events):
        if between is not None:
            await between(i)
        while True:
            try:
                await target.deliver(event)
                break
            except DeliveryError as exc:
                errors.append(str(exc))
                if failed is not None:
                    failed(str(exc))
                assert time.monotonic() < deadline, f"still failing: {errors[-3:]}"
                await sleep(pause_seconds)
    return errors


async def poll(fn: Callable[[], T], done: Callable[[T], bool], *,
               deadline_seconds: float = 10.0) -> T:
    """`fn()` again (in a thread) until `done(value)`, or the last value at the deadline."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        value = await in_thread(fn)
        if done(value) or time.monotonic() > deadline:
            return value
        await sleep(0.05)


class LoopThread:
    """An asyncio loop on a thread of its own, for the asyncio test clients (NATS, SMTP)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


# Readers.

class AmqpQueue:
    """A durable queue on RabbitMQ, named for the test; `take()` drains it (a connection
    per call: the broker may have restarted in between)."""

    def __init__(self, url: str = "amqp://guest:guest@127.0.0.1:5672/%2F") -> None:
        self.name = unique("objstore-test")
        self._url = url
        self.received: list[bytes] = []
        self._call(lambda channel: channel.queue_declare(self.name, durable=True))

    def _call(self, fn: Callable[[Any], T]) -> T:
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(self._url))
        try:
            return fn(conn.channel())
        finally:
            conn.close()

    def take(self) -> list[bytes]:
        def drain(channel: Any) -> list[bytes]:
            while True:
                method, _props, body = channel.basic_get(self.name, auto_ack=True)
                if method is None:
                    return list(self.received)
                self.received.append(body)
        return self._call(drain)

    def close(self) -> None:
        self._call(lambda channel: channel.queue_delete(self.name))


class MqttSubscriber:
    def __init__(self, topic: str, port: int = 1883, *, client_id: str | None = None) -> None:
        import paho.mqtt.client as mqtt

        self.received: list[bytes] = []
        subscribed = threading.Event()
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                             client_id=client_id or unique("sub"),
                             clean_session=client_id is None)

        def on_connect(c: Any, u: Any, f: Any, reason: Any, p: Any) -> None:
            c.subscribe(topic, qos=2)

        client.on_connect = on_connect
        client.on_subscribe = lambda *args: subscribed.set()
        client.on_message = lambda c, u, msg: self.received.append(msg.payload)
        client.reconnect_delay_set(min_delay=0.1, max_delay=0.2)
        client.connect("127.0.0.1", port)
        client.loop_start()
        assert subscribed.wait(5), "no SUBACK"
        self._client = client

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


class NatsReader:
    """A core NATS subscription, or (jetstream) a file stream capturing the subject."""

    def __init__(self, subject: str, *, jetstream: bool, url: str = "nats://127.0.0.1:4222"
                 ) -> None:
        import nats

        self.subject = subject
        self.jetstream = jetstream
        self.stream = unique("objstore_test")
        self.received: list[bytes] = []
        self._loop = LoopThread()
        self._url = url

        async def open() -> Any:
            nc = await nats.connect(url)
            if not jetstream:
                async def got(msg: Any) -> None:
                    self.received.append(msg.data)
                await nc.subscribe(subject, cb=got)
                await nc.flush()
                return nc
            await nc.jetstream().add_stream(name=self.stream, subjects=[subject])
            await nc.close()  # each take() connects anew: the server may restart meanwhile
            return None

        self._nc = self._loop.run(open())

    def take(self) -> list[bytes]:
        """What the stream holds (jetstream), or what the subscription got (core)."""
        if not self.jetstream:
            return list(self.received)
        import nats

        async def fetch() -> list[bytes]:
            nc = await nats.connect(self._url)
            try:
                js = nc.jetstream()
                info = await js.stream_info(self.stream)
                bodies: list[bytes] = []
                if not info.state.messages:
                    return bodies
                for seq in range(info.state.first_seq, info.state.last_seq + 1):
                    bodies.append((await js.get_msg(self.stream, seq)).data or b"")
                return bodies
            finally:
                await nc.close()

        return self._loop.run(fetch())

    def close(self) -> None:
        async def shut() -> None:
            if self.jetstream:
                import nats
                nc = await nats.connect(self._url)
                await nc.jetstream().delete_stream(self.stream)
                await nc.close()
            else:
                await self._nc.close()

        try:
            self._loop.run(shut())
        finally:
            self._loop.stop()


class SmtpSink:
    """aiosmtpd, a real SMTP server, on a free port of 127.0.0.1; `messages` are what it
    received (envelope sender, recipients, content bytes)."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[tuple[str, list[str], bytes]] = []
        sink = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                sink.messages.append((envelope.mail_from, list(envelope.rcpt_tos),
                                      envelope.original_content or envelope.content))
                return "250 OK"

        self.port = closed_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def close(self) -> None:
        self._controller.stop()


class SyslogSocket:
    """A syslog receiver made by the test: UDP on 127.0.0.1, or a unix datagram socket."""

    def __init__(self, transport: str, path: str = "") -> None:
        if transport == "udp":
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._sock.bind(("127.0.0.1", 0))
            self.address = f"udp://127.0.0.1:{self._sock.getsockname()[1]}"
        else:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.bind(path)
            self.address = f"unix://{path}"
        self._sock.setblocking(False)
        self.received: list[bytes] = []

    def take(self) -> list[bytes]:
        while True:
            try:
                self.received.append(self._sock.recv(65536))
            except BlockingIOError:
                return list(self.received)

    def close(self) -> None:
        self._sock.close()


class SyslogTcpListener:
    """A TCP syslog receiver: accepts connections, splits octet-counted frames."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self._server.getsockname()[1]}"
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            buffer = b""
            with conn:
                while chunk := conn.recv(65536):
                    buffer += chunk
                    while b" " in buffer:
                        length, _, rest = buffer.partition(b" ")
                        if len(rest) < int(length):
                            break
                        self.received.append(rest[:int(length)])
                        buffer = rest[int(length):]

    def take(self) -> list[bytes]:
        return list(self.received)

    def close(self) -> None:
        self._server.close()


def syslog_body(message: bytes) -> bytes:
    """The MSG part of an RFC 5424 message: after the 7th space-separated field."""
    return message.split(b" ", 7)[7]
