"""What a notification target is: the interface every connector kind implements, and the
errors it raises. Pure: no Twisted, no connector library.

A target kind is a module of this package exposing `KIND: TargetKind` (named in
`targets/__init__.KIND_MODULES`):
- `validate(name, table)` checks one `[notifications.targets.<name>]` table of the config
  file (its keys, types and values, `kind` included) and returns the typed settings, or
  raises `TargetConfigError` with a message an operator can act on (the daemon refuses to
  start with it). It opens no connection.
- `build(settings)` returns the `Target` that delivers to it (no I/O until the first
  delivery or `start`).

A `Target` delivers one event document (the S3 JSON `{"Records": [...]}`, UTF-8 bytes) at a
time. `deliver` returns once the target has accepted it (the broker confirmed, the row is
committed, the HTTP answer was 2xx), and raises `DeliveryError` otherwise; the caller
retries with backoff, so a delivery may repeat (at-least-once). A target never blocks the
reactor thread (blocking client libraries run in its own thread, one per target, so a slow
target never holds up another) and bounds every call with `timeout_seconds`. `close`
releases its connections (on stop; reconnecting after a failure is the target's own job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class TargetConfigError(ValueError):
    """A `[notifications.targets.<name>]` table that cannot be used (message for the
    operator, naming the table and the key)."""


class DeliveryError(Exception):
    """The target did not accept an event (connection refused, broker nack, HTTP status,
    timeout). The message is shown in the events view: no credentials in it."""


@dataclass(frozen=True, slots=True)
class Event:
    """One event to deliver: `body` is the S3 event document; the rest is what some
    targets key or route by (Redis namespace format, PostgreSQL/MySQL namespace rows,
    MQTT/NATS subjects are fixed by configuration)."""

    body: bytes
    event_name: str  # e.g. "s3:ObjectCreated:Put"
    bucket: str
    key: str
    event_time: str  # ISO 8601, as in the record
    deleted: bool  # an ObjectRemoved event (namespace formats delete the key's row)


class Target(Protocol):
    name: str
    kind: str

    async def deliver(self, event: Event) -> None:
        """Deliver one event; return when accepted, raise DeliveryError otherwise."""

    async def close(self) -> None:
        """Release connections and threads."""


class TargetKind(Protocol):
    def validate(self, name: str, table: Mapping[str, Any]) -> Any:
        """The typed settings of one target table, or TargetConfigError."""

    def build(self, settings: Any) -> Target:
        """The target for settings `validate` returned."""


__all__ = ["DeliveryError", "Event", "Target", "TargetConfigError", "TargetKind"]
