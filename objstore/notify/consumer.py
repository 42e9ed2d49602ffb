"""The outbox consumer of bucket notifications: turns each page of outbox entries into the
deliveries of the node-local queue (`notification_events`, one row per (event, target)).

For each entry that names an S3 event (`records.event_name`) in a bucket with a
notification configuration, every matching rule's destination gets a row holding the
event document. The rows and the consumer's outbox cursor are written in ONE transaction
(`notification_enqueue`): a crash before it leaves both as they were (the page is read
again), after it the page is never queued twice. The outbox hands this consumer only the
changes of the node serving the client request (a peer's applied rows leave no entry).

The configuration read is the one in force when the page is consumed (normally well
under a second after the write).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from objstore.meta.notification_queries import NewDelivery
from objstore.meta.outbox_queries import OutboxEntry
from objstore.notify.configs import NotificationConfigService
from objstore.notify.records import EventContext, event_document, event_name
from objstore.notify.rules import NotificationConfiguration, matching_destinations

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

CONSUMER_NAME = "notifications"


class NotificationConsumer:
    name = CONSUMER_NAME

    def __init__(self, meta: MetaStore, configs: NotificationConfigService, *, region: str,
                 node_id: str, clock: Callable[[], float]) -> None:
        self._meta = meta
        self._configs = configs
        self._region = region
        self._node_id = node_id
        self._clock = clock
        self.queued = 0  # deliveries queued since start

    async def deliver(self, entries: Sequence[OutboxEntry]) -> None:
        if not entries:
            return
        configs: dict[str, NotificationConfiguration | None] = {}
        owners: dict[str, str] = {}
        rows: list[NewDelivery] = []
        for entry in entries:
            name = event_name(entry)
            if name is None:
                continue
            if entry.bucket not in configs:
                configs[entry.bucket] = await self._configs.load(entry.bucket)
            config = configs[entry.bucket]
            if config is None:
                continue
            for rule, destination in matching_destinations(config, name, entry.key):
                if entry.bucket not in owners:
                    bucket = await self._meta.get_bucket(entry.bucket)
                    owners[entry.bucket] = bucket.owner_id if bucket is not None else ""
                context = EventContext(self._region, self._node_id, rule.id,
                                       owners[entry.bucket])
                rows.append(NewDelivery(entry.seq, destination.name, entry.bucket, entry.key,
                                        name, event_document(entry, name, context).decode()))
        await self._meta.notification_enqueue(self.name, entries[-1].seq, rows, self._clock())
        self.queued += len(rows)


__all__ = ["CONSUMER_NAME", "NotificationConsumer"]
