"""The write gate (open / closed / size exceeded, quorum and available modes), the
acknowledgement count after fan-out and the capacity guard."""

from __future__ import annotations

import pytest

from objstore.cluster import gate
from objstore.cluster.gate import GateState
from objstore.cluster.membership import PeerState
from objstore.config import Cluster
from objstore.convergence.ack import FULL_ACK, Ack, ack_from_response, quorum_satisfied
from objstore.errors import S3_ERRORS


def cluster(size: int, consistency: str = "quorum") -> Cluster:
    return Cluster(enabled=True, cluster_size=size, consistency=consistency)


# -- the gate -------------------------------------------------------------------------


@pytest.mark.parametrize("size, eligible, state", [
    (1, 1, GateState.OPEN), (1, 2, GateState.SIZE_EXCEEDED),
    (2, 1, GateState.CLOSED), (2, 2, GateState.OPEN), (2, 3, GateState.SIZE_EXCEEDED),
    (3, 1, GateState.CLOSED), (3, 2, GateState.OPEN), (3, 3, GateState.OPEN),
    (3, 4, GateState.SIZE_EXCEEDED), (3, 10, GateState.SIZE_EXCEEDED),
    (5, 2, GateState.CLOSED), (5, 3, GateState.OPEN), (5, 5, GateState.OPEN),
    (5, 6, GateState.SIZE_EXCEEDED),
])
def test_the_quorum_gate(size: int, eligible: int, state: GateState) -> None:
    assert gate.gate_state(eligible, cluster(size)) is state


@pytest.mark.parametrize("eligible", [1, 2, 3, 4, 9])
def test_available_mode_never_closes_but_still_reports_size(eligible: int) -> None:
    assert gate.gate_state(eligible, cluster(3, "available")) is GateState.OPEN
    assert gate.size_exceeded(eligible, cluster(3, "available")) is (eligible > 3)


def test_each_closed_state_has_its_own_503() -> None:
    closed = gate.gate_error(GateState.CLOSED)
    exceeded = gate.gate_error(GateState.SIZE_EXCEEDED)
    assert closed is not None and exceeded is not None
    assert closed.code == exceeded.code == "ServiceUnavailable"
    assert closed.status == exceeded.status == 503
    assert closed.message != exceeded.message
    assert "cluster_size" in exceeded.message and "quorum" in closed.message
    assert gate.gate_error(GateState.OPEN) is None


# -- acknowledgements -----------------------------------------------------------------


@pytest.mark.parametrize("status, body, ack", [
    (200, b'{"applied": true, "has_blob": true}', Ack(True, True)),
    (200, b'{"applied": true, "has_blob": false}', Ack(True, False)),
    (200, b'{"applied": false, "has_blob": true}', Ack(False, True)),
    (200, b"", FULL_ACK),  # a legacy peer's empty 200
    (200, b"  \r\n", FULL_ACK),
    (200, b"{}", FULL_ACK),  # fields absent: their legacy meaning
    (200, b'{"applied": true, "has_blob": true, "new_field": [1]}', FULL_ACK),
    (200, b'{"applied": "yes", "has_blob": true}', None),
    (200, b'{"applied": 1, "has_blob": 1}', None),
    (200, b"[true, true]", None),
    (200, b"not json", None),
    (200, b"\xff\xfe", None),
    (403, b'{"applied": true, "has_blob": true}', None),
    (503, b"", None),
    (None, b"", None),
])
def test_an_answer_becomes_an_ack_or_none(status: int | None, body: bytes,
                                          ack: Ack | None) -> None:
    assert ack_from_response(status, body) == ack


def test_an_ack_counts_only_when_applied_and_with_its_blob() -> None:
    assert FULL_ACK.counts
    assert not Ack(True, False).counts and not Ack(False, True).counts


@pytest.mark.parametrize("acks, size, satisfied", [
    ([], 1, True),  # a single node is its own quorum
    ([None, None], 3, False),
    ([FULL_ACK, None], 3, True),
    ([Ack(True, False), Ack(False, True)], 3, False),
    ([Ack(True, False), FULL_ACK], 3, True),
    ([FULL_ACK, None, None, None], 5, False),
    ([FULL_ACK, FULL_ACK, None, None], 5, True),
])
def test_quorum_counts_full_acknowledgements_plus_this_node(
        acks: list[Ack | None], size: int, satisfied: bool) -> None:
    assert quorum_satisfied(acks, cluster(size).write_quorum) is satisfied
    assert gate.write_acknowledged(acks, cluster(size)) is satisfied


def test_an_open_gate_is_no_quorum_the_acks_decide() -> None:
    # Membership said 3 eligible (gate open), but both peers failed the fan-out.
    three = cluster(3)
    assert gate.gate_state(3, three) is GateState.OPEN
    assert not gate.write_acknowledged([None, Ack(True, False)], three)
    error = gate.quorum_error()
    assert error.status == 503 and error.message != gate.CLOSED_MESSAGE


def test_available_mode_ignores_acknowledgements() -> None:
    assert gate.write_acknowledged([None, None], cluster(3, "available"))


# -- capacity -------------------------------------------------------------------------

MIB = 1024**2


def test_the_smallest_eligible_node_bounds_the_cluster() -> None:
    peers = [PeerState("http://a", 0.0, disk_available=10 * MIB),
             PeerState("http://c", 0.0, disk_available=None)]
    free = gate.eligible_free_bytes(500 * MIB, peers)
    assert free == [500 * MIB, 10 * MIB]
    assert gate.capacity_ok(free, write_bytes=4 * MIB, reserve_bytes=6 * MIB)
    assert not gate.capacity_ok(free, write_bytes=4 * MIB + 1, reserve_bytes=6 * MIB)
    assert not gate.capacity_ok([5 * MIB], write_bytes=0, reserve_bytes=6 * MIB)
    assert gate.capacity_ok([], write_bytes=10**12, reserve_bytes=6 * MIB)


def test_the_capacity_refusal_is_507() -> None:
    error = gate.capacity_error()
    assert (error.code, error.status) == ("InsufficientStorage", 507)
    assert S3_ERRORS["InsufficientStorage"][0] == 507
