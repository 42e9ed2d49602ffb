"""The notification connectors against the real servers on this machine (RabbitMQ,
Mosquitto, NATS with JetStream, Redis, PostgreSQL, MariaDB) and against an SMTP sink
(aiosmtpd) and syslog sockets made by the test: each kind delivers events in order and the
test reads them back from the server; an unreachable server is a DeliveryError whose
message carries no password; a target reconnects after a failure. Broker restarts in the
middle of a burst are tests/faults/test_notify_broker_restarts.py.

The targets are driven directly (no daemon) under pytest-twisted, as the notification queue
drives them: one delivery at a time, a DeliveryError retried.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from objstore.notify.targets.base import DeliveryError, Event
from tests.integration.notify_brokers import (
    AmqpQueue,
    MqttSubscriber,
    NatsReader,
    SmtpSink,
    SyslogSocket,
    SyslogTcpListener,
    build,
    closed_port,
    deliver_retrying,
    in_thread,
    make_event,
    poll,
    syslog_body,
    unique,
)

pytestmark = pytest.mark.timeout(60)

PASSWORD = "pw-Secret-4711"


@dataclass
class Case:
    """One connector set up against its server: the target table, how to read back what
    arrived (bodies in arrival order), and what to clean up."""

    table: dict[str, Any]
    take: Callable[[], list[bytes]]
    closers: list[Callable[[], Any]] = field(default_factory=list)


def _amqp() -> Case:
    queue = AmqpQueue()
    return Case({"kind": "amqp", "url": "amqp://guest:guest@127.0.0.1:5672/%2F",
                 "exchange": "", "routing_key": queue.name}, queue.take, [queue.close])


def _amqp_exchange() -> Case:
    import pika

    queue = AmqpQueue()
    exchange = unique("objstore-test-x")
    conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1/%2F"))
    channel = conn.channel()
    channel.exchange_declare(exchange, exchange_type="topic", durable=True)
    channel.queue_bind(queue.name, exchange, routing_key="s3.#")

    def close() -> None:
        channel.exchange_delete(exchange)
        conn.close()
        queue.close()

    return Case({"kind": "amqp", "url": "amqp://guest:guest@127.0.0.1/%2F",
                 "exchange": exchange, "exchange_type": "topic", "routing_key": "s3.events"},
                queue.take, [close])


def _mqtt() -> Case:
    topic = unique("objstore/test")
    sub = MqttSubscriber(topic)
    return Case({"kind": "mqtt", "broker": "tcp://127.0.0.1:1883", "topic": topic, "qos": 1},
                lambda: list(sub.received), [sub.close])


def _nats(jetstream: bool) -> Callable[[], Case]:
    def setup() -> Case:
        subject = unique("objstore.test")
        reader = NatsReader(subject, jetstream=jetstream)
        return Case({"kind": "nats", "url": "nats://127.0.0.1:4222", "subject": subject,
                     "jetstream": jetstream}, reader.take, [reader.close])
    return setup


def _redis_list() -> Case:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379)
    key = unique("objstore-test")
    return Case({"kind": "redis", "url": "redis://127.0.0.1:6379/0", "key": key},
                lambda: client.lrange(key, 0, -1), [lambda: client.delete(key), client.close])


def _redis_pubsub() -> Case:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379)
    channel = unique("objstore-test")
    pubsub = client.pubsub()
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]
    received: list[bytes] = []

    def take() -> list[bytes]:
        while (message := pubsub.get_message(timeout=0.01)) is not None:
            received.append(message["data"])
        return list(received)

    return Case({"kind": "redis", "url": "redis://127.0.0.1:6379", "key": channel,
                 "format": "pubsub"}, take, [pubsub.close, client.close])


def _smtp() -> Case:
    sink = SmtpSink()

    def take() -> list[bytes]:
        import email
        from email import policy

        bodies = []
        for sender, recipients, content in sink.messages:
            assert sender == "objstore@example.com"
            assert recipients == ["ops@example.com", "audit@example.com"]
            message = email.message_from_bytes(content, policy=policy.default)
            assert message["Subject"].startswith("objstore s3:Object")
            bodies.append(message.get_content())
        return bodies

    return Case({"kind": "smtp", "host": "127.0.0.1", "port": sink.port,
                 "from": "objstore@example.com",
                 "to": ["ops@example.com", "audit@example.com"]}, take, [sink.close])


def _syslog_udp() -> Case:
    sock = SyslogSocket("udp")
    return Case({"kind": "syslog", "address": sock.address, "facility": "local3"},
                lambda: [syslog_body(m) for m in sock.take()], [sock.close])


def _syslog_tcp() -> Case:
    listener = SyslogTcpListener()
    return Case({"kind": "syslog", "address": listener.address},
                lambda: [syslog_body(m) for m in listener.take()], [listener.close])


STREAM_CASES: dict[str, Callable[[], Case]] = {
    "amqp-default-exchange": _amqp,
    "amqp-topic-exchange": _amqp_exchange,
    "mqtt-qos1": _mqtt,
    "nats-core": _nats(False),
    "nats-jetstream": _nats(True),
    "redis-list": _redis_list,
    "redis-pubsub": _redis_pubsub,
    "smtp": _smtp,
    "syslog-udp": _syslog_udp,
    "syslog-tcp": _syslog_tcp,
}


@pytest.fixture(params=sorted(STREAM_CASES))
def stream_case(request: pytest.FixtureRequest) -> Iterator[Case]:
    case = STREAM_CASES[request.param]()
    try:
        yield case
    finally:
        for close in case.closers:
            close()


@pytest_twisted.ensureDeferred
async def test_each_kind_delivers_every_event_in_order(stream_case: Case) -> None:
    target = build(unique("t"), stream_case.table)
    events = [make_event(n) for n in range(5)] + [make_event(5, deleted=True)]
    try:
        assert await deliver_retrying(target, events) == []
        got = await poll(stream_case.take, lambda bodies: len(bodies) >= len(events))
    finally:
        await target.close()
    assert [json.loads(b) for b in got] == [json.loads(e.body) for e in events]


@pytest_twisted.ensureDeferred
async def test_syslog_unix_datagram_socket_with_priority(tmp_path: Path) -> None:
    sock = SyslogSocket("unix", str(tmp_path / "log.sock"))
    target = build("audit", {"kind": "syslog", "address": str(tmp_path / "log.sock"),
                             "facility": "local3", "severity": "notice"})
    try:
        await target.deliver(make_event(1))
        messages = sock.take()
    finally:
        await target.close()
        sock.close()
    assert len(messages) == 1
    assert messages[0].startswith(b"<157>1 ")  # local3 (19) * 8 + notice (5)
    assert b" objstore - s3:ObjectCreated:Put - {" in messages[0]


# The namespace formats: one entry per object, updated, deleted on ObjectRemoved.

def _namespace_events() -> list[Event]:
    return [make_event(1, key="a.txt"), make_event(2, key="b.txt"),
            make_event(3, key="a.txt"), make_event(4, key="b.txt", deleted=True),
            make_event(5, key="c/ünïcode key.txt")]


def _expected_namespace() -> dict[str, Any]:
    return {"photos/a.txt": json.loads(make_event(3, key="a.txt").body),
            "photos/c/ünïcode key.txt": json.loads(make_event(5, key="c/ünïcode key.txt").body)}


def _redis_namespace() -> Case:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379)
    key = unique("objstore-test")

    def take() -> list[bytes]:
        return [json.dumps({k.decode(): json.loads(v)
                            for k, v in client.hgetall(key).items()}).encode()]

    return Case({"kind": "redis", "url": "redis://127.0.0.1:6379", "key": key,
                 "format": "namespace"}, take, [lambda: client.delete(key), client.close])


def _postgresql(fmt: str) -> Callable[[], Case]:
    def setup() -> Case:
        import psycopg2

        table = unique("objstore_test")
        conn = psycopg2.connect("host=127.0.0.1 dbname=test user=postgres")
        conn.autocommit = True

        def rows() -> list[tuple[Any, ...]]:
            with conn.cursor() as cursor:
                order = "key" if fmt == "namespace" else "event_time"
                cursor.execute(f"SELECT * FROM {table} ORDER BY {order}")
                return list(cursor.fetchall())

        def drop() -> None:
            with conn.cursor() as cursor:
                cursor.execute(f"DROP TABLE IF EXISTS {table}")
            conn.close()

        return Case({"kind": "postgresql", "table": table, "format": fmt,
                     "dsn": "postgresql://postgres@127.0.0.1:5432/test"},
                    rows, [drop])  # type: ignore[arg-type]
    return setup


def _mysql(fmt: str) -> Callable[[], Case]:
    def setup() -> Case:
        import pymysql

        table = unique("objstore_test")
        conn = pymysql.connect(host="127.0.0.1", user="root", password="", database="test",
                               autocommit=True)

        def rows() -> list[tuple[Any, ...]]:
            with conn.cursor() as cursor:
                if fmt == "namespace":
                    cursor.execute(f"SELECT key_name, value FROM {table} ORDER BY key_name")
                else:
                    cursor.execute(f"SELECT event_time, event_data FROM {table} "
                                   "ORDER BY event_time")
                return list(cursor.fetchall())

        def drop() -> None:
            with conn.cursor() as cursor:
                cursor.execute(f"DROP TABLE IF EXISTS {table}")
            conn.close()

        return Case({"kind": "mysql", "table": table, "format": fmt,
                     "dsn": "mysql://root@127.0.0.1:3306/test"}, rows, [drop])  # type: ignore[arg-type]
    return setup


def _as_json(value: Any) -> Any:
    return value if isinstance(value, dict) else json.loads(value)


@pytest.mark.parametrize("setup", [_redis_namespace, _postgresql("namespace"),
                                   _mysql("namespace")],
                         ids=["redis", "postgresql", "mysql"])
@pytest_twisted.ensureDeferred
async def test_namespace_format_keeps_one_entry_per_object(setup: Callable[[], Case]) -> None:
    case = setup()
    target = build(unique("t"), case.table)
    try:
        assert await deliver_retrying(target, _namespace_events()) == []
        got = await in_thread(case.take)
    finally:
        await target.close()
        for close in case.closers:
            close()
    if case.table["kind"] == "redis":
        assert json.loads(got[0]) == _expected_namespace()
    else:
        assert {row[0]: _as_json(row[1]) for row in got} == _expected_namespace()


@pytest.mark.parametrize("setup", [_postgresql("access"), _mysql("access")],
                         ids=["postgresql", "mysql"])
@pytest_twisted.ensureDeferred
async def test_access_format_appends_a_row_per_event(setup: Callable[[], Case]) -> None:
    case = setup()
    target = build(unique("t"), case.table)
    events = _namespace_events()
    try:
        assert await deliver_retrying(target, events) == []
        # A second target on the same table (another node, or a restart): the table is
        # there already, rows keep being appended.
        again = build(unique("t"), case.table)
        await again.deliver(make_event(9))
        await again.close()
        got = await in_thread(case.take)
    finally:
        await target.close()
        for close in case.closers:
            close()
    assert [_as_json(row[1]) for row in got] == [json.loads(e.body)
                                                 for e in [*events, make_event(9)]]
    assert str(got[0][0]).startswith("2026-11-28 03:00:01")


# Failures: a DeliveryError, with no secret in it, and the next delivery reconnects.

UNREACHABLE: dict[str, Callable[[int], dict[str, Any]]] = {
    "amqp": lambda port: {"kind": "amqp", "url": f"amqp://guest:{PASSWORD}@127.0.0.1:{port}/",
                          "routing_key": "q"},
    "mqtt": lambda port: {"kind": "mqtt", "broker": f"tcp://127.0.0.1:{port}", "topic": "t",
                          "username": "u", "password": PASSWORD},
    "nats": lambda port: {"kind": "nats", "url": f"nats://u:{PASSWORD}@127.0.0.1:{port}",
                          "subject": "s"},
    "redis": lambda port: {"kind": "redis", "url": f"redis://:{PASSWORD}@127.0.0.1:{port}/0",
                           "key": "k"},
    "postgresql": lambda port: {"kind": "postgresql", "table": "t",
                                "dsn": f"postgresql://u:{PASSWORD}@127.0.0.1:{port}/test"},
    "mysql": lambda port: {"kind": "mysql", "table": "t",
                           "dsn": f"mysql://root:{PASSWORD}@127.0.0.1:{port}/test"},
    "smtp": lambda port: {"kind": "smtp", "host": "127.0.0.1", "port": port,
                          "from": "a@example.com", "to": "b@example.com",
                          "username": "u", "password": PASSWORD},
    "syslog": lambda port: {"kind": "syslog", "address": f"tcp://127.0.0.1:{port}"},
}


@pytest.mark.parametrize("kind", sorted(UNREACHABLE))
@pytest_twisted.ensureDeferred
async def test_unreachable_server_is_a_delivery_error_without_secrets(kind: str) -> None:
    table = UNREACHABLE[kind](closed_port())
    table["timeout_seconds"] = 2
    target = build("down", table)
    try:
        for _ in range(2):  # the second attempt reconnects (and fails) again
            with pytest.raises(DeliveryError) as caught:
                await target.deliver(make_event(1))
            assert PASSWORD not in str(caught.value)
            assert str(caught.value)
    finally:
        await target.close()


@pytest.mark.parametrize("table", [
    {"kind": "amqp", "url": f"amqp://guest:{PASSWORD}@127.0.0.1:5672/", "routing_key": "q"},
    {"kind": "postgresql", "table": "t", "dsn": f"postgresql://nosuchuser:{PASSWORD}"
                                                f"@127.0.0.1:5432/test"},
    {"kind": "mysql", "table": "t", "dsn": f"mysql://nosuchuser:{PASSWORD}@127.0.0.1:3306/test"},
], ids=["amqp", "postgresql", "mysql"])
@pytest_twisted.ensureDeferred
async def test_refused_credentials_are_a_delivery_error_without_secrets(
        table: dict[str, Any]) -> None:
    target = build("refused", {**table, "timeout_seconds": 5})
    try:
        with pytest.raises(DeliveryError) as caught:
            await target.deliver(make_event(1))
    finally:
        await target.close()
    assert PASSWORD not in str(caught.value)


@pytest_twisted.ensureDeferred
async def test_amqp_unroutable_event_is_not_accepted() -> None:
    target = build("amqp", {"kind": "amqp", "url": "amqp://guest:guest@127.0.0.1:5672/%2F",
                            "routing_key": unique("no-such-queue")})
    try:
        with pytest.raises(DeliveryError, match="unroutable"):
            await target.deliver(make_event(1))
    finally:
        await target.close()


@pytest_twisted.ensureDeferred
async def test_nats_jetstream_subject_without_stream_is_not_accepted() -> None:
    target = build("js", {"kind": "nats", "url": "nats://127.0.0.1:4222",
                          "subject": unique("objstore.nostream"), "jetstream": True,
                          "timeout_seconds": 2})
    try:
        with pytest.raises(DeliveryError, match="stream"):
            await target.deliver(make_event(1))
    finally:
        await target.close()


@pytest_twisted.ensureDeferred
async def test_smtp_refused_recipient_is_a_delivery_error() -> None:
    from aiosmtpd.controller import Controller

    class Refusing:
        async def handle_RCPT(self, server: Any, session: Any, envelope: Any,  # noqa: N802
                              address: str, options: Any) -> str:
            return "550 no such user"

    port = closed_port()
    controller = Controller(Refusing(), hostname="127.0.0.1", port=port)
    controller.start()
    target = build("mail", {"kind": "smtp", "host": "127.0.0.1", "port": port,
                            "from": "a@example.com", "to": "nobody@example.com"})
    try:
        with pytest.raises(DeliveryError, match="550"):
            await target.deliver(make_event(1))
    finally:
        await target.close()
        controller.stop()


@pytest.mark.parametrize("fmt", ["postgresql", "mysql"])
@pytest_twisted.ensureDeferred
async def test_a_connection_the_server_closed_is_replaced_within_the_delivery(fmt: str) -> None:
    """The server ends the target's idle connection (an idle timeout, a reaper, a restart):
    the next delivery notices, reconnects at once and succeeds; nothing is missing."""
    import psycopg2
    import pymysql

    case = (_postgresql if fmt == "postgresql" else _mysql)("access")()
    name = unique("t")
    target = build(name, case.table)
    try:
        await target.deliver(make_event(1))
        if fmt == "postgresql":
            with psycopg2.connect("host=127.0.0.1 dbname=test user=postgres") as conn, \
                    conn.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE application_name = %s", (f"objstore-notify-{name}",))
                assert cursor.fetchall() == [(True,)]
            conn.close()
        else:
            # The target's own connection (MariaDB without performance_schema cannot tell
            # it apart from the test's otherwise).
            connection_id = target._session._conn.thread_id()  # type: ignore[attr-defined]
            admin = pymysql.connect(host="127.0.0.1", user="root", database="test")
            with admin.cursor() as cursor:
                cursor.execute(f"KILL CONNECTION {int(connection_id)}")
            admin.close()
        assert await deliver_retrying(target, [make_event(2), make_event(3)]) == []
        got = await in_thread(case.take)
    finally:
        await target.close()
        for close in case.closers:
            close()
    assert [_as_json(row[1])["Records"][0]["s3"]["object"]["sequencer"] for row in got] \
        == [1, 2, 3]
