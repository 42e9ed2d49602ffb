"""Replicating objects written before a rule (ExistingObjectReplication): journal every
current version of a bucket that an enabled rule with ExistingObjectReplication covers,
on this node (POST /admin/replication/existing/{bucket}). Entries take the negated seq of
the row, so asking twice for an unchanged bucket journals nothing new; replicas (versions
born REPLICA) are never sent back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from objstore.errors import AdminError, S3Error
from objstore.replication.journal import PUT, journal_values
from objstore.replication.rules import match
from objstore.replication.service import REPLICA

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore
    from objstore.replication.service import ReplicationConfigService

PAGE = 500
OPERATION = "Replication::Existing"


class ExistingObjects:
    def __init__(self, meta: MetaStore, config: ReplicationConfigService, *,
                 clock: Callable[[], float]) -> None:
        self._meta = meta
        self._config = config
        self.now = clock

    async def journal_bucket(self, bucket: str) -> int:
        """How many entries were added."""
        try:
            config = await self._config.get(bucket)
        except S3Error as error:
            raise AdminError("NotFound", error.message or error.code) from None
        if not any(rule.enabled and rule.existing_objects for rule in config.rules):
            raise AdminError("BadRequest", "No enabled rule of this bucket has "
                             "ExistingObjectReplication enabled.")
        added, after = 0, ""
        while True:
            page = await self._meta.list_latest_entries(bucket, "", after, PAGE, "")
            values: list[dict[str, Any]] = []
            for listed in page:
                if listed.is_delete_marker:
                    continue
                row = await self._meta.get_object(bucket, listed.key, listed.version_id)
                if row is None or row.replication_status == REPLICA:
                    continue
                for rule in match(config, row.key, row.tags):
                    if rule.existing_objects:
                        values.append(journal_values(PUT, -int(row.seq or 0), OPERATION, row,
                                                     rule, self.now()))
            if values:
                added += await self._meta.journal_add(values)
            if len(page) < PAGE:
                return added
            after = page[-1].key


__all__ = ["ExistingObjects"]
