"""The engine's one question to a cluster when a read finds a blob missing: can the peers
give it back?

The engine reaches the cluster only through this interface (docs/ARCHITECTURE.md, Seams),
as it does for writes (`engine/replicator.py`'s `WriteGate`). A read (GET, the source of a
copy or of an UploadPartCopy) that finds a blob of a version missing on this node, while
the version's row still references it, asks `BlobRepair.repair_missing(record)`: the
cluster fetches every missing blob of that version (a plain object's blob, a composite's
parts) from an eligible peer, verifies it against the row, stores it durably with the
row's sidecar, and answers True when all of them are here now; the read then starts
again. False (no peer had it, or what came did not match) keeps the answer a missing blob
gets without a cluster. A single node has no peers (`NO_REPAIR`: never asked to do
anything, `enabled` False), so its reads behave exactly as before. A cluster node's
repair is `objstore.cluster.blob_repair.PeerBlobRepair`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from objstore.meta.records import ObjectRecord

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore


class BlobRepair(Protocol):
    @property
    def enabled(self) -> bool:
        """False on a single node: reads need not look for missing blobs ahead."""
        ...

    async def repair_missing(self, record: ObjectRecord) -> bool:
        """Bring back the locally missing blobs of `record` (a row this node holds) from
        peers; True when every blob of it is present now."""
        ...


class _NoRepair:
    """A single node: nothing to ask."""

    enabled = False

    async def repair_missing(self, record: ObjectRecord) -> bool:
        return False

    def __repr__(self) -> str:
        return "NO_REPAIR"


NO_REPAIR: BlobRepair = _NoRepair()


async def repair_after_missing(meta: MetaStore, repair: BlobRepair,
                               record: ObjectRecord) -> bool:
    """A read found a blob of `record` missing: True when `repair` brought it back for a
    row that still references it (read again). False on a single node, when the row
    changed or went (the reader's usual answer follows: look the key up again) or when no
    peer could give the blob back (the answer a missing blob gets without a cluster)."""
    if not repair.enabled:
        return False
    current = await meta.get_object(record.bucket, record.key, record.version_id)
    if current is None or current.blob_id != record.blob_id:
        return False
    return await repair.repair_missing(current)


__all__ = ["NO_REPAIR", "BlobRepair", "repair_after_missing"]
