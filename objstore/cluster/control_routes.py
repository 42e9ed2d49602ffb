"""The control plane's cluster routes (what `ClusterApi`'s `/op` and `/control-snapshot`
handlers call):

    POST /cluster/v1/op                a best-effort notice (control_wire.py). tags_changed
                                       and lock_changed carry the committed row: applied
                                       by last-writer-wins (`ReplicationApply`, a lock
                                       change takes a fresh seq), answered with the
                                       ClusterObjectAck. Any other kind: a pull of the
                                       sender's control snapshot is scheduled (coalesced,
                                       `ControlReconciler.notice`); 202 {"accepted": true}
    POST /cluster/v1/control-snapshot  this node's control-plane snapshot (credential
                                       secrets included: only on this authenticated route,
                                       never logged). The request body is ignored ({} today)

`with_bucket` serves the object routes: a row or deletion for a bucket this node does
not hold yet makes it pull the sender's snapshot, then apply once more.

Tags: a tag change stamps the row's `tags_updated_at`, which `convergence/lww.py` orders
after `lock_updated_at`, so a tags_changed op is a row like any other: the newer tags win
on every node whichever change each saw first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from objstore.admin.api import json_body
from objstore.cluster.control_wire import decode_op
from objstore.cluster.wire import WireError, encode_ack
from objstore.engine.changes import Caller
from objstore.errors import AdminError, S3Error
from objstore.meta.records import ObjectRecord

if TYPE_CHECKING:
    from objstore.cluster.api import VerifiedPeer
    from objstore.cluster.control_reconcile import ControlReconciler
    from objstore.convergence.ack import Ack
    from objstore.engine.replication_apply import ReplicationApply
    from objstore.http.site import ObjstoreRequest


T = TypeVar("T")


class ControlRoutes:
    def __init__(self, *, reconciler: ControlReconciler,
                 apply: ReplicationApply | None = None) -> None:
        self._reconciler = reconciler
        self._apply = apply

    async def op(self, request: ObjstoreRequest, caller: Caller, peer: VerifiedPeer,
                 body: bytes) -> bytes:
        try:
            op = decode_op(body)
        except WireError as error:
            raise AdminError("BadRequest", f"Not a cluster op: {error}") from None
        if op.record is None:
            self._reconciler.notice(peer.node_id)
            return json_body(request, 202, {"accepted": True})
        if self._apply is None:
            raise AdminError("ServiceUnavailable", "This node does not apply replicated "
                             "changes yet.")
        ack = await self._row(caller, op.record)
        return json_body(request, 200, encode_ack(ack))

    async def _row(self, caller: Caller, record: ObjectRecord) -> Ack:
        assert self._apply is not None
        try:
            return await self._apply.apply_replicated(caller, record)
        except S3Error as error:
            if error.status in (400, 404, 409):
                raise AdminError({400: "BadRequest", 404: "NotFound", 409: "Conflict"}[
                    error.status], f"{error.code}: {error.message}") from None
            raise

    async def with_bucket(self, peer: VerifiedPeer, work: Callable[[], Awaitable[T]]) -> T:
        """`work` (applying a peer's row or deletion); when it finds no bucket, the
        sender's control snapshot is pulled and merged first and `work` runs once more
        (a bucket created and written to at once reaches this node with its first row,
        not only with the notice)."""
        try:
            return await work()
        except S3Error as error:
            if error.code != "NoSuchBucket":
                raise
            try:
                pulled = await self._reconciler.pull_now(peer.node_id)
            except Exception:  # noqa: BLE001 (the row's refusal is the answer)
                pulled = False
            if not pulled:
                raise error from None
        return await work()

    async def snapshot(self, request: ObjstoreRequest) -> bytes:
        body = await self._reconciler.snapshot()
        request.setResponseCode(200)
        request.setHeader("Content-Type", "application/json")
        request.setHeader("Content-Length", str(len(body)))
        return body


__all__ = ["ControlRoutes"]
