"""A bucket's notification configuration: read, validate and store it (bucket config
`notification`, through `BucketConfigService`: the database, the control record for
`recover`, replicated to peers and carried by export/import like every bucket document).

Which destinations exist is the node's `[notifications.targets.*]` (names and kinds); an
http(s) URL as ARN is an ad-hoc webhook and always exists. An empty configuration removes
the stored one (AWS's way of turning notifications off).
"""

from __future__ import annotations

from collections.abc import Mapping

from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.changes import Caller
from objstore.notify.rules import (
    NOTIFICATION_CONFIG_KEY,
    Destination,
    NotificationConfiguration,
    from_json,
    to_json,
    validate,
)


class NotificationConfigService:
    def __init__(self, documents: BucketConfigService, targets: Mapping[str, str]) -> None:
        """`targets`: the configured target names and their kinds."""
        self._documents = documents
        self._targets = dict(targets)

    def known(self, destination: Destination) -> bool:
        if destination.url:
            return True
        return self._targets.get(destination.target) == destination.kind

    async def get(self, bucket: str) -> NotificationConfiguration:
        await self._documents.get(bucket)  # NoSuchBucket
        return await self.load(bucket) or NotificationConfiguration()

    async def load(self, bucket: str) -> NotificationConfiguration | None:
        """The stored configuration (None: none, no such bucket, or unreadable)."""
        text = await self._documents.document(bucket, NOTIFICATION_CONFIG_KEY)
        if text is None:
            return None
        try:
            return from_json(text)
        except (ValueError, KeyError, TypeError):
            return None

    async def put(self, caller: Caller, bucket: str, config: NotificationConfiguration) -> None:
        validate(config, self.known)
        await self._documents.get(bucket)  # NoSuchBucket before anything else
        if config.rules:
            await self._documents.put_config(caller, bucket, NOTIFICATION_CONFIG_KEY,
                                             to_json(config))
        else:
            await self._documents.delete_config(caller, bucket, NOTIFICATION_CONFIG_KEY)


def check_stored(value: str) -> None:
    """An imported `notification` document: S3Error-free check that it parses."""
    try:
        from_json(value)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"the notification configuration is invalid: {exc!r}") from None


__all__ = ["NotificationConfigService", "check_stored"]
