"""The replication journal's feed: the outbox consumer `replication` (engine/outbox.py)
that turns this node's object changes into journal entries, one per change and
destination its bucket's rules select.

Fed only by the node that served the client write (the outbox has no entry for a peer's
row: cluster rule 11) and never for a replica (a version born REPLICA was written by a
replication source: it journals nothing, so two-way setups do not loop). Kinds: a new
version (PutObject, CopyObject, CompleteMultipartUpload) `put`; a delete marker `delete_marker`
(rules with DeleteMarkerReplication); a tag change `tags`; a legal hold or retention set
on an existing version `lock`; a version removed for good `delete` (rules with
DeleteReplication). A page delivered again adds nothing (`journal_add` is idempotent on
the outbox seq).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from objstore.engine.changes import ChangeKind
from objstore.meta.outbox_queries import OutboxEntry
from objstore.meta.records import ObjectRecord
from objstore.replication.rules import ReplicationConfiguration, ReplicationRule, match
from objstore.replication.service import PENDING, REPLICA

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore
    from objstore.replication.service import ReplicationConfigService

CONSUMER_NAME = "replication"
PUT, DELETE_MARKER, TAGS, LOCK, DELETE = "put", "delete_marker", "tags", "lock", "delete"
_KINDS = {ChangeKind.OBJECT_WRITTEN.value: PUT,
          ChangeKind.DELETE_MARKER_WRITTEN.value: DELETE_MARKER,
          ChangeKind.TAGS_CHANGED.value: TAGS,
          ChangeKind.LOCK_CHANGED.value: LOCK,
          ChangeKind.VERSION_DELETED.value: DELETE}


def journal_values(kind: str, seq: int, operation: str, record: ObjectRecord | OutboxEntry,
                   rule: ReplicationRule, now: float) -> dict[str, Any]:
    """The columns of one journal entry (all but id)."""
    dest = rule.destination
    return {
        "seq": seq, "created_at": now, "updated_at": now, "kind": kind,
        "operation": operation, "bucket": record.bucket, "key": record.key,
        "version_id": record.version_id or "", "size": record.size,
        "etag": record.etag or "", "rule_id": rule.rule_id, "endpoint": dest.endpoint,
        "dest_bucket": dest.bucket, "region": dest.region,
        "credential_ref": dest.credential_ref, "storage_class": dest.storage_class,
        "status": PENDING, "attempts": 0, "next_attempt_at": now, "last_error": None,
    }


def selected_rules(config: ReplicationConfiguration, kind: str, key: str,
                   tags: dict[str, str]) -> list[ReplicationRule]:
    rules = match(config, key, tags)
    if kind == DELETE_MARKER:
        return [rule for rule in rules if rule.delete_markers]
    if kind == DELETE:
        return [rule for rule in rules if rule.version_deletes]
    return rules


class JournalConsumer:
    """The outbox consumer that feeds the journal."""

    name = CONSUMER_NAME

    def __init__(self, meta: MetaStore, config: ReplicationConfigService, *,
                 clock: Callable[[], float], wake: Callable[[], None] = lambda: None) -> None:
        self._meta = meta
        self._config = config
        self._clock = clock
        self._wake = wake  # tells the worker there is new work
        self.journaled = 0

    async def deliver(self, entries: Sequence[OutboxEntry]) -> None:
        values: list[dict[str, Any]] = []
        now = self._clock()
        wanted: list[tuple[OutboxEntry, str, ReplicationConfiguration]] = []
        for entry in entries:
            kind = _KINDS.get(entry.kind)
            if kind is None:
                continue
            config = await self._config.configuration(entry.bucket)
            if config is not None:
                wanted.append((entry, kind, config))
        states = await self._meta.version_states(
            [(e.bucket, e.key, e.version_id) for e, kind, _ in wanted if kind != DELETE])
        for entry, kind, config in wanted:
            tags: dict[str, str] = {}
            if kind != DELETE:
                state = states.get((entry.bucket, entry.key, entry.version_id))
                if state is None or state.replication_status == REPLICA:
                    continue  # gone since (a later entry tells) or a replica
                tags = state.tags
            for rule in selected_rules(config, kind, entry.key, tags):
                values.append(journal_values(kind, entry.seq, entry.operation, entry, rule,
                                             now))
        if values:
            self.journaled += await self._meta.journal_add(values)
            self._wake()

__all__ = ["CONSUMER_NAME", "DELETE", "DELETE_MARKER", "LOCK", "PUT", "TAGS", "JournalConsumer",
           "journal_values", "selected_rules"]
