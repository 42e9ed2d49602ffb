"""The audit log as a sink of the engine's change hook: it records the committed changes
that no request records, those made by background work on this node (the lifecycle
worker, later the replication worker). A client's change is already recorded by the
request observer (`audit.requests`), with its status, bytes and timing, so it is not
recorded twice; a peer's replicated row applied here is not recorded either: the node that
served the client recorded the request, and the audit log is node-local.

The record carries the caller's `operation` (e.g. `Lifecycle::ExpireObject`), the bucket
and key, status 204 (the change happened), the origin as the user name, and the caller's
details (the lifecycle rule id) plus the version or upload the change concerned.
"""

from __future__ import annotations

from objstore.audit.log import AuditSink
from objstore.engine.changes import Change, Origin

CHANGED_STATUS = 204
_RECORDED_ELSEWHERE = frozenset({Origin.CLIENT, Origin.PEER})


class AuditChangeSink:
    def __init__(self, audit: AuditSink) -> None:
        self._audit = audit

    def committed(self, change: Change) -> None:
        caller = change.caller
        if caller.origin in _RECORDED_ELSEWHERE:
            return
        details: dict[str, str] = dict(caller.details)
        if change.version_id is not None:
            details.setdefault("version_id", change.version_id)
        if change.subject:
            details.setdefault("subject", change.subject)
        self._audit.record(caller.operation or change.kind.value, bucket=change.bucket,
                           key=change.key, status=CHANGED_STATUS, user=caller.origin.value,
                           request_id=caller.request_id, source_ip=caller.source_address,
                           **details)


__all__ = ["AuditChangeSink"]
