"""Who changes something, and the one hook every committed change passes.

`Caller` is what every engine write takes instead of a bare principal: the principal, the
request id and source address of the request that asked (empty for background work), and
the origin of the change (a client request, the lifecycle worker, the replication worker,
a cluster peer's replicated row applied here). `operation` names the operation: the S3 or
admin route's name for a request (PutObject, CopyObject, CompleteMultipartUpload), the
action of background work (e.g. `Lifecycle::ExpireObject`, which the audit sink records
it as); `details` what such a record adds (the lifecycle rule id). Changes of origin
`peer` pass the hook too: sinks that send changes on (fan-out, events, journals) must
ignore them, so an applied row is never replicated again.

Each engine service reports a committed change through one `ChangeSink`, from one place
per service, after the commit and before the caller gets its answer. Sinks: the audit log
(`objstore.audit.changes`: changes no request records) and, on a cluster node, the
fan-out (`cluster/fanout.py`, whose `committed` may raise an S3Error such as
ServiceUnavailable when the write quorum was not met: the local commit stands and the
client is told). The hook is in memory: a crash between the commit and the sinks loses
the change, which suits these two (anti-entropy backs the fan-out). What must not be lost
(bucket notifications, the replication journal) is delivered from the durable outbox
instead (engine/outbox.py: an entry written in the change's own transaction).
`ChangeHook` calls them in order.

Plain data and one small fan-out: no I/O here (Twisted only for its logger).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from twisted.logger import Logger

from objstore.errors import S3Error
from objstore.iam.identity import Principal
from objstore.meta.records import ObjectRecord

log = Logger()


class Origin(enum.Enum):
    CLIENT = "client"  # an S3 or admin request
    LIFECYCLE = "lifecycle"  # the lifecycle worker acting for a bucket's rules
    REPLICATION = "replication"  # the bucket replication worker
    PEER = "peer"  # a cluster peer's replicated row, applied here


@dataclass(frozen=True, slots=True)
class Caller:
    principal: Principal
    origin: Origin = Origin.CLIENT
    request_id: str = ""
    source_address: str = ""
    operation: str = ""  # the name of a change no request records (background work)
    details: Mapping[str, str] = field(default_factory=dict)

    @property
    def from_client(self) -> bool:
        return self.origin is Origin.CLIENT


class ChangeKind(enum.Enum):
    OBJECT_WRITTEN = "object_written"  # a new version (put, copy, completed upload)
    DELETE_MARKER_WRITTEN = "delete_marker_written"
    VERSION_DELETED = "version_deleted"  # a version or marker removed for good
    TAGS_CHANGED = "tags_changed"  # of an object version
    ACL_CHANGED = "acl_changed"  # of an object version (PutObjectAcl)
    LOCK_CHANGED = "lock_changed"  # retention or legal hold of an object version
    UPLOAD_CREATED = "upload_created"
    UPLOAD_ABORTED = "upload_aborted"
    UPLOAD_COMPLETED = "upload_completed"  # reported before its OBJECT_WRITTEN
    PART_WRITTEN = "part_written"
    BUCKET_CREATED = "bucket_created"
    BUCKET_DELETED = "bucket_deleted"
    BUCKET_CONFIGURED = "bucket_configured"  # versioning, lock, tags, any config document
    IAM_CHANGED = "iam_changed"  # users, credentials, teams, grants, attachments
    SETTING_CHANGED = "setting_changed"


@dataclass(frozen=True, slots=True)
class Change:
    """One committed change. Object kinds carry the committed row (`record`; for a
    version deleted, the row removed); configuration and IAM kinds name their `subject`
    (`versioning`, `user/<id>`, a setting key). A VERSION_DELETED carries `deleted_at`,
    the stamp of the tombstone the deletion left here (the one the cluster fan-out sends
    its peers, so that they stamp theirs alike); None for every other kind."""

    kind: ChangeKind
    caller: Caller
    bucket: str = ""
    key: str = ""
    version_id: str | None = None
    record: ObjectRecord | None = None
    subject: str = ""
    deleted_at: float | None = None


class ChangeSink(Protocol):
    def committed(self, change: Change) -> Awaitable[None] | None:
        """Observe a committed change. Return quickly (queue, do not write); a sink whose
        answer the client must wait for (quorum fan-out) returns an awaitable."""


class ChangeHook:
    """The sinks of a node, called in order for every change. An S3Error from a sink
    reaches the caller (the change stays committed); any other failure of a sink is
    logged and does not fail the write: it was committed."""

    def __init__(self, sinks: Sequence[ChangeSink] = ()) -> None:
        self._sinks = list(sinks)

    def add(self, sink: ChangeSink) -> None:
        self._sinks.append(sink)

    async def committed(self, change: Change) -> None:
        refusal: S3Error | None = None
        for sink in self._sinks:
            try:
                waiting = sink.committed(change)
                if waiting is not None:
                    await waiting
            except S3Error as error:
                refusal = refusal or error
            except Exception:
                log.failure("change sink {sink!r} failed on {kind}", sink=sink,
                            kind=change.kind.value)
        if refusal is not None:
            raise refusal


def background_caller(principal: Principal, origin: Origin, operation: str,
                      **details: str) -> Caller:
    """The caller of work no request asked for (the lifecycle worker's deletes)."""
    return Caller(principal, origin=origin, operation=operation, details=details)


__all__ = ["Caller", "Change", "ChangeHook", "ChangeKind", "ChangeSink",
           "Origin", "background_caller"]
