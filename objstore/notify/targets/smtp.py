"""The `smtp` target kind: mails each event (the standard library's smtplib, on the target's
own thread). A delivery returns once the server accepted the message for every recipient
(a refused recipient fails the delivery). One SMTP session per event: mail servers close
idle sessions, and events are not expected to be frequent on this kind.

The mail: Subject `objstore <event name> <bucket>/<key>`, the event document as its
application/json body, headers X-Objstore-Event and X-Objstore-Bucket for filtering.

Keys: host, port (default 25; 465 with security = "tls"; 587 with "starttls"), from, to (an
address or a list), security ("none", "starttls", "tls"), username, password,
timeout_seconds.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from objstore.notify.targets.base import DeliveryError, Event, Target
from objstore.notify.targets.table import TableReader
from objstore.notify.targets.threaded import BlockingTarget

SECURITY = ("none", "starttls", "tls")
DEFAULT_PORTS = {"none": 25, "starttls": 587, "tls": 465}


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    name: str
    host: str
    port: int
    sender: str
    recipients: tuple[str, ...]
    security: str
    username: str | None
    password: str | None
    timeout_seconds: float


class SmtpKind:
    def validate(self, name: str, table: Mapping[str, Any]) -> SmtpSettings:
        read = TableReader(name, table)
        host = read.string("host")
        security = read.choice("security", SECURITY, "none")
        port = read.integer("port", DEFAULT_PORTS[security], 1, 65535)
        sender = _address(read, "from", (read.string("from"),))[0]
        recipients = _address(read, "to", read.strings("to"))
        username = read.optional_string("username")
        password = read.optional_string("password", secret=True)
        if (username is None) != (password is None):
            raise read.error("password" if username else "username",
                             "username and password go together")
        settings = SmtpSettings(name=name, host=host, port=port, sender=sender,
                                recipients=recipients, security=security, username=username,
                                password=password, timeout_seconds=read.seconds())
        read.finish()
        return settings

    def build(self, settings: SmtpSettings) -> Target:
        return BlockingTarget(settings.name, "smtp", lambda: SmtpSession(settings),
                              timeout_seconds=settings.timeout_seconds,
                              secrets=(settings.password or "",))


def _address(read: TableReader, key: str, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        try:
            Address(addr_spec=value)
        except Exception:
            raise read.error(key, f"not an e-mail address: {value!r}") from None
    return values


def message_of(settings: SmtpSettings, event: Event) -> EmailMessage:
    message = EmailMessage()
    subject = f"objstore {event.event_name} {event.bucket}/{event.key}"
    message["Subject"] = subject.replace("\r", " ").replace("\n", " ")[:900]
    message["From"] = settings.sender
    message["To"] = ", ".join(settings.recipients)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain="objstore")
    message["X-Objstore-Event"] = event.event_name
    message["X-Objstore-Bucket"] = event.bucket
    message.set_content(event.body, maintype="application", subtype="json",
                        disposition="inline")
    return message


class SmtpSession:
    """Nothing stays open between events: `send` runs one whole SMTP session."""

    def __init__(self, settings: SmtpSettings) -> None:
        self._settings = settings

    def send(self, event: Event) -> None:
        settings = self._settings
        context = ssl.create_default_context()
        client: smtplib.SMTP
        if settings.security == "tls":
            client = smtplib.SMTP_SSL(settings.host, settings.port,
                                      timeout=settings.timeout_seconds, context=context)
        else:
            client = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout_seconds)
        try:
            if settings.security == "starttls":
                client.starttls(context=context)
            if settings.username is not None and settings.password is not None:
                client.login(settings.username, settings.password)
            refused = client.send_message(message_of(settings, event),
                                          from_addr=settings.sender,
                                          to_addrs=list(settings.recipients))
            if refused:
                raise DeliveryError("recipients refused: " + ", ".join(sorted(refused)))
        finally:
            try:
                client.quit()
            except Exception:
                client.close()

    def close(self) -> None:
        return None


KIND = SmtpKind()

__all__ = ["KIND", "SmtpSettings"]
