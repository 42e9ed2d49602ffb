"""The `mqtt` target kind: publishes each event to one MQTT topic (MQTT 3.1.1, paho-mqtt).
With qos 1 or 2 a delivery returns only once the broker acknowledged the message (PUBACK,
or PUBCOMP for qos 2); with qos 0 once it was written to the socket (MQTT has no ack then).

The connection's network loop is paho's own thread (it answers keep-alive pings between
deliveries); connecting and waiting for the acknowledgement happen on the target's thread
(`threaded.BlockingTarget`), each bounded by timeout_seconds.

Keys: broker (tcp:// or mqtt://, ssl:// or mqtts:// for TLS), topic, qos (0, 1, 2),
username, password, client_id (default objstore-<target name>-<random>, new per
connection), timeout_seconds.
"""

from __future__ import annotations

import secrets
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from objstore.notify.targets.base import DeliveryError, Event, Target
from objstore.notify.targets.table import TableReader
from objstore.notify.targets.threaded import BlockingTarget

PLAIN_SCHEMES = ("tcp", "mqtt")
TLS_SCHEMES = ("ssl", "mqtts")


@dataclass(frozen=True, slots=True)
class MqttSettings:
    name: str
    host: str
    port: int
    tls: bool
    topic: str
    qos: int
    username: str | None
    password: str | None
    client_id: str
    timeout_seconds: float


class MqttKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> MqttSettings:
        read = TableReader(name, table)
        broker = read.url("broker", PLAIN_SCHEMES + TLS_SCHEMES, default_port=1883)
        if broker.username or broker.password:
            raise read.error("broker", "put the user name and password in the username "
                                       "and password keys, not in the URL")
        tls = broker.scheme in TLS_SCHEMES
        topic = read.string("topic")
        if any(c in topic for c in "+#"):
            raise read.error("topic", f"must not contain the wildcards + or #, got {topic!r}")
        username = read.optional_string("username")
        password = read.optional_string("password", secret=True)
        if password is not None and username is None:
            raise read.error("password", "needs username too")
        settings = MqttSettings(
            name=name, host=broker.hostname or "", port=broker.port or (8883 if tls else 1883),
            tls=tls, topic=topic, qos=read.integer("qos", 1, 0, 2), username=username,
            password=password, client_id=read.string("client_id", "", allow_empty=True),
            timeout_seconds=read.seconds())
        read.finish()
        return settings

    def build(self, settings: MqttSettings) -> Target:
        return BlockingTarget(settings.name, "mqtt", lambda: MqttSession(settings),
                              timeout_seconds=settings.timeout_seconds,
                              secrets=(settings.password or "",))


class MqttSession:
    def __init__(self, settings: MqttSettings) -> None:
        import paho.mqtt.client as mqtt

        self._settings = settings
        self._connected = threading.Event()
        self._refusal: str | None = None
        # Unique per connection by default: every node of a cluster has the same target,
        # and a broker disconnects the older of two connections with one client id.
        client_id = settings.client_id or f"objstore-{settings.name}-{secrets.token_hex(4)}"
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=mqtt.MQTTv311, clean_session=True)
        client.on_connect = self._on_connect
        client.connect_timeout = settings.timeout_seconds
        # A lost connection fails the delivery in progress; reconnecting is the target's
        # job on the next delivery, so paho must not queue messages across reconnects.
        client.reconnect_delay_set(min_delay=3600, max_delay=3600)
        if settings.username is not None:
            client.username_pw_set(settings.username, settings.password)
        if settings.tls:
            client.tls_set_context(ssl.create_default_context())
        self._client = client
        client.connect(settings.host, settings.port, keepalive=60)
        client.loop_start()
        if not self._connected.wait(settings.timeout_seconds):
            self.close()
            raise DeliveryError(f"no CONNACK from {settings.host}:{settings.port} within "
                                f"{settings.timeout_seconds:g} seconds")
        if self._refusal is not None:
            self.close()
            raise DeliveryError(f"the broker refused the connection: {self._refusal}")

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        if reason.is_failure:
            self._refusal = str(reason)
        self._connected.set()

    def send(self, event: Event) -> None:
        if not self._client.is_connected():
            raise ConnectionError("the connection to the broker was lost")
        info = self._client.publish(self._settings.topic, event.body, qos=self._settings.qos)
        info.wait_for_publish(self._settings.timeout_seconds)
        if not info.is_published():
            what = "acknowledgement" if self._settings.qos else "send"
            raise DeliveryError(f"no {what} from the broker within "
                                f"{self._settings.timeout_seconds:g} seconds")

    def close(self) -> None:
        try:
            self._client.disconnect()
        finally:
            self._client.loop_stop()


KIND = MqttKind()

__all__ = ["KIND", "MqttSettings"]
