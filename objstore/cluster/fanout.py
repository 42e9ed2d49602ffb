"""Cluster fan-out: the change sink that sends every committed change of this node to the
eligible peers, and counts the acknowledgements of object writes (Cluster rules 1-3).

`FanOut.committed` (a `ChangeSink`, engine/changes.py) sorts each change:

* Origin PEER: ignored. A row a peer sent was applied here; sending it on would bounce it
  around the cluster forever (each node fans out its own writes only).
* Object data plane (OBJECT_WRITTEN, DELETE_MARKER_WRITTEN, VERSION_DELETED): the change
  goes to every eligible peer (`Membership.eligible_peers`, THE predicate) in parallel.
  Toward one peer, in order: the blob (a row with bytes of its own) or the parts' blobs (a
  composite) through `put_blob`, then the row (`send_object`) or the deletion
  (`send_delete`); the row follows even when a blob failed, so the metadata travels and
  the ack says `has_blob: false`. A row whose own blob is small (`wire.INLINE_BLOB_BYTES`)
  carries its bytes instead (one exchange, one sidecar write on the peer: a 3-node quorum
  4 KiB PUT spent ~40 % of its time on the separate blob exchange); a peer that answers
  such a row `has_blob: false` (an older node, which ignores the bytes) gets them the
  old way, then the row again. Each peer's exchange as a whole is bounded by [cluster]
  request_timeout_seconds (past it: no ack): ONE deadline per write and peer, taken when
  the exchange starts and handed to every request of it (the blobs and the row share
  it; a request is not started once it passed), and the exchange is also cancelled
  there, so a hung peer holds a write for request_timeout_seconds, not once per
  request. In quorum mode the awaitable the hook waits
  for raises `gate.quorum_error()` (503 ServiceUnavailable, Retry-After: 5 where rendered)
  when 1 + full acks < write_quorum (`gate.write_acknowledged`): the local commit stands,
  the client is told, anti-entropy propagates the row later. Available mode sends the same
  way and ignores the acks (the client still waits for the sends: the fan-out is what
  brings the write to the others quickly).
* Everything else (TAGS_CHANGED, LOCK_CHANGED, BUCKET_*, IAM_CHANGED, SETTING_CHANGED,
  UPLOAD_CREATED, PART_WRITTEN, UPLOAD_ABORTED, UPLOAD_COMPLETED):
  best effort (rule 3), fire and forget: `committed` returns at once, a `ClusterOp` goes
  to each eligible peer in the background through `send_op`, failures are logged and
  counted, never reported to the client; reconciliation (part 2) repairs what is lost.
  Upload and part changes are notices too: the control-plane snapshot carries uploads,
  the notice makes the peers pull it sooner (a node asked about an upload it does not
  know pulls anyway: cluster/upload_peers.py).

The `ClusterOp` payload (POST /cluster/v1/op; the receiving route is future work) is a
notice, not a command: kind (`ChangeKind` value), bucket, key, version_id, subject (as in
`Change`), at (this node's clock when sent), and for TAGS_CHANGED and LOCK_CHANGED the
committed row (`record`), which the receiver applies by last-writer-wins like
/cluster/v1/object. For the other kinds the receiver reconciles the named entity from the
sender (the control-plane snapshot of rule 6); the payload carries no entity state, so no
secret (credentials) ever travels in an op.

A deletion's stamp (`deleted_at`) is the one its local tombstone got inside the delete
(`Change.deleted_at`: the database's clock raised to the removed row's last_modified,
`lww.tombstone_stamp`), so every node stamps the deletion alike and a write stamped
between the commit and the fan-out wins or loses the same everywhere. Only a change that
carries no stamp falls back to this node's clock when fanned out, raised the same way: no
path of this node reports one today (`ObjectService._delete_version`, which lifecycle
expiry goes through too, passes the stamp; a peer's deletion is never sent on); a sink fed
by hand (a test, a tool) may.

The peers are reached through `PeerSender` (implemented by `cluster.client.ClusterClient`),
the blob files through `BlobSource` (`StoredBlobs`: path, size and SHA-256 of a stored blob,
hashed once per fan-out on the IO pool, not once per peer). `FanOutStats` keeps the
counts the metrics collector reads at scrape time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from objstore.cluster.gate import quorum_error, write_acknowledged
from objstore.cluster.membership import PeerState
from objstore.cluster.wire import INLINE_BLOB_BYTES
from objstore.config import Cluster
from objstore.convergence.ack import Ack, full_acknowledgements
from objstore.convergence.lww import tombstone_stamp
from objstore.engine.changes import Change, ChangeKind, Origin
from objstore.meta.records import ObjectRecord
from objstore.timers import ReactorClock

if TYPE_CHECKING:
    from objstore.blobs.store import BlobStore
    from objstore.threads import Runner

log = Logger()

DATA_PLANE = frozenset({ChangeKind.OBJECT_WRITTEN, ChangeKind.DELETE_MARKER_WRITTEN,
                        ChangeKind.VERSION_DELETED})
BEST_EFFORT = frozenset({ChangeKind.TAGS_CHANGED, ChangeKind.LOCK_CHANGED,
                         ChangeKind.ACL_CHANGED,
                         ChangeKind.BUCKET_CREATED, ChangeKind.BUCKET_DELETED,
                         ChangeKind.BUCKET_CONFIGURED, ChangeKind.IAM_CHANGED,
                         ChangeKind.SETTING_CHANGED, ChangeKind.UPLOAD_CREATED,
                         ChangeKind.PART_WRITTEN, ChangeKind.UPLOAD_ABORTED,
                         ChangeKind.UPLOAD_COMPLETED})
_ROW_OPS = frozenset({ChangeKind.TAGS_CHANGED, ChangeKind.LOCK_CHANGED,
                      ChangeKind.ACL_CHANGED})
_HASH_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class BlobPayload:
    """A stored blob as the blob route sends it: its file, size and SHA-256 (hex, the
    signed x-amz-content-sha256 of the streamed body); `data`: its bytes, read when it is
    small enough to travel inside its row (`wire.INLINE_BLOB_BYTES`)."""

    path: str
    size: int
    sha256: str
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class ClusterOp:
    """The body of POST /cluster/v1/op: a best-effort notice of a control-plane or tag/lock
    change (see the module docstring)."""

    kind: str
    bucket: str = ""
    key: str = ""
    version_id: str | None = None
    subject: str = ""
    at: float = 0.0
    record: ObjectRecord | None = None  # TAGS_CHANGED, LOCK_CHANGED only

    def document(self) -> dict[str, Any]:
        """The JSON fields but `record` (serialized by the sender's wire format)."""
        return {"kind": self.kind, "bucket": self.bucket, "key": self.key,
                "version_id": self.version_id, "subject": self.subject, "at": self.at}


class PeerSender(Protocol):
    """What the fan-out asks of the cluster client. Each call is one signed exchange and
    never raises for a peer's failure: None (or False) is "no acknowledgement".
    `deadline` (the clock's seconds): the exchange ends by then, whatever the request
    timeout would allow."""

    async def send_object(self, base_url: str, record: ObjectRecord, *,
                          deadline: float | None = None, blob: bytes | None = None
                          ) -> Ack | None:
        """`blob`: the row's own blob's bytes (as stored), sent inside the row."""

    async def send_delete(self, base_url: str, bucket: str, key: str, version_id: str,
                          deleted_at: float, *, deadline: float | None = None
                          ) -> Ack | None: ...

    async def put_blob(self, base_url: str, blob_id: str, blob: BlobPayload, *,
                       deadline: float | None = None) -> bool: ...

    async def send_op(self, base_url: str, op: ClusterOp) -> bool: ...


class BlobSource(Protocol):
    async def payload(self, blob_id: str) -> BlobPayload | None:
        """The blob to send; None when it is not here (it is not sent)."""


class EligiblePeers(Protocol):
    def eligible_peers(self) -> tuple[PeerState, ...]: ...


class StoredBlobs:
    """Blobs of this node's BlobStore, measured and hashed on the IO pool."""

    def __init__(self, blobs: BlobStore, io: Runner) -> None:
        self._blobs = blobs
        self._io = io

    async def payload(self, blob_id: str) -> BlobPayload | None:
        return await self._io.run(self._measure, blob_id)

    def _measure(self, blob_id: str) -> BlobPayload | None:
        path = self._blobs.blob_path(blob_id)
        digest = hashlib.sha256()
        size = 0
        small: list[bytes] = []  # the bytes while they fit inside a row
        try:
            with open(path, "rb") as stream:
                while chunk := stream.read(_HASH_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    if size <= INLINE_BLOB_BYTES:
                        small.append(chunk)
        except FileNotFoundError:
            return None
        data = b"".join(small) if size <= INLINE_BLOB_BYTES else None
        return BlobPayload(path, size, digest.hexdigest(), data)


@dataclass
class FanOutStats:
    """Counts since start, read by the metrics collector."""

    writes: int = 0  # data-plane changes fanned out
    peer_sends: int = 0  # data-plane exchanges started (one per peer and write)
    acks: int = 0  # full acknowledgements received
    missed_acks: int = 0  # exchanges that ended without a full acknowledgement
    shortfalls: int = 0  # writes below write_quorum (quorum mode: a 503 to the client)
    ops_sent: int = 0  # best-effort ops a peer accepted
    ops_failed: int = 0
    blob_failures: int = 0
    last_acks: dict[str, bool] = field(default_factory=dict)  # node id -> last ack counted


class FanOut:
    """The cluster's `ChangeSink` (see the module docstring)."""

    def __init__(self, *, cluster: Cluster, membership: EligiblePeers, sender: PeerSender,
                 blobs: BlobSource, clock: ReactorClock) -> None:
        self._cluster = cluster
        self._membership = membership
        self._sender = sender
        self._blobs = blobs
        self._clock = clock
        self.stats = FanOutStats()
        self._in_flight = 0  # best-effort ops not settled yet

    def committed(self, change: Change) -> Deferred[None] | None:
        if change.caller.origin is Origin.PEER:
            return None
        if change.kind in DATA_PLANE:
            return Deferred.fromCoroutine(self._replicate(change))
        if change.kind in BEST_EFFORT:
            self._send_ops(self._op_of(change))
        return None

    # -- data plane ---------------------------------------------------------------------
    async def _replicate(self, change: Change) -> None:
        peers = self._membership.eligible_peers()
        self.stats.writes += 1
        try:
            blobs = await self._payloads(change)
        except Exception:
            # Bytes that can not be read here can not reach a quorum: the write is kept
            # and counted short (a bug must not turn into an unreplicated 200).
            log.failure("reading the blobs of {bucket}/{key} to fan them out",
                        bucket=change.bucket, key=change.key)
            blobs = []
        sends = [self._bounded(self._to_peer(peer.address, change, blobs)) for peer in peers]
        self.stats.peer_sends += len(sends)
        acks = await _gather(sends) if sends else []
        self._count(peers, acks)
        if not write_acknowledged(acks, self._cluster):
            self.stats.shortfalls += 1
            log.warn("{kind} of {bucket}/{key}: {acks} of {peers} peers acknowledged, "
                     "below write_quorum {quorum}; kept here", kind=change.kind.value,
                     bucket=change.bucket, key=change.key,
                     acks=full_acknowledgements(acks), peers=len(peers),
                     quorum=self._cluster.write_quorum)
            raise quorum_error()

    async def _payloads(self, change: Change) -> list[tuple[str, BlobPayload]]:
        """The blobs a peer needs before the row: its own, or its parts' (composite)."""
        record = change.record
        if change.kind is not ChangeKind.OBJECT_WRITTEN or record is None:
            return []
        ids = ([part.blob_id for part in record.parts] if record.parts
               else [record.blob_id] if record.blob_id is not None else [])
        found = []
        for blob_id in ids:
            blob = await self._blobs.payload(blob_id)
            if blob is None:
                log.warn("blob {blob_id} of {bucket}/{key} is not here; its row is sent "
                         "without it", blob_id=blob_id, bucket=record.bucket, key=record.key)
            else:
                found.append((blob_id, blob))
        return found

    async def _to_peer(self, base_url: str, change: Change,
                       blobs: Sequence[tuple[str, BlobPayload]]) -> Ack | None:
        deadline = self._clock.seconds() + self._cluster.request_timeout_seconds
        inline = _inline_blob(change, blobs)
        if inline is not None:
            assert change.record is not None
            ack = await self._sender.send_object(base_url, change.record, deadline=deadline,
                                                 blob=inline)
            if ack is None or ack.has_blob:
                return ack
            # An older peer ignored the bytes: send them the old way, then the row again.
        for blob_id, blob in blobs:
            if not await self._sender.put_blob(base_url, blob_id, blob, deadline=deadline):
                self.stats.blob_failures += 1
        if change.kind is ChangeKind.VERSION_DELETED:
            return await self._sender.send_delete(base_url, change.bucket, change.key,
                                                  change.version_id or "",
                                                  self._deleted_at(change),
                                                  deadline=deadline)
        assert change.record is not None
        return await self._sender.send_object(base_url, change.record, deadline=deadline)

    def _deleted_at(self, change: Change) -> float:
        if change.deleted_at is not None:
            return change.deleted_at
        return tombstone_stamp(self._clock.seconds(), None if change.record is None
                               else change.record.last_modified)

    def _bounded(self, exchange: Any) -> Deferred[Ack | None]:
        """One peer's exchange, cut at request_timeout_seconds; any failure is no ack."""
        sent: Deferred[Ack | None] = Deferred.fromCoroutine(exchange)
        sent.addTimeout(self._cluster.request_timeout_seconds, cast(Any, self._clock))
        sent.addErrback(lambda failure: _no_ack(failure))
        return sent

    def _count(self, peers: Sequence[PeerState], acks: Sequence[Ack | None]) -> None:
        for peer, ack in zip(peers, acks, strict=True):
            counted = ack is not None and ack.counts
            self.stats.acks += counted
            self.stats.missed_acks += not counted
            self.stats.last_acks[peer.node_id or peer.address] = counted

    # -- best effort --------------------------------------------------------------------
    def _op_of(self, change: Change) -> ClusterOp:
        return ClusterOp(kind=change.kind.value, bucket=change.bucket, key=change.key,
                         version_id=change.version_id, subject=change.subject,
                         at=self._clock.seconds(),
                         record=change.record if change.kind in _ROW_OPS else None)

    def _send_ops(self, op: ClusterOp) -> None:
        for peer in self._membership.eligible_peers():
            self._in_flight += 1
            self._bounded_op(peer.address, op)

    def _bounded_op(self, base_url: str, op: ClusterOp) -> Deferred[None]:
        sent: Deferred[bool] = Deferred.fromCoroutine(self._sender.send_op(base_url, op))
        sent.addTimeout(self._cluster.request_timeout_seconds, cast(Any, self._clock))
        return Deferred.fromCoroutine(self._settle_op(sent, base_url, op))

    async def _settle_op(self, sent: Deferred[bool], base_url: str, op: ClusterOp) -> None:
        try:
            accepted: object = await sent
        except Exception as error:  # noqa: BLE001 (best effort: any failure is counted)
            accepted = error
        finally:
            self._in_flight -= 1
        if accepted is True:
            self.stats.ops_sent += 1
            return
        self.stats.ops_failed += 1
        log.info("best-effort {kind} to {peer} not accepted ({why}); reconciliation "
                 "repairs it", kind=op.kind, peer=base_url, why=accepted)

    @property
    def in_flight(self) -> int:
        """Best-effort ops not settled yet."""
        return self._in_flight


def _inline_blob(change: Change, blobs: Sequence[tuple[str, BlobPayload]]
                 ) -> bytes | None:
    """The bytes to send inside the row: its own blob's, when it was small enough to be
    read (a composite's parts and large blobs go through the blob route)."""
    record = change.record
    if (change.kind is not ChangeKind.OBJECT_WRITTEN or record is None or record.parts
            or len(blobs) != 1 or blobs[0][0] != record.blob_id):
        return None
    return blobs[0][1].data


def _no_ack(failure: Any) -> None:
    log.info("no acknowledgement from a peer: {why}", why=failure.value)
    return None


async def _gather(sends: Sequence[Deferred[Ack | None]]) -> list[Ack | None]:
    results = await DeferredList(list(sends), consumeErrors=True)
    return [value if ok else None for ok, value in results]


__all__: list[str] = ["BEST_EFFORT", "DATA_PLANE", "BlobPayload", "BlobSource", "ClusterOp",
                      "FanOut", "FanOutStats", "PeerSender", "StoredBlobs"]
