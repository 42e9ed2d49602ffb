"""Replicating objects written before a rule (ExistingObjectReplication): journal every
current version of a bucket that an enabled rule with ExistingObjectReplication covers,
on this node (POST /admin/replication/existing/{bucket}, in one call; the maintenance job
`replicate-existing`, workers/replicate_existing.py, in resumable steps). Entries take the
negated seq of the row, so asking twice for an unchanged bucket journals nothing new;
replicas (versions born REPLICA) are never sent back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from objstore.errors import AdminError, S3Error
from objstore.replication.journal import PUT, journal_values
from objstore.replication.rules import ReplicationConfiguration, match
from objstore.replication.service import REPLICA

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore
    from objstore.replication.service import ReplicationConfigService

PAGE = 500
OPERATION = "Replication::Existing"


def existing_rules(config: ReplicationConfiguration) -> None:
    """Refuse (BadRequest) a configuration without an enabled ExistingObjectReplication
    rule: journaling the bucket would add nothing."""
    if not any(rule.enabled and rule.existing_objects for rule in config.rules):
        raise AdminError("BadRequest", "No enabled rule of this bucket has "
                         "ExistingObjectReplication enabled.")


async def journal_page(meta: MetaStore, config: ReplicationConfiguration, bucket: str,
                       after: str, now: float, page_size: int = PAGE
                       ) -> tuple[int, int, str | None]:
    """Journal the current versions of the page of `bucket`'s keys after `after`:
    (entries added, keys listed, the last key listed; None when the listing is done)."""
    page = await meta.list_latest_entries(bucket, "", after, page_size, "")
    values: list[dict[str, Any]] = []
    for listed in page:
        if listed.is_delete_marker:
            continue
        row = await meta.get_object(bucket, listed.key, listed.version_id)
        if row is None or row.replication_status == REPLICA:
            continue
        for rule in match(config, row.key, row.tags):
            if rule.existing_objects:
                values.append(journal_values(PUT, -int(row.seq or 0), OPERATION, row, rule,
                                             now))
    added = await meta.journal_add(values) if values else 0
    last = page[-1].key if len(page) == page_size else None
    return added, len(page), last


class ExistingObjects:
    def __init__(self, meta: MetaStore, config: ReplicationConfigService, *,
                 clock: Callable[[], float]) -> None:
        self._meta = meta
        self._config = config
        self.now = clock

    async def configuration(self, bucket: str) -> ReplicationConfiguration:
        """The bucket's configuration, which must have an ExistingObjectReplication rule
        (AdminError NotFound / BadRequest)."""
        try:
            config = await self._config.get(bucket)
        except S3Error as error:
            raise AdminError("NotFound", error.message or error.code) from None
        existing_rules(config)
        return config

    async def journal_bucket(self, bucket: str) -> int:
        """How many entries were added (the whole bucket, in this call: the
        `replicate-existing` maintenance job does the same in steps, resumable)."""
        config = await self.configuration(bucket)
        added, after = 0, ""
        while True:
            more, _, last = await journal_page(self._meta, config, bucket, after, self.now())
            added += more
            if last is None:
                return added
            after = last


__all__ = ["OPERATION", "PAGE", "ExistingObjects", "existing_rules", "journal_page"]
