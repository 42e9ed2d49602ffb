"""The `amqp` target kind: publishes each event to a RabbitMQ (AMQP 0-9-1) exchange with
publisher confirms, so a delivery returns only once the broker has confirmed the message
(and, with `mandatory`, routed it to at least one queue). Uses pika's blocking connection
on the target's own thread (`threaded.BlockingTarget`).

Keys: url (amqp:// or amqps://, user and password inside), exchange ("" = the default
exchange, where routing_key names the queue), exchange_type, routing_key, durable (declare
the exchange durable), persistent (delivery mode 2: the message survives a broker restart
in a durable queue), mandatory (an unroutable message is a failed delivery, not a silent
drop), timeout_seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from objstore.notify.targets.base import DeliveryError, Event, Target
from objstore.notify.targets.table import TableReader
from objstore.notify.targets.threaded import BlockingTarget

EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers")


@dataclass(frozen=True, slots=True)
class AmqpSettings:
    name: str
    url: str
    exchange: str
    exchange_type: str
    routing_key: str
    durable: bool
    persistent: bool
    mandatory: bool
    timeout_seconds: float
    password: str


class AmqpKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> AmqpSettings:
        read = TableReader(name, table)
        url = read.url("url", ("amqp", "amqps"), default_port=5672)
        exchange = read.string("exchange", "", allow_empty=True)
        exchange_type = read.choice("exchange_type", EXCHANGE_TYPES, "direct")
        routing_key = read.string("routing_key", "", allow_empty=True)
        if not exchange and not routing_key:
            raise read.error("routing_key", "required with the default exchange "
                                            "(exchange = \"\"): it names the queue")
        settings = AmqpSettings(
            name=name, url=url.geturl(), exchange=exchange, exchange_type=exchange_type,
            routing_key=routing_key, durable=read.boolean("durable", True),
            persistent=read.boolean("persistent", True),
            mandatory=read.boolean("mandatory", True), timeout_seconds=read.seconds(),
            password=unquote(url.password or ""))
        read.finish()
        return settings

    def build(self, settings: AmqpSettings) -> Target:
        return BlockingTarget(settings.name, "amqp", lambda: AmqpSession(settings),
                              timeout_seconds=settings.timeout_seconds,
                              secrets=(settings.password,))


class AmqpSession:
    """One connection and confirming channel (on the target's thread)."""

    def __init__(self, settings: AmqpSettings) -> None:
        import pika

        self._settings = settings
        params = pika.URLParameters(settings.url)
        params.connection_attempts = 1
        params.socket_timeout = settings.timeout_seconds
        params.stack_timeout = settings.timeout_seconds
        params.blocked_connection_timeout = settings.timeout_seconds
        self._connection = pika.BlockingConnection(params)
        try:
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
            if settings.exchange:
                self._channel.exchange_declare(
                    settings.exchange, exchange_type=settings.exchange_type,
                    durable=settings.durable)
        except BaseException:
            self.close()
            raise
        self._properties = pika.BasicProperties(
            content_type="application/json", delivery_mode=2 if settings.persistent else 1)

    def send(self, event: Event) -> None:
        import pika.exceptions

        try:
            self._channel.basic_publish(
                self._settings.exchange, self._settings.routing_key, event.body,
                properties=self._properties, mandatory=self._settings.mandatory)
        except pika.exceptions.UnroutableError:
            raise DeliveryError(
                f"unroutable: no queue is bound to exchange {self._settings.exchange!r} "
                f"with routing key {self._settings.routing_key!r}") from None
        except pika.exceptions.NackError:
            raise DeliveryError("the broker refused the message (nack)") from None

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()


KIND = AmqpKind()

__all__ = ["KIND", "AmqpSettings"]
