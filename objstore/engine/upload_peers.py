"""The engine's two questions to a cluster about multipart uploads made through several
nodes (spec Cluster rules 6): "do the peers know this upload (or these parts)?" and "can
the peers give back the bytes of these parts?".

Behind a load balancer a client's CreateMultipartUpload, UploadPart calls and
CompleteMultipartUpload land on different nodes. Uploads and parts travel only in the
control-plane snapshot, so a node may be asked about an upload, or complete with parts,
it has not merged yet, and the bytes of a part uploaded elsewhere are never here. The
engine reaches the cluster only through this interface (docs/ARCHITECTURE.md, Seams), as
it does for writes (`engine/replicator.py`'s `WriteGate`) and missing blobs
(`engine/blob_repair.py`'s `BlobRepair`):

- `refresh()`: pull the control plane of the eligible peers now and merge it (a bounded
  wait; concurrent calls share pulls). `MultipartService` asks it before answering
  NoSuchUpload (UploadPart, UploadPartCopy, ListParts, CompleteMultipartUpload,
  AbortMultipartUpload), before ListParts (parts may have been uploaded through other
  nodes) and before a completion that names a part not held here as named. It answers
  whether the round was complete: every node of the cluster that may hold the upload's
  rows answered. A completion whose part is still not here after an incomplete round
  (a node down, timed out or failing) answers 503 ServiceUnavailable, not the permanent
  InvalidPart: the part may be on the node that could not be asked.
- `fetch_parts(upload, parts)`: before a completion commits, bring every part blob
  missing here from an eligible peer (verified: the part's size and MD5, its ETag);
  True when all of them are here.

A single node has no peers (`NO_UPLOAD_PEERS`: `enabled` False, never asked), so its
multipart behaviour is exactly as before. A cluster node's is
`objstore.cluster.upload_peers.PeerUploads`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from objstore.meta.records import PartRecord, UploadRecord


class UploadPeers(Protocol):
    @property
    def enabled(self) -> bool:
        """False on a single node: nothing to ask."""
        ...

    async def refresh(self) -> bool:
        """Merge the eligible peers' control planes here (bounded; never raises for a
        peer's failure). True when every node that may hold an upload's rows answered:
        what is not here now is nowhere."""
        ...

    async def fetch_parts(self, upload: UploadRecord, parts: Sequence[PartRecord]) -> bool:
        """Bring the locally missing blobs of `parts` (rows of `upload` held here) from
        the peers; True when every one of them is present now."""
        ...


class _NoUploadPeers:
    """A single node: nothing to ask."""

    enabled = False

    async def refresh(self) -> bool:
        return True

    async def fetch_parts(self, upload: UploadRecord, parts: Sequence[PartRecord]) -> bool:
        return True

    def __repr__(self) -> str:
        return "NO_UPLOAD_PEERS"


NO_UPLOAD_PEERS: UploadPeers = _NoUploadPeers()

__all__ = ["NO_UPLOAD_PEERS", "UploadPeers"]
