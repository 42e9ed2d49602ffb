"""A broker restart in the middle of a burst of notification events, once per connector kind
that has a server: deliveries fail while the server is down (DeliveryError), succeed again
after it is back (the target reconnects by itself), and nothing is lost: every event is
read back from the server, in order (a repeat is allowed: delivery is at-least-once).

The test plays the notification queue: it delivers the burst one event at a time and retries
a DeliveryError after a short pause. Halfway, it stops the server, and starts it again
0.6 s after a delivery failed, while the retries go on.

Whose server restarts: Redis, Mosquitto, NATS, PostgreSQL and MariaDB run as private
instances the test starts (same binaries as the machine's services, on a free port, in a
temporary directory) and ends by their pid: the shared servers are used by other test runs,
and the shared Redis keeps nothing on disk, so a restart of it would lose a list by design.
RabbitMQ is too slow to start privately (an Erlang node takes seconds), so the shared
broker's application is stopped and started with `rabbitmqctl stop_app` / `start_app` (the
node process stays; it is always started again, in `finally`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from objstore.notify.targets.base import Event, Target
from tests.integration.notify_brokers import (
    AmqpQueue,
    MqttSubscriber,
    NatsReader,
    build,
    closed_port,
    deliver_retrying,
    in_thread,
    make_event,
    poll,
    unique,
)

pytestmark = pytest.mark.timeout(90)

BURST = 20
RESTART_AT = 8
DOWN_SECONDS = 0.6
READY_SECONDS = 30.0


def wait_for_port(port: int, deadline_seconds: float = READY_SECONDS) -> None:
    deadline = time.monotonic() + deadline_seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class PrivateServer:
    """A server process the test starts on `port` (as `user`, when given) and stops by its
    pid with the signal of its clean shutdown, as a service restart does."""

    def __init__(self, argv: list[str], port: int, log: Path, *, user: str | None = None,
                 stop_signal: int = signal.SIGTERM,
                 ready: Callable[[], None] | None = None) -> None:
        self.argv = argv
        self.user = user
        self.stop_signal = stop_signal
        self.port = port
        self.log = log
        self.ready = ready or (lambda: wait_for_port(port))
        self.process: subprocess.Popen[bytes] | None = None
        self.cleanup: Callable[[], Any] = lambda: None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=log,
                                            start_new_session=True, user=self.user)
        self.ready()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None


@contextmanager
def running(server: PrivateServer) -> Iterator[PrivateServer]:
    try:
        server.start()
        yield server
    finally:
        server.stop()
        server.cleanup()


def need(*programs: str) -> None:
    for program in programs:
        if shutil.which(program) is None and not Path(program).exists():
            pytest.skip(f"{program} is not installed")


async def burst_through_restart(target: Target, events: list[Event],
                                stop: Callable[[], None], start: Callable[[], None]
                                ) -> list[str]:
    """Deliver `events` retrying, stopping the server before event RESTART_AT and starting
    it again (in a thread, while the retries go on) DOWN_SECONDS after the first delivery
    that failed while it was down."""
    restarted: list[Any] = []

    async def between(i: int) -> None:
        if i == RESTART_AT:
            await deferToThread(stop)
            restarted.append(None)

    def failed(error: str) -> None:
        if restarted == [None]:
            restarted[0] = deferToThread(lambda: (time.sleep(DOWN_SECONDS), start()))

    try:
        errors = await deliver_retrying(target, events, between=between, failed=failed,
                                        deadline_seconds=60, pause_seconds=0.1)
    finally:
        if restarted and restarted[0] is not None:
            await restarted[0]
        await target.close()
    return errors


def check_nothing_lost(got: list[Any], events: list[Event], errors: list[str]) -> None:
    sent = [json.loads(e.body) for e in events]
    received = [value if isinstance(value, dict) else json.loads(value) for value in got]
    first_seen: list[Any] = []
    for record in received:
        if record not in first_seen:
            first_seen.append(record)
    assert first_seen == sent, f"{len(received)} received, {len(sent)} sent"
    assert errors, "no delivery failed while the server was down"


# Private servers.

def redis_server(tmp: Path) -> PrivateServer:
    need("redis-server")
    port = closed_port()
    return PrivateServer(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--dir", str(tmp), "--appendonly", "yes", "--appendfsync", "always",
                          "--save", ""], port, tmp / "redis.log")


def mosquitto_server(tmp: Path) -> PrivateServer:
    need("mosquitto")
    port = closed_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
                    f"persistence_location {tmp}/\nautosave_interval 1\n"
                    + ("user root\n" if os.geteuid() == 0 else ""))
    return PrivateServer(["mosquitto", "-c", str(conf)], port, tmp / "mosquitto.log")


def nats_server(tmp: Path) -> PrivateServer:
    need("/usr/sbin/nats-server")
    port = closed_port()
    return PrivateServer(["/usr/sbin/nats-server", "-a", "127.0.0.1", "-p", str(port), "-js",
                          "-sd", str(tmp / "js")], port, tmp / "nats.log")


def postgres_server(tmp: Path) -> PrivateServer:
    """A fresh cluster; as root it runs as `postgres` (PostgreSQL refuses root), in a
    directory of its own under /tmp (pytest's temporary directories are root's only)."""
    bindir = Path("/usr/lib/postgresql")
    versions = sorted(bindir.iterdir()) if bindir.is_dir() else []
    if not versions:
        pytest.skip("PostgreSQL server binaries are not installed")
    bin_ = versions[-1] / "bin"
    user = "postgres" if os.geteuid() == 0 else None
    if user:
        tmp = Path(tempfile.mkdtemp(prefix="objstore-notify-pg-", dir="/tmp"))
        shutil.chown(tmp, user)
    data = tmp / "data"
    subprocess.run([str(bin_ / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                    "--no-sync", "-N"], check=True, capture_output=True, timeout=60, user=user)
    port = closed_port()
    server = PrivateServer([str(bin_ / "postgres"), "-D", str(data), "-p", str(port),
                            "-h", "127.0.0.1", "-k", str(tmp), "-c", "fsync=off"],
                           port, tmp / "postgres.log", user=user,
                           stop_signal=signal.SIGINT)  # fast shutdown: clients are cut off
    server.cleanup = lambda: shutil.rmtree(tmp, ignore_errors=True)
    return server


def mariadb_server(tmp: Path) -> PrivateServer:
    need("mariadbd", "mariadb-install-db")
    data = tmp / "mariadb"
    user = ["--user=root"] if os.geteuid() == 0 else []
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", *user,
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True, timeout=60)
    port = closed_port()
    return PrivateServer(["mariadbd", "--no-defaults", f"--datadir={data}", *user,
                          f"--port={port}", "--bind-address=127.0.0.1",
                          f"--socket={tmp}/mariadb.sock", f"--pid-file={tmp}/mariadb.pid",
                          "--innodb-buffer-pool-size=16M", "--skip-log-bin",
                          "--innodb-buffer-pool-dump-at-shutdown=0",
                          "--innodb-buffer-pool-load-at-startup=0", "--skip-name-resolve"],
                         port, tmp / "mariadb.log")


# One restart test per broker.

@pytest_twisted.ensureDeferred
async def test_redis_restart_mid_burst_loses_nothing(tmp_path: Path) -> None:
    import redis

    with running(redis_server(tmp_path)) as server:
        key = unique("events")
        target = build("r", {"kind": "redis", "url": f"redis://127.0.0.1:{server.port}/0",
                             "key": key, "timeout_seconds": 2})
        events = [make_event(n) for n in range(BURST)]
        errors = await burst_through_restart(target, events, server.stop, server.start)
        client = redis.Redis(host="127.0.0.1", port=server.port)
        got = client.lrange(key, 0, -1)
        client.close()
    check_nothing_lost(got, events, errors)


@pytest_twisted.ensureDeferred
async def test_mosquitto_restart_mid_burst_loses_nothing(tmp_path: Path) -> None:
    with running(mosquitto_server(tmp_path)) as server:
        topic = unique("objstore/restart")
        # A persistent session (fixed client id, clean_session off) with qos 1: what the
        # broker holds for the subscriber survives the restart (persistence on).
        subscriber = MqttSubscriber(topic, server.port, client_id=unique("sub"))
        target = build("m", {"kind": "mqtt", "broker": f"tcp://127.0.0.1:{server.port}",
                             "topic": topic, "qos": 1, "timeout_seconds": 2})
        events = [make_event(n) for n in range(BURST)]
        try:
            errors = await burst_through_restart(target, events, server.stop, server.start)
            got = await poll(lambda: list(subscriber.received),
                             lambda got: len(set(got)) >= BURST)
        finally:
            subscriber.close()
    check_nothing_lost(got, events, errors)


@pytest_twisted.ensureDeferred
async def test_nats_jetstream_restart_mid_burst_loses_nothing(tmp_path: Path) -> None:
    with running(nats_server(tmp_path)) as server:
        url = f"nats://127.0.0.1:{server.port}"
        subject = unique("objstore.restart")
        reader = await in_thread(lambda: NatsReader(subject, jetstream=True, url=url))
        target = build("n", {"kind": "nats", "url": url, "subject": subject,
                             "jetstream": True, "timeout_seconds": 2})
        events = [make_event(n) for n in range(BURST)]
        try:
            errors = await burst_through_restart(target, events, server.stop, server.start)
            got = await in_thread(reader.take)
        finally:
            await in_thread(reader.close)
    check_nothing_lost(got, events, errors)


@pytest_twisted.ensureDeferred
async def test_postgresql_restart_mid_burst_loses_nothing(tmp_path: Path) -> None:
    import psycopg2

    with running(postgres_server(tmp_path)) as server:
        dsn = f"host=127.0.0.1 port={server.port} dbname=postgres user=postgres"
        target = build("p", {"kind": "postgresql", "dsn": dsn, "table": "events",
                             "format": "access", "timeout_seconds": 2})
        events = [make_event(n) for n in range(BURST)]
        errors = await burst_through_restart(target, events, server.stop, server.start)
        with psycopg2.connect(dsn) as conn, conn.cursor() as cursor:
            cursor.execute("SELECT event_data FROM events ORDER BY event_time")
            got = [row[0] for row in cursor.fetchall()]
        conn.close()
    check_nothing_lost(got, events, errors)


@pytest_twisted.ensureDeferred
async def test_mariadb_restart_mid_burst_loses_nothing(tmp_path: Path) -> None:
    import pymysql

    with running(mariadb_server(tmp_path)) as server:
        admin = pymysql.connect(host="127.0.0.1", port=server.port, user="root")
        with admin.cursor() as cursor:
            cursor.execute("CREATE DATABASE notify")
        admin.close()
        target = build("my", {"kind": "mysql", "table": "events", "format": "access",
                              "dsn": f"mysql://root@127.0.0.1:{server.port}/notify",
                              "timeout_seconds": 2})
        events = [make_event(n) for n in range(BURST)]
        errors = await burst_through_restart(target, events, server.stop, server.start)
        conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root",
                               database="notify")
        with conn.cursor() as cursor:
            cursor.execute("SELECT event_data FROM events ORDER BY event_time")
            got = [row[0] for row in cursor.fetchall()]
        conn.close()
    check_nothing_lost(got, events, errors)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)


@pytest.mark.serial  # stops the shared broker other modules' AMQP tests use
@pytest_twisted.ensureDeferred
async def test_rabbitmq_restart_mid_burst_loses_nothing() -> None:
    """The shared broker's application stops and starts (see the module docstring)."""
    if shutil.which("rabbitmqctl") is None or os.geteuid() != 0:
        pytest.skip("stopping the local RabbitMQ needs root and rabbitmqctl")
    queue = await in_thread(AmqpQueue)
    target = build("a", {"kind": "amqp", "url": "amqp://guest:guest@127.0.0.1:5672/%2F",
                         "routing_key": queue.name, "timeout_seconds": 2})
    events = [make_event(n) for n in range(BURST)]

    def start() -> None:
        rabbitmqctl("start_app")
        wait_for_port(5672)

    try:
        errors = await burst_through_restart(target, events, lambda: rabbitmqctl("stop_app"),
                                             start)
    finally:
        await in_thread(start)  # up again whatever happened (start_app is idempotent)
    got = await poll(queue.take, lambda got: len(got) >= BURST)
    await in_thread(queue.close)
    check_nothing_lost(got, events, errors)


