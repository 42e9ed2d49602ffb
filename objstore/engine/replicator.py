"""The engine's one question to a cluster before a write: may it be accepted here?

The engine reaches the cluster only through this interface (docs/ARCHITECTURE.md, Seams):
`WriteGate.check_write(size_bytes)` is asked before every mutation and raises the refusal as
an `S3Error`: 503 ServiceUnavailable when the cluster write gate is closed or the size is
exceeded, 507 InsufficientStorage when the smallest eligible node has no room for
`size_bytes`. The S3 dispatcher asks it (0 bytes) before the handler of every route that
mutates (s3/routes.py `Route.mutates`); the engine asks it again, with the bytes, before
the local write of an object data-plane change (a new version, a copy, a part, a completed
upload, a delete marker, a version deleted), which is also how writes that no client
request carries are gated. A completion's parts are already on this node (`held_bytes`):
only the peers must find room for them. Reads never ask. A single node has no gate
(`NO_GATE`); a cluster node's gate is `objstore.cluster.write_gate.ClusterWriteGate`.
What happens after the commit (fan-out, the acknowledgement count) is a change sink on the
hook (engine/changes.py), not part of this interface.
"""

from __future__ import annotations

from typing import Protocol


class WriteGate(Protocol):
    def check_write(self, size_bytes: int, *, held_bytes: int = 0) -> None:
        """Raise the S3Error refusing a write of `size_bytes` new bytes (0: none, as for
        a delete), `held_bytes` of which this node already stores; return when it may
        proceed."""


class _NoGate:
    """A single node: every write may proceed (the local disk guard is the space guard's)."""

    def check_write(self, size_bytes: int, *, held_bytes: int = 0) -> None:
        return None

    def __repr__(self) -> str:
        return "NO_GATE"


NO_GATE: WriteGate = _NoGate()

__all__ = ["NO_GATE", "WriteGate"]
