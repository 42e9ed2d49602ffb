"""What a peer's answer to a replicated write acknowledges (ClusterObjectAck: applied,
has_blob) and how acknowledgements add up to a quorum. Pure: no I/O, no Twisted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from objstore.json_input import parse_json


@dataclass(frozen=True, slots=True)
class Ack:
    """A peer's ClusterObjectAck."""

    applied: bool
    has_blob: bool

    @property
    def counts(self) -> bool:
        return self.applied and self.has_blob


FULL_ACK = Ack(applied=True, has_blob=True)


def ack_from_response(status: int | None, body: bytes) -> Ack | None:
    """The acknowledgement in a peer's answer to POST /cluster/v1/object[/delete]; None when
    the answer is none (no answer, a non-200 status, a body that is not an ack).

    An empty 200 is a legacy peer's full acknowledgement. A field a JSON ack lacks takes
    the legacy meaning, true (wire changes are additive: new fields are defaulted); a field
    of the wrong type makes no ack at all."""
    if status != 200:
        return None
    if not body.strip():
        return FULL_ACK
    try:
        document = parse_json(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(document, dict):
        return None
    applied, has_blob = document.get("applied", True), document.get("has_blob", True)
    if not isinstance(applied, bool) or not isinstance(has_blob, bool):
        return None
    return Ack(applied, has_blob)


def full_acknowledgements(acks: Iterable[Ack | None]) -> int:
    return sum(1 for ack in acks if ack is not None and ack.counts)


def quorum_satisfied(acks: Iterable[Ack | None], write_quorum: int) -> bool:
    """This node's own write plus the peers' full acknowledgements reach the quorum."""
    return 1 + full_acknowledgements(acks) >= write_quorum
